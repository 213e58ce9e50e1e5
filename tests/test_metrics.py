"""Metrics reduce as they declare, against hand-computed values."""

import jax.numpy as jnp
import pytest

from evorl.rl import metrics as M


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


def test_min_reduction_over_steps_and_iterations():
    values = jnp.array([[0.5, 0.2], [0.9, 0.1]])  # [E, M]
    taken = jnp.array([[1.0, 1.0], [1.0, 0.0]])  # the 0.1 step was skipped
    out = M.over_steps({"low": M.Metric(values, "min")}, taken)
    assert float(out["low"].value) == pytest.approx(0.2) and out["low"].reduction == "min"
    totals = M.zeros_like_totals({"low": M.Metric(jnp.zeros(()), "min")})
    assert float(totals["low"].value) == float("inf")  # the identity of min
    for value in (0.4, 0.3, 0.7):
        totals = M.accumulate(totals, {"low": M.Metric(jnp.asarray(value), "min")})
    assert M.per_iteration(totals, 3) == {"low": pytest.approx(0.3)}


def test_gradient_update_reports_the_gradient_norm_before_clipping():
    import jax
    import optax

    from evorl.rl.agent import AgentState
    from evorl.rl.collectives import agent_gradient_update

    params = {"w": jnp.array([3.0, -4.0]), "b": jnp.array(2.0)}

    def loss_fn(agent_state, x):
        p = agent_state.params
        return jnp.sum(p["w"] * x) + 5.0 * p["b"], {"loss": jnp.zeros(())}

    optimizer = optax.chain(optax.clip_by_global_norm(0.5), optax.sgd(1.0))
    update = agent_gradient_update(loss_fn, optimizer, has_aux=True)
    state = AgentState(params=params, obs_stats=None, hparams=None)
    x = jnp.array([1.0, 2.0])
    (_, aux), new_state, _ = update(optimizer.init(params), state, x)
    # d/dw = x, d/db = 5: the norm before clipping is sqrt(1 + 4 + 25)
    assert float(aux["grad_norm"]) == pytest.approx(30.0 ** 0.5)
    step = jax.tree.map(lambda a, b: a - b, params, new_state.params)
    assert float(optax.tree.norm(step)) == pytest.approx(0.5, rel=1e-5)  # the applied step was clipped


def test_unknown_reduction_is_refused():
    with pytest.raises(ValueError, match="reduction"):
        M.Metric(jnp.zeros(()), "median")
