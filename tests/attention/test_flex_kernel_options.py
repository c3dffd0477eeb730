"""Which FlexAttention kernel a call asks for (the kernels themselves: test_flex.py, on CUDA)."""

import pytest

from sinkflex_lib.attention.flex import kernel_options


@pytest.mark.parametrize("n_q, group, forced", [
    (1, 8, False),       # single-token decoding: the flex-decoding kernel's 8 rows
    (16, 8, False),      # 128 rows: still one sparse block
    (17, 8, True),       # 136 rows: the decoding kernel would have no config
    (106, 8, True),      # the prefill that failed on the H200
    (100, 1, False),
    (4096, 8, True),     # long queries: the standard kernel, as inductor picks anyway
])
def test_short_queries_with_many_rows_per_kv_head_take_the_standard_kernel(n_q, group, forced):
    assert kernel_options(n_q, group) == ({"BACKEND": "TRITON"} if forced else {})
