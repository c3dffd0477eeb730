"""Scratch (session 48): how far each layer's output projections are from zero (Frobenius norms of
the attention's o_proj and the experts' down_proj) in policy directories: the grown layers start at 0.
    python norms.py LABEL=POLICY_DIR ... > output_projection_norms.md"""
import json
import sys
from pathlib import Path

from safetensors.torch import load_file

NAMES = ("self_attn.o_proj.weight", "mlp.experts.down_proj")


def norms(folder: Path) -> list[tuple[str, float, float]]:
    """(layer type, o_proj norm, down_proj norm) per layer."""
    config = json.loads((folder / "config.json").read_text())
    state = load_file(str(folder / "model.safetensors"))
    return [(config["layer_types"][j], *(state[f"model.layers.{j}.{n}"].norm().item() for n in NAMES))
            for j in range(config["num_hidden_layers"])]


def main(items: list[str]) -> None:
    print("| policy | layer | type | o_proj norm | experts' down_proj norm |\n|---|---:|---|---:|---:|")
    for item in items:
        label, folder = item.split("=", 1)
        for j, (kind, o, d) in enumerate(norms(Path(folder))):
            print(f"| {label} | {j} | {kind} | {o:.3f} | {d:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
