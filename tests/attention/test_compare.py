"""The backend error table: its float64 rows are at rounding level, flex reports forward only
on the CPU, and rel_err is the measure it says it is."""

import math

import pytest
import torch

from sinkflex_lib.attention.compare import AttentionCase, backend_errors, make_case_inputs, per_head_rel_err, rel_err
from tests.attention.reference import reference_attention


def test_per_head_rel_err_is_rel_err_of_each_head():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64)
    x = ref + 1e-3 * torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64) * torch.tensor([1.0, 10.0, 0.0]).view(1, 3, 1, 1)
    got = per_head_rel_err(x.float(), ref)
    assert got.shape == (3,) and got.dtype == torch.float64 and got[2] < 1e-7
    assert torch.allclose(got, torch.tensor([rel_err(x[:, h].float(), ref[:, h]) for h in range(3)], dtype=torch.float64))
    ref[:, 1] = 0.0                                    # an all-zero head: the absolute error, as rel_err
    ref[:, 2, 0, 0] = x[:, 2, 0, 0] = float("-inf")    # matching infinities (LSE rows with no key) agree
    got = per_head_rel_err(x, ref)
    assert got[1] == x[:, 1].abs().max() and torch.isfinite(got).all() and got[2] < 1e-12


def test_rel_err():
    ref = torch.tensor([1.0, -4.0, 2.0], dtype=torch.float64)
    assert rel_err(ref + torch.tensor([0.0, 0.0, 0.4], dtype=torch.float64), ref) == pytest.approx(0.1)
    assert rel_err(torch.tensor([0.5]), torch.tensor([0.0])) == 0.5  # absolute where ref is zero
    inf = torch.tensor([float("-inf"), 1.0])
    assert rel_err(inf, inf) == 0.0


def test_table_rows_and_accuracy():
    cases = [AttentionCase("causal", n_q=40, n_k=40, d=8, sink_range=None),
             AttentionCase("gqa-window", b=2, hq=4, hkv=2, n_q=20, n_k=50, d=8, window=7, prefix=3,
                           sink_range=30.0)]
    rows = backend_errors(cases, dtypes=(torch.float64, torch.float32), tile=16)
    assert len(rows) == 2 * 3 * 2
    for r in rows:
        assert {"name", "backend", "dtype", "grads", "out", "lse", "dq", "dk", "dv", "dsinks"} <= set(r)
        tol = 1e-10 if r["dtype"] == "float64" else 1e-5
        assert r["out"] < tol and r["lse"] < tol
        if r["backend"] == "flex":
            assert r["grads"] is False and math.isnan(r["dq"])
        else:
            assert r["grads"] is True
            gtol = 1e-10 if r["dtype"] == "float64" else 1e-4
            assert max(r["dq"], r["dk"], r["dv"]) < gtol
            assert math.isnan(r["dsinks"]) == (r["name"] == "causal")


@pytest.mark.cuda
def test_on_cuda_the_table_checks_flex_gradients_too():
    cases = [AttentionCase("gqa-window", b=2, hq=4, hkv=2, n_q=64, n_k=64, d=16, window=7, prefix=3, sink_range=4.0)]
    rows = backend_errors(cases, dtypes=(torch.float32,), device="cuda")
    flex = [r for r in rows if r["backend"] == "flex"]
    assert flex and all(r["grads"] for r in flex)
    assert all(max(r["out"], r["lse"]) < 1e-5 and max(r["dq"], r["dk"], r["dv"], r["dsinks"]) < 1e-4 for r in rows)


def test_reference_inside_table_is_the_independent_one():
    """The table's reference output equals tests/attention/reference.py on the same inputs: a
    backend made wrong on purpose (scale off by 1%) shows up in the table."""
    case = AttentionCase("c", n_q=16, n_k=16, d=8, window=5, prefix=2)
    q, k, v, sinks, _ = make_case_inputs(case, seed=0)
    ref, _ = reference_attention(q, k, v, sinks, window=5, prefix=2)
    from sinkflex_lib.attention.explicit import explicit_sink_attention
    torch.testing.assert_close(explicit_sink_attention(q, k, v, sinks, window=5, prefix=2), ref,
                               rtol=1e-12, atol=1e-12)
    wrong = explicit_sink_attention(q, k, v, sinks, window=5, prefix=2, scale=1.01 * 8 ** -0.5)
    assert rel_err(wrong, ref) > 1e-4
