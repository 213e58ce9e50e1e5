"""VectorEnv's sparse resets (``sparse_reset_fraction``) give exactly the states of the dense
reset, whether no copy, a few or more copies than the batch holds end on a step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.envs import create_env


@pytest.mark.slow  # ~21 s on 2 cores at load 8-10 (2026-12-03)
def test_sparse_resets_equal_dense_resets():
    # CartPole pushed always right falls after ~10 steps, at steps that vary with the start;
    # the first 3 steps together end all 8 copies at once (more than the batch of 2).
    dense = create_env({"env_name": "CartPole-v1", "env_type": "gymnax"}, episode_length=3, parallel=8)
    sparse = dense._replace(sparse_reset_fraction=0.25)  # at most 2 fresh episodes per batch
    actions = jnp.ones((40, 8), jnp.int32)

    def run(env):
        def step(state, action):
            state = env.step(state, action)
            return state, state

        # a limit of 3 for the first 3 steps, none after: each copy then falls when it falls
        first = jax.lax.scan(step, env.reset(jax.random.PRNGKey(0)), actions[:3])
        later = env.with_episode_length(1000)
        return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), first[1], jax.lax.scan(
            lambda s, a: (later.step(s, a),) * 2, first[0], actions[3:])[1])

    dense_states, sparse_states = run(dense), run(sparse)
    ended = np.asarray(dense_states.done).sum(axis=1)  # [T] copies ending on each step
    assert (ended == 0).any() and ((ended >= 1) & (ended <= 2)).any() and (ended > 2).any()
    for a, b in zip(jax.tree.leaves(dense_states), jax.tree.leaves(sparse_states)):
        np.testing.assert_array_equal(a, b)


def test_craftax_declares_sparse_resets():
    import pytest

    pytest.importorskip("craftax", reason="craftax not installed (pip install -e '.[craftax]')")
    env = create_env({"env_name": "Craftax-Classic-Symbolic-v1", "env_type": "craftax"}, parallel=64)
    assert env.sparse_reset_fraction is not None and jnp.ceil(env.sparse_reset_fraction * 64) >= 2
