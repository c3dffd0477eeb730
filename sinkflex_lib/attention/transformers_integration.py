"""Registration into Hugging Face transformers, so gpt-oss models can run on `sink_attention`.

`register_transformers("sinkflex")` registers two functions under one name:

- an attention function (`AttentionInterface`) that gpt-oss's `GptOssAttention` calls with
  `s_aux=self.sinks` and `sliding_window=` (128 on sliding layers, None on full ones);
- a mask function (`AttentionMaskInterface`). Without it transformers hands a custom
  attention name `attention_mask=None`: no causal and no padding mask, and no error. Ours
  returns only the key padding, a (B, Nk) bool tensor (None when nothing is padded); causality
  and the window are applied by `SinkMask` inside the attention, so no O(N^2) mask is built.

Then `GptOssForCausalLM(config)` with `config._attn_implementation = "sinkflex"` (or
`from_pretrained(path, attn_implementation="sinkflex")`) trains and generates on it.
"""

from __future__ import annotations

import functools

import torch

from .api import sink_attention


def sinkflex_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                               sliding_window=None, s_aux=None, backend="auto", **kwargs):
    """transformers attention-interface signature: query (B, Hq, Nq, D), key/value
    (B, Hkv, Nk, D) -> (attn_output (B, Nq, Hq, D), None). Attention weights are never
    materialized, so none are returned."""
    if dropout and module is not None and module.training:
        raise NotImplementedError(f"attention dropout is not supported by sink_attention (got {dropout})")
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(
            "sinkflex attention expects the (B, Nk) key-padding mask made by its own mask function; "
            f"got a {attention_mask.dim()}-D mask. Register both with register_transformers() and do "
            "not pass a prepared 4-D mask.")
    out = sink_attention(query, key, value, s_aux, window=sliding_window, scale=scaling,
                         backend=backend, key_padding_mask=attention_mask)
    return out.transpose(1, 2).contiguous(), None


def sinkflex_padding_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
                          attention_mask=None, **kwargs):
    """transformers mask-interface signature. Returns the (B, kv_length) bool key-padding mask
    for keys [kv_offset, kv_offset + kv_length), or None when no key is padded."""
    if isinstance(q_offset, int) and isinstance(kv_offset, int) and q_offset != kv_offset + kv_length - q_length:
        raise NotImplementedError(
            "sinkflex attention assumes the queries are the last keys of the cache "
            f"(q_offset == kv_offset + kv_length - q_length); got q_offset={q_offset}, "
            f"kv_offset={kv_offset}, kv_length={kv_length}, q_length={q_length}. "
            "Use a dynamic cache (the default of generate()).")
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:
        raise ValueError(f"expected a 2-D (B, N) padding mask, got shape {tuple(attention_mask.shape)}")
    mask = attention_mask.to(torch.bool)
    missing = kv_offset + kv_length - mask.shape[-1]
    if missing > 0:  # cache slots not yet written count as padding
        mask = torch.nn.functional.pad(mask, (0, missing), value=False)
    mask = mask[:, kv_offset:kv_offset + kv_length]
    return None if bool(mask.all()) else mask


def register_transformers(name: str = "sinkflex", backend: str = "auto") -> str:
    """Register `sink_attention` (with the given backend) under `name` in transformers'
    AttentionInterface and AttentionMaskInterface. Returns the name; idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    from .api import BACKENDS

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    AttentionInterface.register(name, functools.partial(sinkflex_attention_forward, backend=backend))
    AttentionMaskInterface.register(name, sinkflex_padding_mask)
    return name
