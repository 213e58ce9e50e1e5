"""evorl.hardware's gather path: the sort-based shuffle and the masked pick give exactly what
XLA's gather gives (values, dtypes, NaN/inf, gradients), and a PPO run on the fast path equals
the plain one bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl import hardware
from evorl.hardware import sort_gather
from evorl.workflows import IMPALAWorkflow, PPOWorkflow


def leaves(n: int, rng: np.random.Generator) -> dict:
    x = rng.normal(size=(n, 3)).astype(np.float32)
    for (i, j), v in zip([(1, 0), (2, 1), (3, 2), (0, 0)], [np.nan, np.inf, -np.inf, -0.0]):
        x[i % n, j] = v
    return {
        "f32": x,
        "bf16": rng.normal(size=(n,)).astype(jnp.bfloat16),
        "i32": rng.integers(-5, 5, size=(n, 2)).astype(np.int32),
        "bool": rng.random(n) < 0.5,
        "image": rng.normal(size=(n, 2, 2, 1)).astype(np.float32),
    }


def bits(x) -> np.ndarray:
    x = np.asarray(x)
    return x.view(np.uint16) if x.dtype == jnp.bfloat16 else x.view(np.uint8) if x.dtype == bool else x.view(
        {4: np.uint32, 8: np.uint64}[x.dtype.itemsize]) if x.dtype.kind == "f" else x


@pytest.mark.parametrize("n", [1, 7, 64, 512])
def test_permute_by_sort_is_the_gather_bit_for_bit(n):
    rng = np.random.default_rng(n)
    tree, perm = leaves(n, rng), jnp.asarray(rng.permutation(n), jnp.int32)
    for max_columns in (64, 1):  # every column in one sort; or each multi-column leaf gathered whole
        fast = jax.jit(lambda t, p: sort_gather.permute_by_sort(t, p, max_columns=max_columns))(tree, perm)
        for name, x in tree.items():
            want = np.take(np.asarray(x), np.asarray(perm), axis=0)
            assert fast[name].dtype == want.dtype and fast[name].shape == want.shape, name
            np.testing.assert_array_equal(bits(fast[name]), bits(want), err_msg=name)  # -0.0 and NaN payloads too


def test_permute_along_another_axis_and_under_vmap():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(5, 6, 3, 2)), jnp.float32)  # [S, T, B, ...], permuted along B
    perms = jnp.asarray(np.stack([rng.permutation(3) for _ in range(5)]), jnp.int32)
    want = np.stack([np.take(np.asarray(x[s]), np.asarray(perms[s]), axis=1) for s in range(5)])
    for max_columns in (64, 4):  # the columns in one sort, and a wide leaf gathered by rows
        permute = lambda x, p: sort_gather.permute_by_sort(x, p, axis=1, max_columns=max_columns)  # noqa: E731
        np.testing.assert_array_equal(jax.jit(jax.vmap(permute))(x, perms), want)


def test_inverse_permutation():
    perm = jnp.asarray(np.random.default_rng(1).permutation(100), jnp.int32)
    inv = sort_gather.inverse_permutation(perm)
    np.testing.assert_array_equal(np.asarray(inv)[np.asarray(perm)], np.arange(100))


def test_pick_by_mask_is_take_along_axis_with_its_gradient():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 6, 5)).astype(np.float32)
    x[0, 0, :] = [np.nan, np.inf, -np.inf, 1.0, 2.0]
    index = jnp.asarray(rng.integers(0, 5, size=(4, 6)), jnp.int32)
    index = index.at[0, 0].set(0)  # the NaN itself

    def gather(x):
        return jnp.take_along_axis(x, index[..., None], axis=-1)[..., 0]

    fast = sort_gather.pick_by_mask(jnp.asarray(x), index)
    np.testing.assert_array_equal(fast, gather(jnp.asarray(x)))
    index = index.at[0, 0].set(3)  # a finite entry of the row with NaN and infs: still exactly it
    assert float(sort_gather.pick_by_mask(jnp.asarray(x), index)[0, 0]) == 1.0
    finite = jnp.asarray(np.nan_to_num(x, nan=0.0, posinf=3.0, neginf=-3.0))
    weights = jnp.asarray(rng.normal(size=(4, 6)), jnp.float32)
    grad_fast = jax.grad(lambda x: jnp.sum(weights * sort_gather.pick_by_mask(x, index)))(finite)
    grad_gather = jax.grad(lambda x: jnp.sum(weights * gather(x)))(finite)
    np.testing.assert_array_equal(grad_fast, grad_gather)


def test_the_gather_path_is_chosen_by_backend():
    assert hardware.FAST_ON["gather"] == ("tpu",)
    x, perm = jnp.arange(6.0), jnp.asarray([2, 0, 1, 5, 4, 3])
    for fast in (False, True):
        with hardware.use_fast_paths(gather=fast):
            assert hardware.is_fast("gather") is fast
            np.testing.assert_array_equal(hardware.take_permuted({"x": x}, perm)["x"], x[perm])
            np.testing.assert_array_equal(hardware.take_along_last(x.reshape(2, 3), jnp.asarray([2, 0])), [2.0, 3.0])


CFG = {
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [16], "critic_hidden_layer_sizes": [16]},
    "training": {"num_iterations": 4, "num_envs": 4, "rollout_length": 16, "num_epochs": 2, "num_minibatches": 4,
                 "num_seeds": 2, "eval_episodes": 2},
}


def train(workflow_cls, cfg: dict, fast: bool):
    with hardware.use_fast_paths(gather=fast):
        workflow = workflow_cls.build_from_config(cfg, recorders=[])
        state = workflow.init(jax.random.PRNGKey(3))
        state, metrics = workflow.run_iterations(state, 2)
    return state, metrics


@pytest.mark.slow  # two short trainings on each path
@pytest.mark.parametrize("workflow_cls, extra", [
    (PPOWorkflow, {}),  # transitions shuffled
    (IMPALAWorkflow, {"num_minibatches": 2}),  # whole sequences shuffled (envs)
])
def test_training_on_the_gather_fast_path_equals_the_plain_path(workflow_cls, extra):
    cfg = {**CFG, "training": {**CFG["training"], **extra}}
    plain_state, plain_metrics = train(workflow_cls, cfg, False)
    fast_state, fast_metrics = train(workflow_cls, cfg, True)
    for a, b in zip(jax.tree.leaves(plain_state.agent_state.params), jax.tree.leaves(fast_state.agent_state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_equal(plain_metrics, fast_metrics)
