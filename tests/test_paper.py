"""The paper's numbers: Table 2's stated saving follows from its stated GB values."""
import pytest

from sinkflex_lib import paper


def test_table2_saving_matches_the_papers_own_statement():
    # the text: "reduces peak VRAM from 28.06 GB to 22.52 GB, a reduction of 5.54 GB or 19.7%"
    row = paper.PEAK_VRAM_GB[4096]
    assert row["eager"] - row["sink-flex"] == pytest.approx(5.54)
    assert round(100 * paper.vram_reduction(4096), 1) == 19.7
    assert paper.vram_reduction(8192) is None           # eager is out of memory there

