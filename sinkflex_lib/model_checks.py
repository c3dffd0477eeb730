"""Is a model the same model on another attention implementation?

`compare_attention_implementations` builds two seeded copies of a gpt-oss model (same weights,
two `attn_implementation`s), runs one padded batch through both with a masked next-token loss,
and reports the logits' and every parameter gradient's relative error. `greedy_generate_match`
runs greedy `generate()` on both. Used by notebook 02 ("sinkflex" against "eager").
"""

from __future__ import annotations

import torch

from .attention.compare import rel_err
from .machine import deterministic_backward
from .models import build_gpt_oss


def padded_batch(lengths, total: int, vocab_size: int, side, seed: int = 0):
    """Random token ids (B, total) and an attention mask with lengths[i] real tokens per row,
    padded on side[i] ("left" or "right"); pad positions hold token 0."""
    if len(lengths) != len(side):
        raise ValueError(f"lengths and side must have the same length, got {len(lengths)} and {len(side)}")
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), total, dtype=torch.long)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    for i, (n, s) in enumerate(zip(lengths, side)):
        if not 1 <= n <= total:
            raise ValueError(f"lengths[{i}] must be in [1, {total}], got {n}")
        if s not in ("left", "right"):
            raise ValueError(f"side[{i}] must be 'left' or 'right', got {s!r}")
        sl = slice(total - n, total) if s == "left" else slice(0, n)
        ids[i, sl] = torch.randint(1, vocab_size, (n,), generator=g)
        mask[i, sl] = 1
    return ids, mask


def _run(model, input_ids, attention_mask, with_grad):
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    model.zero_grad(set_to_none=True)
    with torch.set_grad_enabled(with_grad):
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    if with_grad:
        deterministic_backward(out.loss)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), out.loss.detach(), grads


def compare_attention_implementations(impl, reference="eager", *, input_ids, attention_mask,
                                      config="micro", seed: int = 0, with_grad: bool = True,
                                      device: str = "cpu") -> dict:
    """Logits (at real tokens) and loss of model(impl) against model(reference), same seed
    (float32, on `device`); with with_grad also every parameter gradient of the masked
    next-token loss.

    Returns dict(logits_rel_err, loss_abs_err, grad_rel_err (max over parameters, NaN without
    grads), worst_param, n_params (parameters compared))."""
    a = build_gpt_oss(config, attn_implementation=impl, seed=seed).to(device)
    b = build_gpt_oss(config, attn_implementation=reference, seed=seed).to(device)
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    la, loss_a, ga = _run(a, input_ids, attention_mask, with_grad)
    lb, loss_b, gb = _run(b, input_ids, attention_mask, with_grad)
    real = attention_mask.bool()
    result = dict(logits_rel_err=rel_err(la[real], lb[real]), loss_abs_err=(loss_a - loss_b).abs().item(),
                  grad_rel_err=float("nan"), worst_param=None, n_params=0)
    if with_grad:
        if set(ga) != set(gb):
            raise RuntimeError(f"the two models have gradients for different parameters: "
                               f"{sorted(set(ga) ^ set(gb))}")
        errs = {n: rel_err(ga[n], gb[n]) for n in gb}
        worst = max(errs, key=errs.get)
        result.update(grad_rel_err=errs[worst], worst_param=worst, n_params=len(errs))
    return result


def greedy_generate_match(impl, reference="eager", *, input_ids, attention_mask, max_new_tokens: int,
                          config="micro", seed: int = 0) -> tuple[bool, torch.Tensor, torch.Tensor]:
    """Greedy generate() with both implementations (rows should be left-padded). Returns
    (identical, tokens of impl, tokens of reference), new tokens only."""
    outs = []
    for name in (impl, reference):
        model = build_gpt_oss(config, attn_implementation=name, seed=seed).eval()
        with torch.no_grad():
            gen = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                                 max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                                 pad_token_id=0)
        outs.append(gen[:, input_ids.shape[1]:])
    return torch.equal(outs[0], outs[1]), outs[0], outs[1]
