"""The gymnax adapter: spaces, auto-reset, termination vs truncation, episode statistics."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.envs import Box, Discrete, create_env

NEEDS_DOWNLOAD = {"MNISTBandit-bsuite"}  # loads MNIST from the internet on construction


def run_steps(env, actions_fn, num_steps, key=0):
    state = env.reset(jax.random.PRNGKey(key))

    def step(state, key):
        next_state = env.step(state, actions_fn(key))
        return next_state, next_state

    _, states = jax.lax.scan(step, state, jax.random.split(jax.random.PRNGKey(key + 1), num_steps))
    return states


def random_actions(env):
    space = env.action_space
    if isinstance(space, Discrete):
        return lambda key: jax.random.randint(key, (env.num_envs,), 0, space.n)
    return lambda key: jax.random.uniform(key, (env.num_envs,) + space.shape, minval=space.low, maxval=space.high)


# the MinAtar games other than Breakout (3-6 s each to compile) run in the slow set
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n.endswith("-MinAtar") and n != "Breakout-MinAtar"
                                  else n for n in gymnax.registered_envs if n not in NEEDS_DOWNLOAD])
def test_every_gymnax_env_steps(name):
    env = create_env({"env_name": name, "env_type": "gymnax"}, episode_length=7, parallel=3)
    states = jax.jit(lambda: run_steps(env, random_actions(env), 16))()
    assert states.obs.shape == (16, 3) + env.obs_space.shape
    assert states.obs.dtype == jnp.float32
    assert states.reward.shape == (16, 3)
    assert bool(jnp.all(jnp.isfinite(states.obs)))
    # the time limit of 7 ends every episode by step 7 at the latest
    assert bool(jnp.all(states.episode_length <= 7))
    assert bool(jnp.any(states.done))
    assert not bool(jnp.any(states.terminated & states.truncated))


def test_truncation_is_not_termination_and_final_obs_is_pre_reset():
    # CartPole pushed always right falls over (terminated) after ~10 steps; with a time limit
    # of 5 the first episode is truncated instead.
    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnax"}, episode_length=5, parallel=2)
    states = run_steps(env, lambda key: jnp.ones((2,), jnp.int32), 12)
    truncated = np.asarray(states.truncated)
    assert truncated[4].all() and truncated[9].all() and not truncated[[0, 1, 2, 3, 5]].any()
    assert not np.asarray(states.terminated).any()
    # after the truncating step the observation is a fresh reset, final_obs the true next state
    assert not np.allclose(states.obs[4], states.final_obs[4])
    np.testing.assert_allclose(states.obs[3], states.final_obs[3])
    np.testing.assert_array_equal(states.episode_length[4], [5, 5])
    np.testing.assert_array_equal(states.episode_length[5], [1, 1])
    np.testing.assert_allclose(states.episode_return[4], [5.0, 5.0])


def test_termination_and_episode_return():
    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnax"}, parallel=2)
    states = run_steps(env, lambda key: jnp.ones((2,), jnp.int32), 40)
    terminated = np.asarray(states.terminated[:, 0])
    first = int(np.argmax(terminated))
    assert terminated.any() and not np.asarray(states.truncated).any()
    # CartPole pays 1 per step including the terminating one
    assert float(states.episode_return[first, 0]) == first + 1
    assert int(states.episode_length[first, 0]) == first + 1


def test_spaces():
    cartpole = create_env({"env_name": "CartPole-v1", "env_type": "gymnax"})
    assert isinstance(cartpole.action_space, Discrete) and cartpole.action_space.n == 2
    assert cartpole.obs_space.shape == (4,)
    pendulum = create_env({"env_name": "Pendulum-v1", "env_type": "gymnax"})
    assert isinstance(pendulum.action_space, Box) and pendulum.action_space.shape == (1,)
    assert pendulum.episode_length == 200
    lake = create_env({"env_name": "FrozenLake-misc", "env_type": "gymnax"})  # Discrete obs -> one-hot
    assert lake.obs_space.shape == (16,)


def test_breakout_alias():
    env = create_env({"env_name": "Breakout", "env_type": "gymnax"}, parallel=2)
    assert env.env_name == "Breakout-MinAtar" and env.obs_space.shape == (10, 10, 4)


def test_unknown_env_name_lists_valid_ones():
    with pytest.raises(ValueError, match=r"Unknown gymnax env_name 'CartPole-v2'.*Did you mean 'CartPole-v1'.*Acrobot-v1"):
        create_env({"env_name": "CartPole-v2", "env_type": "gymnax"})


def test_unknown_env_type():
    with pytest.raises(ValueError, match=r"Unknown env_type 'gym'; valid env types: gymnax"):
        create_env({"env_name": "CartPole-v1", "env_type": "gym"})


def test_env_config_needs_name_and_type():
    with pytest.raises(ValueError, match="env_type"):
        create_env({"env_name": "CartPole-v1"})
