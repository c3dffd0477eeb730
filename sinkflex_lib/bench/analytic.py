"""An analytic model of the attention's memory in one training step.

Notation: B batch, N sequence length, Hq query heads, Hkv key/value heads, D head dim,
L layers, b bytes per element of the model dtype, T the blocked backend's query tile.

eager (transformers' gpt-oss `eager_attention_forward`): per layer it forms the scores
(B, Hq, N, N), appends the sink column, subtracts the row max and takes the softmax. Autograd
keeps the softmax output P = B*Hq*N*(N+1)*b for the backward of each layer (the matmuls keep q
and the repeated k, v: O(N)). While one layer runs backward, more P-sized tensors are alive at
once (the gradient of the probabilities, the softmax gradient, the gradient routed through the
row max); the model counts `EAGER_TRANSIENT_COPIES` = 2 of them at the peak, so

    eager  ~  L * P  +  2 * P  +  O(N)            quadratic in N.

blocked (our tiled autograd function) keeps q, k, v, the output and the float32 LSE per layer,
and recomputes each tile's probabilities in backward. Its working set is one tile of scores,
probabilities and their gradients: about 4 * B'*Hq*T*K float32 values, with K the keys a tile sees
(N for a full layer, W + T for a sliding one) and B' the batch rows of one chunk
(`blocked.batch_chunk`: as many as fit 2**21 scores, at least one), so

    blocked ~  L * B*N*((2*Hq + 2*Hkv)*D*b + 4*Hq)  +  4 * B'*Hq*T*K*4  +  O(N)    linear in N.

flex (FlexAttention on CUDA) saves the same O(N) tensors; its tiles live in on-chip memory.

This counts the attention only. The rest of the step (embeddings, MoE MLPs, logits and loss,
gradients) is linear in N and the same for every backend; the measured peak includes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..attention.blocked import DEFAULT_TILE, batch_chunk

EAGER_TRANSIENT_COPIES = 2  # P-sized tensors beside the saved ones at the peak of one layer
BLOCKED_TILE_TENSORS = 4    # s/p, dp/ds, p * dp and a transposed copy for one tile chunk (float32)


@dataclass(frozen=True)
class AttentionMemory:
    backend: str
    seq: int
    saved_bytes: int      # kept from forward for backward, all layers
    transient_bytes: int  # working set of the layer being differentiated

    @property
    def total_bytes(self) -> int:
        return self.saved_bytes + self.transient_bytes

    @property
    def total_gb(self) -> float:
        return self.total_bytes / 1e9


def _shape(config):
    hq = config.num_attention_heads
    hkv = config.num_key_value_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // hq
    layer_types = list(getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers)
    return hq, hkv, d, layer_types, getattr(config, "sliding_window", None)


def attention_memory(config, backend: str, seq: int, batch: int = 1, dtype_bytes: int = 4,
                     tile: int = DEFAULT_TILE) -> AttentionMemory:
    """Analytic attention memory of one training step of a gpt-oss `config` (a GptOssConfig)
    for `backend` in ('eager', 'blocked', 'flex'), sequence length `seq`, batch `batch`."""
    if backend not in ("eager", "blocked", "flex"):
        raise ValueError(f"backend must be one of ('eager', 'blocked', 'flex'), got {backend!r}")
    if seq < 1 or batch < 1:
        raise ValueError(f"seq and batch must be >= 1, got seq={seq}, batch={batch}")
    hq, hkv, d, layer_types, window = _shape(config)
    n_layers, n, bsz, b = len(layer_types), int(seq), int(batch), int(dtype_bytes)
    if backend == "eager":
        probs = bsz * hq * n * (n + 1) * b
        linear = 3 * bsz * hq * n * d * b  # q and the repeated k, v kept by the two matmuls
        masks = len(set(layer_types)) * bsz * n * n * b  # transformers' additive float masks
        return AttentionMemory(backend, n, n_layers * (probs + linear), EAGER_TRANSIENT_COPIES * probs + masks)
    saved = n_layers * bsz * n * ((2 * hq + 2 * hkv) * d * b + 4 * hq)
    if backend == "flex":
        return AttentionMemory(backend, n, saved, 0)
    keys = n if "full_attention" in layer_types or not window else min(n, window + tile)
    rows = hq * min(tile, n)
    transient = BLOCKED_TILE_TENSORS * batch_chunk(bsz, rows, keys) * rows * keys * 4
    return AttentionMemory(backend, n, saved, transient)
