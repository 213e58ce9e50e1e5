"""Metrics reduce as they declare, against hand-computed values."""

import jax.numpy as jnp
import pytest

from evorl import metrics as M


def test_over_steps_counts_only_the_steps_taken():
    values = jnp.array([[1.0, 5.0], [3.0, 9.0]])  # [E, M]
    taken = jnp.array([[1.0, 1.0], [1.0, 0.0]])  # the last step was skipped (early stop)
    out = M.over_steps({"loss": values, "peak": M.Metric(values, "max"), "n": M.Metric(values, "sum")}, taken)
    assert float(out["loss"].value) == pytest.approx((1 + 5 + 3) / 3)
    assert float(out["peak"].value) == 5.0  # the skipped step's 9 is not counted
    assert float(out["n"].value) == 9.0
    assert out["peak"].reduction == "max" and out["loss"].reduction == "mean"


def test_accumulate_and_per_iteration():
    totals = M.zeros_like_totals({"loss": jnp.zeros(()), "peak": M.Metric(jnp.zeros(()), "max"),
                                  "count": M.Metric(jnp.zeros(()), "sum")})
    for loss, peak, count in ((1.0, 2.0, 3.0), (3.0, 1.0, 4.0)):
        totals = M.accumulate(totals, {"loss": jnp.asarray(loss), "peak": M.Metric(jnp.asarray(peak), "max"),
                                       "count": M.Metric(jnp.asarray(count), "sum")})
    host = M.per_iteration(totals, 2)
    assert host == {"loss": 2.0, "peak": 2.0, "count": 7.0}


def test_unknown_reduction_is_refused():
    with pytest.raises(ValueError, match="reduction"):
        M.Metric(jnp.zeros(()), "median")
