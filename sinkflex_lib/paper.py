"""The paper's reported numbers (arXiv 2608.10357, CC BY 4.0), one source for every table,
figure and target that sets ours beside them. Table 1 and Figure 4 are, in the paper's words,
"visually estimated from dashboard screenshots"; Table 2 is peak VRAM of gpt-oss on a GPU."""

VALIDATION_MEAN_AT_1 = (0.25, 0.44)   # §6.2.1, Table 1: retail validation mean@1, early and late
TRAINING_SCORE = (0.18, 0.40)         # Figure 4: the training-score proxy, early and late
TRAJECTORY_REWARD_LATE = 0.39         # Figure 4: the trajectory-reward proxy at the end of the window

# §6.3: the sequence lengths of the memory study
MEMORY_LENGTHS = (1024, 2048, 4096, 8192)
# Table 2: peak VRAM (GB) of one training step; None: out of memory. 1024 and 2048 are not in the text.
PEAK_VRAM_GB = {4096: {"eager": 28.06, "sink-flex": 22.52}, 8192: {"eager": None, "sink-flex": 25.53}}


def vram_reduction(n: int) -> float | None:
    """Table 2's relative saving of sink-flex against eager at `n` tokens (None where eager OOMs)."""
    row = PEAK_VRAM_GB[n]
    return None if row["eager"] is None else 1 - row["sink-flex"] / row["eager"]
