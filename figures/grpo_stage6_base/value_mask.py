"""Scratch: the positions of the argument-value tokens of sampled tool calls (their GRPO loss weight, arm_script.py)."""
from sinkflex_lib.envs.actions import argument_value_spans
from sinkflex_lib.rl.warmstart import span_weights


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
        turn = ids[s:e - 1] if ids[e - 1] == end_id else ids[s:e]
        spans = [(a, b, 0.0) for _, a, b in argument_value_spans(tok.decode(turn))]
        if not spans:
            continue
        ends = [len(tok.decode(turn[:k + 1])) for k in range(len(turn))]
        weights = span_weights(list(zip([0] + ends[:-1], ends)), spans)
        out += [s + k for k, w in enumerate(weights) if w == 0.0]
    return out
