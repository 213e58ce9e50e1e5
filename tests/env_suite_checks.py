"""Checks the tests of the JAX env suites (playground, craftax, jumanji, xminigrid) share."""

import jax
import jax.numpy as jnp
import numpy as np

from evorl.envs import Discrete


def action_struct(env) -> jax.ShapeDtypeStruct:
    """The ``[B, *action_shape]`` action ``env.step`` takes, as a shape only."""
    if isinstance(env.action_space, Discrete):
        return jax.ShapeDtypeStruct((env.num_envs,), jnp.int32)
    return jax.ShapeDtypeStruct((env.num_envs,) + env.action_space.shape, jnp.float32)


def check_traced_shapes(env) -> None:
    """reset and step traced (not compiled): float32 observations of ``obs_space``'s shape,
    ``[B]`` rewards and flags, and a step state with the reset state's structure and avals
    (auto-reset selects between the two)."""
    b = env.num_envs
    state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    next_state = jax.eval_shape(env.step, state, action_struct(env))
    assert state.obs.shape == next_state.final_obs.shape == (b,) + env.obs_space.shape
    assert state.obs.dtype == next_state.obs.dtype == jnp.float32
    assert next_state.reward.shape == next_state.terminated.shape == next_state.truncated.shape == (b,)
    assert (next_state.reward.dtype, next_state.terminated.dtype) == (jnp.float32, jnp.bool_)
    assert jax.tree.structure(next_state) == jax.tree.structure(state)
    for a, c in zip(jax.tree.leaves(state), jax.tree.leaves(next_state)):
        assert (a.shape, a.dtype) == (c.shape, c.dtype)


def random_actions(env, num_steps: int, seed: int = 0) -> jax.Array:
    """``[T, B, *action_shape]`` uniform random actions."""
    key, space = jax.random.PRNGKey(seed), env.action_space
    if isinstance(space, Discrete):
        return jax.random.randint(key, (num_steps, env.num_envs), 0, space.n)
    shape = (num_steps, env.num_envs) + space.shape
    return jax.random.uniform(key, shape, minval=space.low, maxval=space.high)


def run(env, actions, edit=None, key: int = 0):
    """Steps ``env`` through ``actions`` ``[T, B, ...]`` in one compiled scan; returns the
    stacked states ``[T, B, ...]``. ``edit(t, state)`` may change the state before step ``t``."""

    def step(state, inputs):
        t, action = inputs
        if edit is not None:
            state = edit(t, state)
        state = env.step(state, action)
        return state, state

    def rollout(key):
        steps = jnp.arange(actions.shape[0])
        return jax.lax.scan(step, env.reset(key), (steps, actions))[1]

    return jax.jit(rollout)(jax.random.PRNGKey(key))


def check_bookkeeping(states, episode_length: int) -> None:
    """The episode statistics of a run (reward_scale 1, starting from a reset), recomputed
    here step by step: lengths count steps and restart after a done step, returns sum
    rewards, ``truncated`` is exactly the time limit of an episode that did not terminate,
    and ``obs`` differs from ``final_obs`` only where the step ended the episode."""
    reward, terminated, truncated = (np.asarray(x) for x in (states.reward, states.terminated, states.truncated))
    done = terminated | truncated
    length = np.zeros(reward.shape[1], np.int64)
    ret = np.zeros(reward.shape[1], np.float64)
    for t in range(reward.shape[0]):
        length, ret = length + 1, ret + reward[t]
        np.testing.assert_array_equal(states.episode_length[t], length)
        np.testing.assert_allclose(states.episode_return[t], ret, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(truncated[t], (length == episode_length) & ~terminated[t])
        kept = np.all(np.asarray(states.obs[t] == states.final_obs[t]).reshape(len(length), -1), axis=1)
        assert kept[~done[t]].all()
        length, ret = np.where(done[t], 0, length), np.where(done[t], 0.0, ret)
    assert not (terminated & truncated).any()
