"""The /proc peak-RSS helpers the CPU sweep relies on."""

import numpy as np

from sinkflex_lib.bench import procmem


def test_reset_peak_then_measure_an_allocation():
    assert procmem.supported()
    procmem.release_free_memory()
    base = procmem.rss_bytes()
    assert procmem.reset_peak()
    assert abs(procmem.peak_rss_bytes() - procmem.rss_bytes()) < 8 << 20  # the mark starts at RSS
    a = np.ones(200_000_000 // 8)  # 200 MB, touched
    del a
    peak = procmem.peak_rss_bytes() - base
    assert 190e6 < peak < 260e6
    assert procmem.rss_bytes() - base < 50e6  # freed (a large block is its own mapping)
    assert procmem.read_status(999_999_999) == {}
