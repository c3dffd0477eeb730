"""Weight averaging of policies trained from one start (a "model soup", Wortsman et al., 2022).

Runs that start from the same weights and differ only in their seeds each move by what their
data share and by their own noise. The mean of their weights keeps the shared move and shrinks
the independent part (by about 1/sqrt(n) for n runs of equal noise). With the start itself among
the sources, weights [1 - a, a/n, ..., a/n] give start + a * (mean of the n runs - start): a < 1
interpolates towards the start (WiSE-FT, Wortsman et al., 2022), a > 1 goes further along the runs'
mean move (weights may be negative; they sum to 1).

    python -m sinkflex_lib.rl.soup --out DEST SOURCE [SOURCE ...] [--weights W ...]

A source is a policy directory (``config.json``, ``model.safetensors``, the tokenizer) or a shipped
checkpoint's name; a GRPO run's weights become one with ``python -m sinkflex_lib.rl.checkpoints RUN
DIR``. DEST gets the first source's config and tokenizer, the weighted mean of every tensor, and
``soup.json`` (sources, weights).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from .checkpoints import weights_dir, write_weights_dir


def soup_weights(n: int, weights: list[float] | None = None) -> list[float]:
    """`weights` checked (one per source, summing to 1), or n equal ones."""
    if n < 1:
        raise ValueError("a soup needs at least one source")
    weights = [1 / n] * n if weights is None else list(weights)
    if len(weights) != n or abs(sum(weights) - 1) > 1e-9:
        raise ValueError(f"need one weight per state dict, summing to 1; got {weights} for {n}")
    return weights


def mean_state_dict(state_dicts: list[dict[str, torch.Tensor]], weights: list[float] | None = None) -> dict:
    """The weighted mean of state dicts with the same keys, shapes and dtypes, tensor by tensor
    (accumulated in float64, returned in each tensor's dtype). weights: one per state dict, summing
    to 1 (default: equal). Integer and bool tensors must agree across the dicts; they are kept."""
    weights = soup_weights(len(state_dicts), weights)
    first = state_dicts[0]
    for i, sd in enumerate(state_dicts[1:], 1):
        if sd.keys() != first.keys():
            raise ValueError(f"state dict {i} has other keys than the first: "
                             f"{sorted(set(sd) ^ set(first))[:5]}")
        for k, v in sd.items():
            if v.shape != first[k].shape or v.dtype != first[k].dtype:
                raise ValueError(f"{k}: {tuple(v.shape)} {v.dtype} in state dict {i}, "
                                 f"{tuple(first[k].shape)} {first[k].dtype} in the first")
    out = {}
    for k, v in first.items():
        if v.is_floating_point():
            acc = sum(w * sd[k].double() for w, sd in zip(weights, state_dicts))
            out[k] = acc.to(v.dtype)
        elif all(torch.equal(sd[k], v) for sd in state_dicts):
            out[k] = v.clone()
        else:
            raise ValueError(f"{k}: a non-float tensor that differs between the state dicts")
    return out


def soup(sources: list[str | Path], dest: str | Path, weights: list[float] | None = None) -> Path:
    """Write the weighted mean of the policies `sources` (directories or shipped names) to `dest`,
    with the first source's config and tokenizer and ``soup.json``. The sources' configs must be equal."""
    from safetensors.torch import load_file

    dirs = [weights_dir(s) for s in sources]
    configs = [json.loads((d / "config.json").read_text()) for d in dirs]
    for d, c in zip(dirs[1:], configs[1:]):
        if c != configs[0]:
            diff = sorted(k for k in set(c) | set(configs[0]) if c.get(k) != configs[0].get(k))
            raise ValueError(f"{d}'s config differs from {dirs[0]}'s in {diff}")
    weights = soup_weights(len(dirs), weights)
    mean = mean_state_dict([load_file(str(d / "model.safetensors")) for d in dirs], weights)
    dest = write_weights_dir(dest, dirs[0], mean)
    (dest / "soup.json").write_text(json.dumps({"sources": [str(d) for d in dirs], "weights": weights},
                                               indent=1) + "\n")
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.rl.soup",
                                 description="the weighted mean of policies trained from one start")
    ap.add_argument("sources", nargs="+", help="policy directories or shipped checkpoint names")
    ap.add_argument("--out", required=True, help="the policy directory to write")
    ap.add_argument("--weights", type=float, nargs="+", help="one per source, summing to 1 (default: equal)")
    args = ap.parse_args(argv)
    try:
        dest = soup(args.sources, args.out, args.weights)
    except (FileNotFoundError, ValueError) as e:
        ap.error(str(e))
    print(f"wrote {dest}: the mean of {len(args.sources)} policies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
