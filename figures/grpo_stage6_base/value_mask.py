"""Scratch: weight of the argument-value tokens of sampled tool calls in the GRPO loss."""
import torch
from sinkflex_lib.envs.actions import argument_value_spans


def turn_runs(mask):
    """(start, end) of each contiguous run of mask-1 positions."""
    runs, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i)); start = None
    return runs


def value_positions(tok, ids, mask, end_id):
    """Positions of tokens that overlap a string argument value of a sampled tool call."""
    out = []
    for s, e in turn_runs(mask):
        turn = [t for t in ids[s:e]]
        if turn and turn[-1] == end_id:
            turn = turn[:-1]
        text = tok.decode(turn)
        spans = argument_value_spans(text)
        if not spans:
            continue
        ends = [len(tok.decode(turn[:k + 1])) for k in range(len(turn))]
        starts = [0] + ends[:-1]
        for k, (a, b) in enumerate(zip(starts, ends)):
            if any(a < se and b > ss for _, ss, se in spans):
                out.append(s + k)
    return out
