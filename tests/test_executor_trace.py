"""The executor traces one agent's step once per chunk program, with the same results as a
plain Python loop of the step, alone and for a population."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.engine.execution import Executor, Placement


def _counting_step():
    traces = []

    def step(state):  # one iteration of a toy agent: x <- 0.5 x + 1, metric: the new x's sum
        traces.append(1)
        x = 0.5 * state["x"] + 1.0
        return {"x": x}, {"x_sum": jnp.sum(x)}

    return step, traces


@pytest.mark.parametrize("num_agents", [1, 3])
def test_chunk_traces_the_step_once_and_matches_a_python_loop(num_agents):
    step, traces = _counting_step()
    executor = Executor(step, Placement(num_agents=num_agents))
    x0 = np.arange(4, dtype=np.float32) if num_agents == 1 else np.arange(12, dtype=np.float32).reshape(3, 4)
    state = {"x": jnp.asarray(x0)}
    executor.compile(state)
    assert len(traces) == 1
    state, metrics = executor.run(state, 5)
    assert len(traces) == 1  # no retrace at run time

    expected, sums = x0.copy(), []
    for _ in range(5):  # the plain loop: per agent, the metric averaged over the chunk's iterations
        expected = 0.5 * expected + 1.0
        sums.append(expected.sum(axis=-1))
    np.testing.assert_allclose(np.asarray(state["x"]), expected, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(metrics["x_sum"]), np.mean(sums, axis=0), rtol=1e-6)


def test_a_call_runs_at_most_four_times_the_iterations_of_the_one_before(monkeypatch):
    """Cheap iterations first (an off-policy warm-up) do not size a call of costly ones many
    times CALL_SECONDS long: the call lengths grow by at most CALL_GROWTH."""
    import evorl.engine.execution as execution

    step, _ = _counting_step()
    executor = Executor(step, Placement(num_agents=1))
    state = {"x": jnp.zeros(4)}
    executor.compile(state)
    # every call measured at 1 microsecond: ~5e6 iterations fit (a lazy clock: a precomputed
    # array of its ticks would hold a billion floats, 8 GB)
    clock = itertools.count(0.0, 1e-6)
    monkeypatch.setattr(execution.time, "perf_counter", lambda: next(clock))
    done = []
    executor.run(state, 1000, progress=done.append)
    lengths = np.diff([0, *done])
    assert list(lengths[:5]) == [1, 4, 16, 64, 256] and sum(lengths) == 1000
