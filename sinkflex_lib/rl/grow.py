"""Depth growth of a policy that keeps what it computes (block expansion, Wu et al., 2024, LLaMA Pro).

Each chosen layer i of a gpt-oss policy is followed by a copy of itself whose output
projections are zero: the attention's ``o_proj`` (weight and bias) and every expert's
``down_proj`` (weight and bias). A zero output adds nothing to the residual stream, so the grown
model computes the same logits as its source, while the copy's attention heads and experts start
from the source's and learn once training moves its output projections. The copy keeps layer i's
type (sliding or full attention). This is how the repository tries "a larger model" without
pretraining one from random weights.

    python -m sinkflex_lib.rl.grow SOURCE --after 1 3 --out DEST

SOURCE is a policy directory or a shipped checkpoint's name; DEST gets the grown config and weights,
SOURCE's tokenizer files and ``grow.json`` (source, the layers copied).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch

from .checkpoints import weights_dir, write_weights_dir

# The parameters of a gpt-oss layer that write into the residual stream (zero in a copy).
OUTPUT_PROJECTIONS = ("self_attn.o_proj.weight", "self_attn.o_proj.bias",
                      "mlp.experts.down_proj", "mlp.experts.down_proj_bias")
_LAYER_KEY = re.compile(r"^(.*\.layers\.)(\d+)\.(.+)$")


def grown_order(n_layers: int, after: list[int]) -> list[tuple[int, bool]]:
    """The grown stack as (source layer, is_copy) pairs: each layer of `after` followed by its copy."""
    bad = [i for i in after if not 0 <= i < n_layers]
    if bad or len(set(after)) != len(after) or not after:
        raise ValueError(f"after must list distinct layers in 0..{n_layers - 1}; got {after}")
    return [(i, copy) for i in range(n_layers) for copy in ((False, True) if i in after else (False,))]


def grown_config(config: dict, after: list[int]) -> dict:
    """`config` (a gpt-oss config.json) with the copies of the layers `after` inserted."""
    order = grown_order(config["num_hidden_layers"], after)
    out = {**config, "num_hidden_layers": len(order)}
    if "layer_types" in config:
        out["layer_types"] = [config["layer_types"][i] for i, _ in order]
    return out


def grown_state_dict(state: dict[str, torch.Tensor], n_layers: int, after: list[int]) -> dict[str, torch.Tensor]:
    """`state` with each layer of `after` followed by a copy whose `OUTPUT_PROJECTIONS` are zero."""
    order = grown_order(n_layers, after)
    layers: dict[int, dict[str, tuple[str, torch.Tensor]]] = {}
    out = {}
    for key, value in state.items():
        m = _LAYER_KEY.match(key)
        if m is None:
            out[key] = value
        else:
            layers.setdefault(int(m[2]), {})[m[3]] = (m[1], value)
    for j, (i, copy) in enumerate(order):
        if copy and not all(name in layers[i] for name in OUTPUT_PROJECTIONS):
            raise ValueError(f"layer {i} lacks a gpt-oss layer's output projections {OUTPUT_PROJECTIONS}")
        for name, (prefix, value) in layers[i].items():
            zero = copy and name in OUTPUT_PROJECTIONS
            out[f"{prefix}{j}.{name}"] = torch.zeros_like(value) if zero else value.clone()
    return out


def grow(source: str | Path, dest: str | Path, after: list[int]) -> Path:
    """Write the policy `source` (a directory or shipped name), grown by copies of the layers
    `after`, to the policy directory `dest`, with ``grow.json``."""
    from safetensors.torch import load_file

    src = weights_dir(source)
    config = json.loads((src / "config.json").read_text())
    new_config = grown_config(config, after)
    state = grown_state_dict(load_file(str(src / "model.safetensors")), config["num_hidden_layers"], after)
    dest = write_weights_dir(dest, src, state, new_config)
    (dest / "grow.json").write_text(json.dumps({"source": str(src), "after": list(after),
                                                "layers": [config["num_hidden_layers"],
                                                           new_config["num_hidden_layers"]]}, indent=1) + "\n")
    return dest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sinkflex_lib.rl.grow",
                                 description="grow a policy by copies of its layers that start as identities")
    ap.add_argument("source", help="a policy directory or a shipped checkpoint's name")
    ap.add_argument("--after", type=int, nargs="+", required=True, help="the layers to follow by a copy")
    ap.add_argument("--out", required=True, help="the policy directory to write")
    args = ap.parse_args(argv)
    try:
        dest = grow(args.source, args.out, args.after)
    except (FileNotFoundError, ValueError) as e:
        ap.error(str(e))
    layers = json.loads((dest / "grow.json").read_text())["layers"]
    print(f"wrote {dest}: {layers[0]} -> {layers[1]} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
