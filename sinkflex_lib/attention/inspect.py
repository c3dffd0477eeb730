"""Looking inside a block mask: which tiles FlexAttention skips, computes partially, or fully.

FlexAttention cuts the (Nq, Nk) mask into block_size x block_size tiles. A tile whose entries
are all hidden is skipped (never loaded); a full tile is computed without evaluating the mask;
a partial tile is computed with the mask applied. `block_states` reads those three kinds from
a `BlockMask`; `dense_block_states` derives them from a dense boolean mask instead (the
independent check); `block_sparsity` is the share of skipped tiles; `draw_dense_mask` and
`draw_block_states` put either on a matplotlib axis.
"""

from __future__ import annotations

import math

import torch

from .mask import SinkMask

BLOCK_EMPTY, BLOCK_PARTIAL, BLOCK_FULL = 0, 1, 2
STATE_NAMES = {BLOCK_EMPTY: "skipped", BLOCK_PARTIAL: "partial (mask applied)", BLOCK_FULL: "full"}


def block_states(block_mask, batch: int = 0, head: int = 0) -> torch.Tensor:
    """(n_q_blocks, n_k_blocks) int64 tensor of BLOCK_EMPTY / BLOCK_PARTIAL / BLOCK_FULL, read
    from a FlexAttention BlockMask's partial (kv_indices) and full (full_kv_indices) lists.

    A mask built with B=None, H=None has one batch and one head entry; `batch` and `head` pick
    one otherwise."""
    nb = block_mask.kv_num_blocks[batch, head].cpu()
    idx = block_mask.kv_indices[batch, head].cpu()
    n_qb, n_kb = idx.shape[0], idx.shape[1]
    out = torch.zeros(n_qb, n_kb, dtype=torch.int64)
    for r in range(n_qb):
        out[r, idx[r, :nb[r]].long()] = BLOCK_PARTIAL
    if block_mask.full_kv_num_blocks is not None:
        fnb = block_mask.full_kv_num_blocks[batch, head].cpu()
        fidx = block_mask.full_kv_indices[batch, head].cpu()
        for r in range(n_qb):
            out[r, fidx[r, :fnb[r]].long()] = BLOCK_FULL
    return out


def dense_block_states(dense: torch.Tensor, block_size: int = 128) -> torch.Tensor:
    """The same classification from a dense (Nq, Nk) boolean mask: a tile is empty if none of
    its entries is visible, full if all are, partial otherwise. Lengths that are not multiples
    of block_size are padded with hidden entries (so a ragged edge tile is never full)."""
    if dense.dim() != 2 or dense.dtype != torch.bool:
        raise ValueError(f"dense must be a 2-D bool tensor, got {dense.dtype} {tuple(dense.shape)}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    n_q, n_k = dense.shape
    n_qb, n_kb = math.ceil(n_q / block_size), math.ceil(n_k / block_size)
    padded = torch.zeros(n_qb * block_size, n_kb * block_size, dtype=torch.bool)
    padded[:n_q, :n_k] = dense.cpu()
    tiles = padded.view(n_qb, block_size, n_kb, block_size).transpose(1, 2)
    count = tiles.sum(dim=(-1, -2))
    out = torch.full((n_qb, n_kb), BLOCK_PARTIAL, dtype=torch.int64)
    out[count == 0] = BLOCK_EMPTY
    out[count == block_size * block_size] = BLOCK_FULL
    return out


def block_sparsity(mask: SinkMask, n_q: int, n_k: int | None = None, block_size: int = 128) -> float:
    """Share of block_size x block_size tiles that FlexAttention skips for `mask` (0..1)."""
    n_k = n_q if n_k is None else n_k
    states = block_states(mask.block_mask(n_q, n_k, device="cpu", block_size=block_size))
    return (states == BLOCK_EMPTY).double().mean().item()


def draw_dense_mask(ax, dense: torch.Tensor, title: str | None = None, block_size: int | None = None,
                    prefix: int = 0, legend: bool = True):
    """Draw a dense boolean mask (visible = dark, with a key in the legend) on `ax`; an optional
    grid every block_size; the first `prefix` key columns outlined in red, so that a prefix
    stays visible where the picture has more keys than pixels."""
    from matplotlib.patches import Patch, Rectangle

    ax.imshow(dense.cpu().numpy(), cmap="Greys", vmin=0, vmax=1.4, interpolation="nearest",
              aspect="equal")
    _grid(ax, dense.shape, block_size, offset=-0.5)
    handles = [Patch(facecolor=_grey(1.0 / 1.4), edgecolor="0.5", label="visible"),
               Patch(facecolor="white", edgecolor="0.5", label="masked")]
    if prefix:
        ax.add_patch(Rectangle((-0.5, -0.5), prefix, dense.shape[0], fill=False, edgecolor="C3", lw=1.2))
        handles.append(Patch(facecolor="none", edgecolor="C3", label=f"prefix keys j < {prefix}"))
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position t")
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(handles=handles, loc="upper right", fontsize=7, framealpha=0.9)


def _grey(value: float):
    """The colour matplotlib's "Greys" colormap gives `value` (0 white .. 1 black)."""
    from matplotlib import colormaps

    return colormaps["Greys"](value)


def draw_block_states(ax, states: torch.Tensor, block_size: int, title: str | None = None,
                      legend: bool = True):
    """Draw block states (skipped / partial / full) as an image whose pixels are tiles, with axes
    in token positions."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    colors = ["#f2f2f2", "#f4a259", "#2a6f97"]
    n_qb, n_kb = states.shape
    ax.imshow(states.numpy(), cmap=ListedColormap(colors), vmin=-0.5, vmax=2.5,
              interpolation="nearest", aspect="equal",
              extent=(0, n_kb * block_size, n_qb * block_size, 0))
    _grid(ax, (n_qb * block_size, n_kb * block_size), block_size, offset=0.0)
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position t")
    if title:
        ax.set_title(title)
    if legend:
        handles = [Patch(facecolor=colors[s], edgecolor="0.5", label=STATE_NAMES[s])
                   for s in (BLOCK_EMPTY, BLOCK_PARTIAL, BLOCK_FULL)]
        ax.legend(handles=handles, loc="upper right", fontsize=8, framealpha=0.9)


def _grid(ax, shape, block_size, offset):
    """Tile boundaries every block_size positions (offset: where pixel edges sit)."""
    ax.grid(False)
    if block_size is None:
        return
    n_q, n_k = shape
    for x in range(block_size, n_k, block_size):
        ax.axvline(x + offset, color="0.6", lw=0.5)
    for y in range(block_size, n_q, block_size):
        ax.axhline(y + offset, color="0.6", lw=0.5)
