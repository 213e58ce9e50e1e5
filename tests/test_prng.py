"""evorl.hardware's random path: the fused Threefry keys and the fast permutation give JAX's
own bits, and a training run with them equals the plain path's exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from evorl import hardware
from evorl.hardware import threefry
from evorl.envs.spaces import Box, Discrete
from evorl.envs.vec_env import VectorEnv
from evorl.workflows import PPOWorkflow


def same(a, b):
    np.testing.assert_array_equal(np.asarray(hardware.raw_key(a)), np.asarray(hardware.raw_key(b)))


@pytest.mark.parametrize("seed", [0, 1, 2**31 - 1])
def test_fast_keys_give_jax_threefry_bits(seed):
    key = jax.random.PRNGKey(seed)
    fast = threefry.wrap(key)
    assert jnp.issubdtype(fast.dtype, jax.dtypes.prng_key)
    same(jax.random.split(key, 5), jax.random.split(fast, 5))
    same(jax.random.split(key, (2, 3)), jax.random.split(fast, (2, 3)))
    same(jax.random.fold_in(key, 12345), jax.random.fold_in(fast, 12345))
    ids = jnp.arange(7)
    same(jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, ids), jax.vmap(jax.random.fold_in, in_axes=(None, 0))(fast, ids))
    for dtype in (jnp.uint8, jnp.uint16, jnp.uint32):
        same(jax.random.bits(key, (3, 5), dtype), jax.random.bits(fast, (3, 5), dtype))
    same(jax.random.uniform(key, (9,)), jax.random.uniform(fast, (9,)))
    same(jax.random.normal(key, (4, 3)), jax.random.normal(fast, (4, 3)))
    same(jax.random.randint(key, (11,), 0, 7), jax.random.randint(fast, (11,), 0, 7))
    logits = jax.random.normal(jax.random.PRNGKey(9), (6, 4))
    same(jax.random.categorical(key, logits), jax.random.categorical(fast, logits))
    same(jax.random.permutation(key, 100), jax.random.permutation(fast, 100))
    # compiled, on a batch of keys, through a scan (how the rollout uses them)
    keys = jax.random.split(key, 4)

    def draws(k):
        return lax.scan(lambda c, kk: (c, jax.random.uniform(kk, (3,))), 0, jax.random.split(k, 5))[1]

    same(jax.jit(jax.vmap(draws))(keys), jax.jit(jax.vmap(draws))(threefry.wrap(keys)))


def test_fast_keys_compile_without_threefry_loops():
    """The point of FAST_THREEFRY: no ``threefry2x32`` call (a while loop on the CPU) left."""
    def program(key):
        return jax.random.uniform(jax.random.split(hardware.fast_key(key), 3)[1], (8,))

    with hardware.use_fast_paths(random=True):
        fast_text = jax.jit(program).lower(jax.random.PRNGKey(0)).as_text()
    with hardware.use_fast_paths(random=False):
        plain_text = jax.jit(lambda k: program(k) + 0.0).lower(jax.random.PRNGKey(0)).as_text()
    assert "threefry" in plain_text
    assert "threefry" not in fast_text


@pytest.mark.parametrize("n", [1, 2, 7, 128, 512, 1000, 1700, 8192])
def test_permutation_equals_jax(n):
    """One sort round below 1625 elements, two from there (1700, 8192)."""
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        want = jax.random.permutation(key, n)
        with hardware.use_fast_paths(random=True):
            got = jax.jit(hardware.permutation, static_argnums=1)(hardware.fast_key(key), n)
        same(want, got)


def test_stable_argsort_with_ties_equals_the_key_payload_sort():
    bits = jax.random.bits(jax.random.PRNGKey(0), (64,), jnp.uint32)
    index = jnp.arange(64, dtype=jnp.int32)
    tied = bits.at[3].set(bits[40]).at[50].set(bits[40]).at[10].set(bits[11])  # a triple and a pair
    for b in (bits, tied):
        same(lax.sort_key_val(b, index)[1], jax.jit(threefry.stable_argsort_u32)(b))
        assert sorted(np.asarray(threefry.stable_argsort_u32(b)).tolist()) == list(range(64))


def test_fast_random_off_returns_raw_keys_and_jax_permutation():
    key = jax.random.PRNGKey(0)
    with hardware.use_fast_paths(random=False):
        assert hardware.fast_key(key) is key
        text = jax.jit(hardware.permutation, static_argnums=1).lower(key, 16).as_text()
    assert "threefry" in text


CFG = {
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [16], "critic_hidden_layer_sizes": [16]},
    "training": {"num_iterations": 4, "num_envs": 4, "rollout_length": 32, "num_epochs": 2, "num_minibatches": 4,
                 "eval_episodes": 2},
}


def run_ppo(fast: bool, iterations: int = 3):
    with hardware.use_fast_paths(random=fast):
        workflow = PPOWorkflow.build_from_config(CFG, recorders=[])
        state = workflow.init(jax.random.PRNGKey(3))
        workflow.compile(state)
        state, metrics = workflow.run_iterations(state, iterations)
        returns = workflow.evaluate(state)["eval/episode_return"]
    return state, metrics, returns


@pytest.mark.slow  # ~58 s on 2 cores at load 8-10 (2026-12-03)
def test_ppo_with_fast_random_equals_the_plain_path():
    plain_state, plain_metrics, plain_eval = run_ppo(False)
    fast_state, fast_metrics, fast_eval = run_ppo(True)
    for a, b in zip(jax.tree.leaves(plain_state.agent_state.params), jax.tree.leaves(fast_state.agent_state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    same(plain_state.key, fast_state.key)
    same(plain_state.env_state.key, fast_state.env_state.key)
    assert plain_state.key.dtype == fast_state.key.dtype == jnp.uint32  # states keep raw keys
    np.testing.assert_equal(plain_metrics, fast_metrics)
    np.testing.assert_equal(plain_eval, fast_eval)
    # and the run did learn something: the parameters moved
    init = PPOWorkflow.build_from_config(CFG, recorders=[]).init(jax.random.PRNGKey(3))
    moved = [float(jnp.max(jnp.abs(a - b))) for a, b in
             zip(jax.tree.leaves(init.agent_state.params), jax.tree.leaves(fast_state.agent_state.params))]
    assert max(moved) > 1e-4


class RawKeyEnv(VectorEnv):
    """A backend that does not declare ``typed_keys``: its hooks must see raw uint32 keys."""

    obs_space = Box(np.full(2, -1.0, np.float32), np.ones(2, np.float32))
    action_space = Discrete(2)

    def _reset_one(self, key):
        assert key.dtype == jnp.uint32 and key.shape == (2,), key
        return jax.random.uniform(key, (2,)), jnp.zeros(())

    def _step_one(self, key, backend_state, action):
        assert key.dtype == jnp.uint32 and key.shape == (2,), key
        return jax.random.uniform(key, (2,)), backend_state + 1, jnp.ones(()), backend_state >= 3


def play(env, fast: bool):
    """Six steps of ``env`` (3 copies, action 0) after a reset: the env states ``[6, 3, ...]``."""
    with hardware.use_fast_paths(random=fast):
        def run(key):
            state = env.reset(key)
            return lax.scan(lambda s, _: (env.step(s, jnp.zeros(3, jnp.int32)),) * 2, state, None, length=6)[1]
        return jax.jit(run)(jax.random.PRNGKey(1))


@pytest.mark.slow  # ~18 s on 2 cores at load 8-10 (2026-12-03)
def test_backends_without_typed_keys_get_raw_keys_and_the_same_bits():
    env = RawKeyEnv(num_envs=3, episode_length=10)
    plain, fast = play(env, False), play(env, True)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(fast)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


class KeyKeepingEnv(RawKeyEnv):
    """Declares ``typed_keys`` and keeps its key in its state (as some backends do)."""

    typed_keys = True

    def _reset_one(self, key):
        return jax.random.uniform(key, (2,)), {"key": key, "t": jnp.zeros(())}

    def _step_one(self, key, backend_state, action):
        k, _ = jax.random.split(backend_state["key"])
        obs = jax.random.uniform(k, (2,)) + jax.random.uniform(key, (2,))
        t = backend_state["t"] + 1
        return obs, {"key": k, "t": t}, jnp.ones(()), t >= 3


def test_typed_key_backends_keep_raw_keys_in_state_and_the_same_bits():
    env = KeyKeepingEnv(num_envs=3, episode_length=10)
    plain, fast = play(env, False), play(env, True)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(fast)):
        assert not jnp.issubdtype(b.dtype, jax.dtypes.prng_key)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert fast.backend_state["key"].dtype == jnp.uint32
