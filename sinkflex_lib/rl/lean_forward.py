"""A lean inference forward of gpt-oss for the rollout's decode loop: the same math in fewer operations.

On a CPU a decode forward of the tiny policy is bound by per-operation overhead, not arithmetic:
transformers' `GptOssForCausalLM` spends ~350 small operations a call (mask construction per layer
type, three projections, rotary embedding through several views, a Python loop over experts,
output records), about 16 ms at batch 32, for ~0.1 GFLOP. `LeanGptOss` computes the same logits
from the same weights in fewer, larger operations:

- q, k and v come from one fused projection (weights concatenated once per rollout);
- the sink attention is computed directly (scores, one softmax with the sink logit as an extra
  column, one matmul) under :class:`~sinkflex_lib.attention.mask.SinkMask`'s rule (causal, the window over
  real-token positions, key padding). In a decode step (one token a row) the visibility is one
  additive bias per window size, shared by the layers of that size, and a sliding layer reads only
  the slots inside the window; a longer feed (a prompt, an observation) attends row by row over
  that row's real keys, so the left pads of a batch's feed cost nothing;
- token-wise work (norms, projections, experts) runs on the real tokens only (plus every row's
  last slot, whose logits are returned);
- a step with few tokens evaluates every expert densely and weighs the outputs by the router's
  top-k weights (zero elsewhere): the same sum as the loop over chosen experts, as two matrix
  products over the experts laid side by side; a larger step calls the model's own expert module;
- only the last position's logits are formed.

The cache is the rollout's :class:`~.kv_cache.RolloutCache` (same slots, same pads as the model's
own forward would write; a pad no query keeps holds zeros), so the decode loop and its repacking
are unchanged.
Logits equal the model's forward within float rounding (tests, float32: padded rows, rows with
nothing to feed, both layer types, query chunks, both expert forms, a cache that grows and is
repacked). Weights are read when `LeanGptOss` is built: build it again after an optimizer step
(the rollout builds one per call). Measured on the CPU only (no GPU here); the math is the same on
any device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..attention.blocked import SCORE_BUDGET
from ..attention.mask import SinkMask

DENSE_EXPERT_TOKENS = 256   # at most this many tokens: every expert on every token (decode steps)


def supports(model) -> bool:
    """True for a plain (not adapter-wrapped) GptOssForCausalLM on the sinkflex attention."""
    cfg = getattr(model, "config", None)
    return (type(model).__name__ == "GptOssForCausalLM"
            and str(getattr(cfg, "_attn_implementation", "")).startswith("sinkflex"))


@dataclass
class _Experts:
    """One layer's router and experts, laid out for the dense form (the weights, not copies, where
    the layout allows)."""
    router_w: torch.Tensor       # (E, H)
    router_b: torch.Tensor       # (E,)
    top_k: int
    count: int                   # E
    gate_up: torch.Tensor        # (H, E * 2I): expert e's gate columns, then its up columns
    gate_up_b: torch.Tensor      # (E * 2I,) in the same order
    down: torch.Tensor           # (E * I, H): the down projections stacked
    down_b: torch.Tensor         # (E, H)
    limit: float
    alpha: float

    @classmethod
    def of(cls, mlp) -> "_Experts":
        r, e = mlp.router, mlp.experts
        gu, gb = e.gate_up_proj.detach(), e.gate_up_proj_bias.detach()   # gpt-oss interleaves gate, up
        gate_up = torch.stack([gu[..., ::2], gu[..., 1::2]], dim=2)          # (E, H, 2, I)
        return cls(r.weight.detach(), r.bias.detach(), r.top_k, e.num_experts,
                   gate_up.permute(1, 0, 2, 3).reshape(e.hidden_size, -1).contiguous(),
                   torch.stack([gb[:, ::2], gb[:, 1::2]], dim=1).reshape(-1),
                   e.down_proj.detach().reshape(-1, e.hidden_size), e.down_proj_bias.detach(),
                   float(e.limit), float(e.alpha))


@dataclass
class _Layer:
    norm1: torch.Tensor
    w_qkv: torch.Tensor          # (Hq*D + 2*Hkv*D, H)
    b_qkv: torch.Tensor | None
    o_proj: torch.nn.Module
    sinks: torch.Tensor          # (Hkv, G, 1, 1): the head h = kv * G + g
    window: int | None
    scale: float                 # the attention's score scale
    norm2: torch.Tensor
    mlp: torch.nn.Module         # the model's own MoE block (feeds of many tokens)
    experts: _Experts


class LeanGptOss:
    """The inference forward (module docstring) of one GptOssForCausalLM's current weights."""

    def __init__(self, model):
        if not supports(model):
            raise ValueError("LeanGptOss needs a GptOssForCausalLM on a 'sinkflex' attention; got "
                             f"{type(model).__name__} on {getattr(model.config, '_attn_implementation', None)!r}")
        cfg, base = model.config, model.model
        self.base, self.lm_head = base, model.lm_head
        self.hq, self.hkv, self.d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.eps = cfg.rms_norm_eps
        rot = base.rotary_emb
        self.inv_freq, self.rope_scale = rot.inv_freq.float(), float(rot.attention_scaling)
        self.layers = [self._layer(layer) for layer in base.layers]

    def _layer(self, layer) -> _Layer:
        at = layer.self_attn
        projs = (at.q_proj, at.k_proj, at.v_proj)
        bias = None if at.q_proj.bias is None else torch.cat([p.bias for p in projs]).detach()
        g = self.hq // self.hkv
        return _Layer(layer.input_layernorm.weight.detach(), torch.cat([p.weight for p in projs]).detach(), bias,
                      at.o_proj, at.sinks.detach().float().view(self.hkv, g, 1, 1), at.sliding_window, at.scaling,
                      layer.post_attention_layernorm.weight.detach(), layer.mlp, _Experts.of(layer.mlp))

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                 cache) -> torch.Tensor:
        """input_ids, position_ids (B, L): the fed tokens (left pads have position ids too);
        attention_mask (B, n): every slot of the cache after this feed (1 = real token), its
        last L columns the fed ones'. Appends to `cache`; returns the last slot's logits (B, V)."""
        b, n_new = input_ids.shape
        keep = attention_mask[:, -n_new:].bool().clone()
        keep[:, -1] = True                         # the last slot's logits are returned, pad or not
        sel = keep.flatten().nonzero().squeeze(1)  # kept slots, row by row: row r's are contiguous
        h = self.base.embed_tokens(input_ids.flatten()[sel])                       # (N, H)
        cos, sin = self._rope(position_ids.flatten()[sel], h.dtype)
        plan = _DecodeBias(attention_mask) if n_new == 1 else _RowPlan(attention_mask, keep, self.hq)
        for i, layer in enumerate(self.layers):
            x = F.rms_norm(h.float(), (h.shape[-1],), layer.norm1.float(), self.eps).to(h.dtype)
            h = h + layer.o_proj(self._attention(layer, i, x, cos, sin, sel, keep.shape, plan, cache))
            x = F.rms_norm(h.float(), (h.shape[-1],), layer.norm2.float(), self.eps).to(h.dtype)
            h = h + self._experts(layer, x)
        last = torch.cumsum(keep.sum(1), 0) - 1                                    # each row's last slot in h
        x = F.rms_norm(h[last].float(), (h.shape[-1],), self.base.norm.weight.float(), self.eps).to(h.dtype)
        return self.lm_head(x)

    def _rope(self, pos: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = pos[:, None].float() * self.inv_freq.to(pos.device)
        return (freqs.cos() * self.rope_scale).to(dtype), (freqs.sin() * self.rope_scale).to(dtype)

    def _attention(self, layer: _Layer, i: int, x, cos, sin, sel, shape, plan, cache) -> torch.Tensor:
        """(N, Hq*D) attention outputs of the N kept tokens; appends this feed's keys and values (B, Hkv, L, D)
        to the cache (zeros on the pads not kept: no query ever sees a pad)."""
        (b, n_new), hq, hkv, d = shape, self.hq, self.hkv, self.d
        qkv = F.linear(x, layer.w_qkv, layer.b_qkv).view(x.shape[0], hq + 2 * hkv, d)
        qkv = torch.cat([_rotate(qkv[:, :hq + hkv], cos[:, None], sin[:, None]), qkv[:, hq + hkv:]], dim=1)
        if n_new == 1:                                                             # every row's one slot is kept
            kv = qkv[:, hq:].view(b, 1, 2 * hkv, d)
        else:
            kv = qkv.new_zeros(b * n_new, 2 * hkv, d).index_copy_(0, sel, qkv[:, hq:]).view(b, n_new, 2 * hkv, d)
        kv = kv.transpose(1, 2)
        k, v = cache.update(kv[:, :hkv], kv[:, hkv:], i)
        scale = layer.scale
        if n_new == 1:
            start, bias = plan.bias(layer.window)
            q = qkv[:, :hq].view(b, hq, 1, d)
            return _sink_attention(q, k[:, :, start:], v[:, :, start:], layer.sinks, bias, scale).view(b, hq * d)
        out = []
        for r, (q0, q1), ks, bias in plan.chunks(layer.window):
            q = qkv[q0:q1, :hq].transpose(0, 1)[None]                                # (1, Hq, l, D)
            z = _sink_attention(q, k[r:r + 1, :, ks], v[r:r + 1, :, ks], layer.sinks, bias, scale)
            out.append(z[0].transpose(0, 1).reshape(q1 - q0, hq * d))
        return torch.cat(out)

    def _experts(self, layer: _Layer, x: torch.Tensor) -> torch.Tensor:
        """The MoE MLP on x (N, H). Few tokens: every expert densely, as two matrix products over the
        experts laid side by side, weighted by the router's top-k weights (0 elsewhere)."""
        if x.shape[0] > DENSE_EXPERT_TOKENS:
            return layer.mlp(x[None])[0][0]
        n, e = x.shape[0], layer.experts
        top, idx = torch.topk(F.linear(x, e.router_w, e.router_b), e.top_k, dim=-1)
        weights = x.new_zeros(n, e.count, 1).scatter_(1, idx[..., None], torch.softmax(top, dim=1)[..., None])
        gate_up = torch.addmm(e.gate_up_b, x, e.gate_up).view(n, e.count, 2, -1)
        gate, up = gate_up[:, :, 0].clamp(max=e.limit), gate_up[:, :, 1].clamp(-e.limit, e.limit)
        act = (up + 1).mul_(weights) * gate * torch.sigmoid(gate * e.alpha)            # (N, E, I)
        return torch.addmm(weights[..., 0] @ e.down_b, act.view(n, -1), e.down)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """gpt-oss's rotary embedding on x (N, heads, D): halves (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _bias(ok: torch.Tensor) -> torch.Tensor:
    """An additive attention bias: 0 where `ok`, -inf elsewhere (float32)."""
    return torch.zeros(ok.shape, dtype=torch.float32, device=ok.device).masked_fill_(~ok, float("-inf"))


class _DecodeBias:
    """The attention biases (B, 1, 1, 1, n - start) of a decode step (one slot fed per row), one per
    window size, built on first use and shared by the layers of that size. SinkMask's rule over token
    positions p (`SinkMask.positions`: real keys before a slot, minus one on a pad): key slot j is
    visible to the fed slot t iff j is real, p_j <= p_t and p_t - p_j < window. A windowed bias
    starts at the first slot any row sees (`start`): earlier keys are cut, not masked."""

    def __init__(self, attention_mask: torch.Tensor):
        self.real = attention_mask.bool()                                          # (B, n)
        self.kpos = SinkMask.positions(self.real)
        self.qpos = self.kpos[:, -1:]                                              # (B, 1)
        self._biases = {}

    def bias(self, window: int | None) -> tuple[int, torch.Tensor]:
        if window not in self._biases:
            start, real, kpos = 0, self.real, self.kpos
            if window is not None:   # positions never decrease along a row's slots
                start = int(torch.searchsorted(kpos, self.qpos - window + 1).min())
                real, kpos = real[:, start:], kpos[:, start:]
            ok = real & (kpos <= self.qpos)
            if window is not None:
                ok &= self.qpos - kpos < window
            self._biases[window] = start, _bias(ok)[:, None, None, None]
        return self._biases[window]


class _RowPlan:
    """The attention of a multi-token feed (a prompt, an observation), row by row over real keys only:
    left pads cost nothing. Row r's kept queries are a contiguous range of the packed tokens; its keys
    are its real cache slots, whose token positions are 0..n_r-1 (a query at position p sees keys
    p - window + 1 .. p). A row whose scores would pass `SCORE_BUDGET` is cut into query chunks."""

    def __init__(self, attention_mask: torch.Tensor, keep: torch.Tensor, hq: int):
        real = attention_mask.bool()
        kpos = SinkMask.positions(real)[:, -keep.shape[1]:]
        counts, offset, self.rows = keep.sum(1).tolist(), 0, []
        for r, count in enumerate(counts):
            keys = real[r].nonzero().squeeze(1)
            qpos = kpos[r][keep[r]]
            step = max(1, SCORE_BUDGET // (hq * max(1, len(keys))))
            for c in range(0, count, step):
                self.rows.append((r, (offset + c, offset + min(count, c + step)), keys, qpos[c:c + step]))
            offset += count
        self._chunks = {}

    def chunks(self, window: int | None) -> list:
        """[(row, (first, end) packed query range, key slots, bias (1, 1, 1, l, n')), ...] for `window`."""
        if window not in self._chunks:
            out = []
            for r, span, keys, qpos in self.rows:
                start = 0 if window is None else max(0, int(qpos[0]) - window + 1)
                kpos = torch.arange(start, len(keys), device=keys.device)
                ok = kpos[None] <= qpos[:, None]
                if window is not None:
                    ok &= qpos[:, None] - kpos[None] < window
                out.append((r, span, keys[start:], _bias(ok)[None, None, None]))
            self._chunks[window] = out
        return self._chunks[window]


def _sink_attention(q, k, v, sinks, bias, scale: float) -> torch.Tensor:
    """Sink attention, every score at once. q (B, Hq, L, D); k, v (B, Hkv, n, D); sinks (Hkv, G, 1, 1);
    bias broadcastable to (B, Hkv, G, L, n). Returns (B, Hq, L, D): the softmax over the scores and the
    sink logit as one more column (gpt-oss's eager form), the sink's weight dropped (its value is 0);
    a query that sees no key gets 0. One fused softmax is faster here than the exp/sum passes of
    the output-scale form."""
    b, hq, n_new, d = q.shape
    hkv, g, n = k.shape[1], hq // k.shape[1], k.shape[2]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    s = torch.matmul(q.to(acc).reshape(b, hkv, g * n_new, d) * scale, k.to(acc).transpose(-1, -2))
    s = s.view(b, hkv, g, n_new, n) + bias
    p = torch.softmax(torch.cat([s, sinks.to(acc).expand(b, hkv, g, n_new, 1)], dim=-1), dim=-1)
    z = torch.matmul(p[..., :n].reshape(b, hkv, g * n_new, n), v.to(acc))
    return z.view(b, hq, n_new, d).to(q.dtype)
