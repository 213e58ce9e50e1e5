"""The episode bookkeeping JAX and host vector envs share (``evorl.envs.env.episode_step``),
against a plain Python loop over one copy's steps, with NumPy ([B] copies) and jax.numpy."""

import jax.numpy as jnp
import numpy as np
import pytest

from evorl.envs.env import episode_step


def by_hand(rewards, terminated, env_truncated, time_limit):
    """One copy, step by step: the totals restart after a step that ended an episode."""
    ret, length, done, out = 0.0, 0, False, []
    for r, term, env_trunc in zip(rewards, terminated, env_truncated):
        ret, length = (0.0 if done else ret) + r, (0 if done else length) + 1
        trunc = (length >= time_limit or env_trunc) and not term
        out.append((ret, length, trunc))
        done = term or trunc
    return out


@pytest.mark.parametrize("xp", [np, jnp])
def test_episode_step_matches_a_loop_over_steps(xp):
    rng = np.random.default_rng(0)
    steps, copies, limit = 40, 3, 4
    rewards = rng.normal(size=(steps, copies)).astype(np.float32)
    terminated = rng.random((steps, copies)) < 0.15
    env_truncated = rng.random((steps, copies)) < 0.1
    ret = xp.zeros(copies, xp.float32)
    length = xp.zeros(copies, xp.int32)
    done = xp.zeros(copies, bool)
    got = []
    for t in range(steps):
        ret, length, trunc = episode_step(xp, done, ret, length, xp.asarray(rewards[t]), xp.asarray(terminated[t]),
                                          xp.asarray(env_truncated[t]), limit)
        got.append((np.asarray(ret), np.asarray(length), np.asarray(trunc)))
        done = xp.asarray(terminated[t]) | trunc
    assert np.asarray(got[0][0]).dtype == np.float32 and np.asarray(got[0][1]).dtype == np.int32
    for i in range(copies):
        expected = by_hand(rewards[:, i], terminated[:, i], env_truncated[:, i], limit)
        for t, (e_ret, e_len, e_trunc) in enumerate(expected):
            assert got[t][0][i] == pytest.approx(e_ret, abs=1e-5)
            assert got[t][1][i] == e_len and bool(got[t][2][i]) == e_trunc
    lengths = np.stack([g[1] for g in got])
    assert lengths.max() == limit and np.stack([g[2] for g in got]).any()  # the time limit was hit
