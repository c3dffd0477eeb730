"""Small gpt-oss models built from a config (no weights are ever downloaded).

`gpt_oss_config(name)` names an attention/model shape; `build_gpt_oss(config_or_name,
attn_implementation=...)` makes a randomly initialised `GptOssForCausalLM` with learned sinks
drawn from N(0, 1) (a freshly constructed model leaves them uninitialised), ready to run on
"eager" or on our "sinkflex" attention.
"""

from __future__ import annotations

import torch

# Every preset keeps gpt-oss's structure: learned sinks, alternating sliding / full layers,
# grouped-query attention, mixture-of-experts MLP.
PRESETS = {
    # seconds on a CPU: tests and the smoke profile (also the "micro" policy)
    "micro": dict(vocab_size=256, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=2,
                  num_experts_per_tok=1, sliding_window=16),
    # the cpu profile's model (also the "tiny" policy, base-tiny): ~1.2M parameters plus embeddings
    "tiny": dict(vocab_size=1000, hidden_size=128, intermediate_size=128, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                 num_experts_per_tok=2, sliding_window=128),
    # gpt-oss-20b's attention shape (hidden 2880, 64 query heads, 8 KV heads, head dim 64,
    # window 128), fewer layers so a single GPU holds a training step; bf16 by convention
    "gpt-oss-20b": dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880,
                        num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8,
                        head_dim=64, num_local_experts=32, num_experts_per_tok=4,
                        sliding_window=128),
}


def gpt_oss_config(name: str = "micro", **overrides):
    """A `GptOssConfig` for preset `name` (one of PRESETS), with keyword overrides
    (e.g. num_hidden_layers=2). RoPE is plain (no YaRN) and long enough for 64k tokens."""
    from transformers import GptOssConfig

    if name not in PRESETS:
        raise ValueError(f"name must be one of {sorted(PRESETS)}, got {name!r}")
    kwargs = dict(PRESETS[name], max_position_embeddings=65536,
                  rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
                  attention_dropout=0.0, tie_word_embeddings=False)
    kwargs.update(overrides)
    n_layers = kwargs["num_hidden_layers"]
    kwargs.setdefault("layer_types", ["sliding_attention" if i % 2 == 0 else "full_attention"
                                      for i in range(n_layers)])
    return GptOssConfig(**kwargs)


def build_gpt_oss(config="micro", attn_implementation: str = "sinkflex", seed: int = 0,
                  dtype: torch.dtype = torch.float32, device="cpu"):
    """A randomly initialised GptOssForCausalLM. `config` is a preset name or a GptOssConfig.

    attn_implementation "sinkflex" registers our attention (backend "auto") if needed;
    "sinkflex-eager" / "sinkflex-blocked" / "sinkflex-flex" pin a backend. Seeded.
    """
    from transformers import GptOssForCausalLM

    cfg = gpt_oss_config(config) if isinstance(config, str) else config
    ensure_registered(attn_implementation)
    cfg._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    with torch.device(device):
        model = GptOssForCausalLM(cfg)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_(0.0, 1.0)
    return model.to(dtype)


def set_attention(model, attn_implementation: str):
    """Switch a built model to another attention implementation in place."""
    ensure_registered(attn_implementation)
    model.set_attn_implementation(attn_implementation)
    return model


def ensure_registered(attn_implementation: str) -> None:
    """Register "sinkflex" (auto backend) or "sinkflex-<backend>" on first use."""
    from .attention import BACKENDS, register_transformers

    if attn_implementation == "sinkflex":
        register_transformers("sinkflex", backend="auto")
    elif attn_implementation.startswith("sinkflex-"):
        backend = attn_implementation.split("-", 1)[1]
        if backend not in BACKENDS:
            raise ValueError(f"attn_implementation 'sinkflex-<backend>' needs a backend in {BACKENDS}, "
                             f"got {attn_implementation!r}")
        register_transformers(attn_implementation, backend=backend)
