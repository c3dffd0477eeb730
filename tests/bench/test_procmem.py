"""The /proc peak-RSS helpers the CPU sweep relies on.

The allocation is measured in a fresh interpreter, as the sweep measures each point in its own
subprocess: in the test process, libraries imported by other test modules can change how the
allocator returns freed memory to the OS.
"""

import json
import subprocess
import sys

from sinkflex_lib.bench import procmem

MEASURE = """
import json
import numpy as np
from sinkflex_lib.bench import procmem
procmem.release_free_memory()
base = procmem.rss_bytes()
ok = procmem.reset_peak()
start_gap = abs(procmem.peak_rss_bytes() - procmem.rss_bytes())
a = np.ones(200_000_000 // 8)  # 200 MB, touched
del a
print(json.dumps({"reset": ok, "start_gap": start_gap, "peak": procmem.peak_rss_bytes() - base,
                  "after_free": procmem.rss_bytes() - base}))
"""


def test_reset_peak_then_measure_an_allocation():
    assert procmem.supported()
    out = subprocess.run([sys.executable, "-c", MEASURE], capture_output=True, text=True, check=True)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["reset"]
    assert m["start_gap"] < 8 << 20           # the mark starts at RSS
    assert 190e6 < m["peak"] < 260e6
    assert m["after_free"] < 50e6             # freed (a large block is its own mapping)
    assert procmem.read_status(999_999_999) == {}
