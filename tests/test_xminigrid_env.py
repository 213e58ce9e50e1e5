"""XLand-MiniGrid adapter: every env's spaces and shapes (traced), the goal as termination
with MiniGrid's reward, the true final observation, the time limit as truncation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

xminigrid = pytest.importorskip("xminigrid", reason="xminigrid not installed (pip install -e '.[xminigrid]')")

from env_suite_checks import check_bookkeeping, check_traced_shapes, random_actions, run  # noqa: E402
from evorl.config import ConfigError  # noqa: E402
from evorl.envs import Box, Discrete, create_env  # noqa: E402
from evorl.envs.xminigrid_env import xminigrid_env_names  # noqa: E402

#: One of each family in the default run; the rest with -m slow (~1 s each to trace).
REPRESENTATIVE = {"MiniGrid-Empty-5x5", "MiniGrid-DoorKey-5x5", "MiniGrid-FourRooms", "MiniGrid-MemoryS8",
                  "MiniGrid-Unlock", "XLand-MiniGrid-R1-9x9"}
FORWARD, RIGHT = 0, 1


def xminigrid_env(name="MiniGrid-Empty-5x5", **cfg):
    return create_env({"env_type": "xminigrid", "env_name": name, **cfg}, parallel=2)


@pytest.mark.parametrize("name", [n if n in REPRESENTATIVE else pytest.param(n, marks=pytest.mark.slow)
                                  for n in xminigrid.registered_environments()])
def test_every_env_resets_and_steps(name):
    env = xminigrid_env(name)
    view = 3 if "Memory" in name else 5 if name.startswith("XLand") else 7
    assert env.obs_space.shape == (view, view, 2) and env.action_space == Discrete(6)
    assert isinstance(env.obs_space, Box) and env.obs_space.low.min() == 0 and env.obs_space.high.max() == 12
    check_traced_shapes(env)


def test_listed_names_are_the_registry():
    assert xminigrid_env_names() == list(xminigrid.registered_environments())
    assert len(xminigrid_env_names()) == 44


@pytest.mark.slow  # ~22 s on 2 cores at load 8-10 (2026-12-03)
def test_reaching_the_goal_terminates_with_minigrid_reward_and_keeps_the_final_obs():
    """Empty-5x5 starts at (1, 1) facing east, the goal at (3, 3): forward, forward, right,
    forward, forward reaches it on step 5 of the 100 allowed: reward 1 - 0.9 * 5 / 100."""
    env = xminigrid_env()
    plan = jnp.array([FORWARD, FORWARD, RIGHT, FORWARD, FORWARD, FORWARD])
    states = run(env, jnp.stack([plan, plan], axis=1))
    np.testing.assert_array_equal(states.terminated[:, 0], [0, 0, 0, 0, 1, 0])
    assert not np.asarray(states.truncated).any()
    np.testing.assert_allclose(states.reward[4], 1 - 0.9 * 5 / 100, rtol=1e-6)
    np.testing.assert_allclose(states.episode_return[4], 1 - 0.9 * 5 / 100, rtol=1e-6)
    np.testing.assert_array_equal(states.episode_length[:, 0], [1, 2, 3, 4, 5, 1])
    # final_obs: xminigrid's own observation on reaching the goal; obs: the fresh episode's
    # (Empty-5x5's start does not depend on the key)
    raw, params = xminigrid.make("MiniGrid-Empty-5x5")
    first = raw.reset(params, jax.random.PRNGKey(1))
    last = jax.jit(lambda ts: jax.lax.fori_loop(0, 5, lambda t, ts: raw.step(params, ts, plan[t]), ts))(first)
    np.testing.assert_array_equal(states.final_obs[4, 0], last.observation)
    np.testing.assert_array_equal(states.obs[4, 0], first.observation)
    check_bookkeeping(states, env.episode_length)


def test_time_limit_is_truncation_and_xminigrids_own_limit():
    """The goal of Empty-5x5 is 5 agent steps away at least (action repeat 1): with a limit of
    3, every 3rd step truncates. xminigrid's own limit (its reward's max_steps) is
    episode_length x action_repeat."""
    assert xminigrid_env(episode_length=3, action_repeat=2)._params.max_steps == 6
    env = xminigrid_env(episode_length=3)
    assert env._params.max_steps == 3
    states = run(env, random_actions(env, 7))
    np.testing.assert_array_equal(states.truncated, np.array([[0, 0, 1, 0, 0, 1, 0]] * 2).T)
    assert not np.asarray(states.terminated).any()
    check_bookkeeping(states, 3)


def test_default_episode_length_is_xminigrids():
    assert xminigrid_env("MiniGrid-Empty-8x8").episode_length == 256


def test_unknown_name():
    with pytest.raises(ConfigError, match=r"Unknown xminigrid env_name 'MiniGrid-Empty-7x7'.*Did you mean"):
        xminigrid_env("MiniGrid-Empty-7x7")
