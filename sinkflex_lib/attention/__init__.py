"""Sink-aware attention: masks, eager reference, FlexAttention, blocked, transformers hook.

    from sinkflex_lib.attention import sink_attention, SinkMask, register_transformers
"""

from .api import BACKENDS, resolve_backend, sink_attention
from .mask import SinkMask
from .sink_scale import sink_scale
from .transformers_integration import register_transformers, sinkflex_attention_forward

__all__ = ["BACKENDS", "SinkMask", "register_transformers", "resolve_backend", "sink_attention",
           "sink_scale", "sinkflex_attention_forward"]
