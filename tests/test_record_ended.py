"""The evaluation bookkeeping both evaluators share (``evorl.engine.evaluator.record_ended``), with
NumPy and jax.numpy, against a plain loop: each environment records its first episode."""

import types

import jax.numpy as jnp
import numpy as np
import pytest

from evorl.engine.evaluator import record_ended


@pytest.mark.parametrize("xp", [np, jnp])
def test_each_env_records_its_first_episode_only(xp):
    rng = np.random.default_rng(3)
    steps, envs = 30, 5
    done = rng.random((steps, envs)) < 0.2
    episode_return = rng.normal(size=(steps, envs)).astype(np.float32)
    episode_length = rng.integers(1, 100, (steps, envs)).astype(np.int32)
    returns, lengths = xp.zeros(envs, xp.float32), xp.zeros(envs, xp.float32)
    active = xp.ones(envs, bool)
    for t in range(steps):
        state = types.SimpleNamespace(done=xp.asarray(done[t]), episode_return=xp.asarray(episode_return[t]),
                                      episode_length=xp.asarray(episode_length[t]))
        returns, lengths, active = record_ended(xp, state, returns, lengths, active)
    for i in range(envs):  # by hand: the first step at which env i's episode ended, if any
        first = next((t for t in range(steps) if done[t, i]), None)
        want = (0.0, 0.0) if first is None else (episode_return[first, i], float(episode_length[first, i]))
        assert (float(returns[i]), float(lengths[i])) == want
        assert bool(active[i]) == (first is None)
    assert np.asarray(returns).dtype == np.float32 and np.asarray(lengths).dtype == np.float32
