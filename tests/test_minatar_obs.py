"""The MinAtar observations evorl builds without boolean scatters equal gymnax's, bit for bit
(on the CPU, where gymnax's are right), over states from play and states drawn at random."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.envs.gymnax_env import GymnaxEnv
from evorl.envs.minatar_obs import OBSERVATIONS, cells

GAMES = {"Breakout-MinAtar": "MinBreakout", "Freeway-MinAtar": "MinFreeway",
         "SpaceInvaders-MinAtar": "MinSpaceInvaders"}


def test_cells_sets_what_a_boolean_scatter_sets_with_negative_and_out_of_range_places():
    rng = np.random.default_rng(0)
    shape = (4, 5, 3)
    for _ in range(50):
        k = int(rng.integers(1, 9))
        index = [rng.integers(-size - 2, size + 2, k) for size in shape]  # [K] each, some out of range
        expected = jnp.zeros(shape, bool).at[tuple(jnp.asarray(i) for i in index)].set(True)
        np.testing.assert_array_equal(cells(shape, *map(jnp.asarray, index)), expected)


def played_states(name: str, num_envs: int = 32, steps: int = 400):
    """Every state of ``num_envs`` games of random play (resets included), leaves ``[T * N, ...]``."""
    env, params = gymnax.make(name)
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    _, state = jax.vmap(env.reset, (0, None))(keys, params)

    def step(state, key):
        key_action, key_step = jax.random.split(key)
        action = jax.random.randint(key_action, (num_envs,), 0, env.num_actions)
        _, state, _, _, _, _ = jax.vmap(env.step, (0, 0, 0, None))(jax.random.split(key_step, num_envs), state,
                                                                    action, params)
        return state, state

    _, states = jax.lax.scan(step, state, jax.random.split(jax.random.PRNGKey(1), steps))
    return env, jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), states)


def drawn_states(name: str, states, n: int = 512):
    """States whose objects are drawn at random over their whole ranges (and a little past them)."""
    rng = np.random.default_rng(1)
    first = jax.tree.map(lambda x: x[:n], states)
    if name == "Freeway-MinAtar":
        cars = np.stack([rng.integers(0, 10, (n, 8)), rng.integers(0, 10, (n, 8)), rng.integers(0, 6, (n, 8)),
                         rng.integers(-6, 7, (n, 8))], axis=-1)  # speed 0 and 6: no trail channel of gymnax's
        return first.replace(cars=jnp.asarray(cars, jnp.int32), pos=jnp.asarray(rng.integers(0, 10, n)))
    if name == "Breakout-MinAtar":
        ints = lambda low, high: jnp.asarray(rng.integers(low, high, n))  # noqa: E731
        return first.replace(ball_x=ints(-1, 11), ball_y=ints(-1, 11), last_x=ints(-1, 11), last_y=ints(-1, 11),
                             pos=ints(0, 10), brick_map=jnp.asarray(rng.integers(0, 2, (n, 10, 10)), first.brick_map.dtype))
    return first.replace(pos=jnp.asarray(rng.integers(0, 10, n)),
                         alien_dir=jnp.asarray(rng.choice([-1, 1], n), first.alien_dir.dtype),
                         alien_map=jnp.asarray(rng.integers(0, 2, (n, 10, 10)), first.alien_map.dtype),
                         f_bullet_map=jnp.asarray(rng.integers(0, 2, (n, 10, 10)), first.f_bullet_map.dtype),
                         e_bullet_map=jnp.asarray(rng.integers(0, 2, (n, 10, 10)), first.e_bullet_map.dtype))


@pytest.mark.parametrize("name", sorted(GAMES))
def test_observations_equal_gymnax_over_played_and_drawn_states(name):
    env, states = played_states(name)
    ours = jax.jit(jax.vmap(OBSERVATIONS[GAMES[name]]))
    theirs = jax.jit(jax.vmap(type(env).get_obs, (None, 0)), static_argnums=0)
    for batch in (states, drawn_states(name, states)):
        expected = np.asarray(theirs(env, batch))
        assert expected.any(axis=(0, 1, 2)).sum() >= 3  # the states set cells in several channels
        np.testing.assert_array_equal(np.asarray(ours(batch)), expected)


@pytest.mark.parametrize("name", sorted(GAMES))
def test_an_evorl_minatar_env_plays_gymnax_game_step_for_step(name):
    """The env evorl builds observes through the scatter-free planes, and its observations are
    gymnax's own game's, step for step, from the same keys."""
    env = GymnaxEnv(name, num_envs=4)
    assert env._env.get_obs.func.__name__ == "_get_obs"
    game, params = gymnax.make(name)
    key = jax.random.PRNGKey(2)
    obs, state = jax.vmap(env._reset_one)(jax.random.split(key, 4))
    expected, game_state = jax.vmap(game.reset_env, (0, None))(jax.random.split(key, 4), params)
    np.testing.assert_array_equal(obs, np.asarray(expected, np.float32).reshape(obs.shape))
    for t in range(60):
        keys = jax.random.split(jax.random.fold_in(key, t), 4)
        action = jnp.full((4,), t % env.action_space.n)
        obs, state, _, _ = jax.vmap(env._step_one)(keys, state, action)
        expected, game_state, _, _, _ = jax.vmap(game.step_env, (0, 0, 0, None))(keys, game_state, action, params)
        np.testing.assert_array_equal(obs, np.asarray(expected, np.float32).reshape(obs.shape))
