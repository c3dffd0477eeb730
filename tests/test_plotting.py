"""The plotting helpers: the moving average against its closed form."""

import pytest

from sinkflex_lib.plotting import smooth


def test_smooth_is_the_closed_form_moving_average():
    values, w = [3.0, -1.0, 4.0, 1.0, 5.0], 0.7
    # s_t = w^t v_0 + (1 - w) * sum_{i=1..t} w^(t-i) v_i
    want = [w ** t * values[0] + (1 - w) * sum(w ** (t - i) * values[i] for i in range(1, t + 1))
            for t in range(len(values))]
    assert smooth(values, w) == pytest.approx(want, rel=1e-12)
    assert smooth(values, 0.0) == values and smooth([], 0.5) == []


def test_smooth_refuses_a_weight_outside_zero_one():
    for w in (-0.1, 1.0):
        with pytest.raises(ValueError, match="weight"):
            smooth([1.0], w)
