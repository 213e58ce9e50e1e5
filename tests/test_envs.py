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


#: One env of each kind in the default test set (classic control discrete and continuous,
#: MinAtar, bsuite, misc); every gymnax env with -m slow (each takes seconds to compile).
DEFAULT_SET_ENVS = ("CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "DiscountingChain-bsuite", "FrozenLake-misc")


@pytest.mark.parametrize("name", [n if n in DEFAULT_SET_ENVS else pytest.param(n, marks=pytest.mark.slow)
                                  for n in gymnax.registered_envs if n not in NEEDS_DOWNLOAD])
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


@pytest.mark.slow
def test_sticky_actions_against_a_plain_loop():
    # A plain Python loop replays each step with gymnax itself: the game must have executed
    # either the agent's action or the previous executed action (0 after a reset), the latter
    # in about p of the steps where the two differ; the rollout's states are the game's.
    p, steps = 0.3, 300
    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnax", "repeat_action_probability": p}, parallel=1)
    game, params = env._env, env._params
    state = env.reset(jax.random.PRNGKey(0))
    step = jax.jit(env.step)
    previous, differing, repeated = 0, 0, 0
    for t, key in enumerate(jax.random.split(jax.random.PRNGKey(1), steps)):
        action = int(jax.random.randint(key, (), 0, 2))
        before = jax.tree.map(lambda x: x[0], env.game_states(state.backend_state))
        state = step(state, jnp.array([action], jnp.int32))
        outcomes = {a: np.asarray(game.step_env(key, before, a, params)[0]) for a in {action, previous}}
        executed = [a for a, obs in outcomes.items() if np.allclose(obs, state.final_obs[0])]
        assert executed, f"step {t}: the game executed neither the agent's action nor the previous one"
        if action != previous:
            differing += 1
            repeated += executed == [previous]
        previous = 0 if bool(state.done[0]) else executed[0]
        if not bool(state.done[0]):
            np.testing.assert_array_equal(state.backend_state.last_action, [executed[0]])
    assert differing > 100
    assert abs(repeated / differing - p) < 4 * np.sqrt(p * (1 - p) / differing), (repeated, differing)


def test_no_sticky_actions_is_gymnax_step_for_step():
    plain = create_env({"env_name": "Breakout-MinAtar", "env_type": "gymnax"}, parallel=3)
    zero = create_env({"env_name": "Breakout-MinAtar", "env_type": "gymnax", "repeat_action_probability": 0.0}, parallel=3)
    a, b = (run_steps(env, random_actions(env), 50) for env in (plain, zero))
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.reward, b.reward)
    assert jax.tree.structure(a.backend_state) == jax.tree.structure(b.backend_state)


def test_sticky_actions_change_minatar_trajectories_and_render_states():
    env = create_env({"env_name": "Breakout-MinAtar", "env_type": "gymnax", "repeat_action_probability": 0.5},
                     parallel=3)
    plain = create_env({"env_name": "Breakout-MinAtar", "env_type": "gymnax"}, parallel=3)
    a, b = (run_steps(e, random_actions(e), 50) for e in (env, plain))
    assert not np.array_equal(a.obs, b.obs)
    assert jax.tree.structure(env.game_states(a.backend_state)) == jax.tree.structure(b.backend_state)


@pytest.mark.parametrize("p", [1.0, -0.1])
def test_sticky_action_probability_out_of_range(p):
    from evorl.config import ConfigError
    from evorl.envs import EnvConfig

    with pytest.raises(ConfigError, match=r"repeat_action_probability must be in \[0, 1\)"):
        create_env({"env_name": "Breakout-MinAtar", "env_type": "gymnax", "repeat_action_probability": p})
    with pytest.raises(ConfigError, match=r"env.repeat_action_probability must be in \[0, 1\)"):
        EnvConfig(env_name="Breakout-MinAtar", env_type="gymnax", repeat_action_probability=p).validate("env")


def test_sticky_actions_are_not_a_brax_key():
    from evorl.config import ConfigError

    with pytest.raises(ConfigError, match=r"env.repeat_action_probability is only valid with env_type "
                                          r"'gymnax' or 'gymnasium' or 'envpool', not 'brax'"):
        create_env({"env_name": "inverted_pendulum", "env_type": "brax", "repeat_action_probability": 0.1})
