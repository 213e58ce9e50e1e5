"""evorl.hardware: the choice of path (backend, EVORL_FAST_PATHS, use_fast_paths), and the
conv path: the same parameters on both, im2col equal to lax.conv. The random path's tests
are in tests/test_prng.py."""

import gc

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl import hardware
from evorl.hardware import im2col
from evorl.networks import ConvTorso, NatureCNNTorso


def test_the_default_is_by_backend_and_overridable(monkeypatch):
    monkeypatch.delenv(hardware.ENV_VAR, raising=False)
    backend = jax.default_backend()
    for path, backends in hardware.FAST_ON.items():
        assert hardware.is_fast(path) == (backend in backends)
    monkeypatch.setenv(hardware.ENV_VAR, "none")
    assert not any(hardware.is_fast(p) for p in hardware.FAST_ON)
    with hardware.use_fast_paths(conv=True):  # the context manager takes precedence
        assert hardware.is_fast("conv") and not hardware.is_fast("random")
    monkeypatch.setenv(hardware.ENV_VAR, "all")
    assert all(hardware.is_fast(p) for p in hardware.FAST_ON)
    with hardware.use_fast_paths(False):
        assert not any(hardware.is_fast(p) for p in hardware.FAST_ON)
        with hardware.use_fast_paths(random=True):
            assert hardware.is_fast("random") and not hardware.is_fast("gc")
        assert not hardware.is_fast("random")
    assert hardware.is_fast("random")  # restored
    monkeypatch.setenv(hardware.ENV_VAR, "random, gc")
    assert [hardware.is_fast(p) for p in ("random", "conv", "gc")] == [True, False, True]
    monkeypatch.setenv(hardware.ENV_VAR, "random,threefry")
    with pytest.raises(ValueError, match="unknown path.*threefry"):
        hardware.is_fast("random")
    with pytest.raises(TypeError, match="unknown path.*cnn"):
        with hardware.use_fast_paths(cnn=True):
            pass


def test_plain_random_path_is_jax_random():
    key = jax.random.PRNGKey(4)
    with hardware.use_fast_paths(random=False):
        assert hardware.fast_key(key) is key
    with hardware.use_fast_paths(random=True):
        assert jnp.issubdtype(hardware.fast_key(key).dtype, jax.dtypes.prng_key)
        np.testing.assert_array_equal(hardware.permutation(key, 50), jax.random.permutation(key, 50))


class DenseOverPatches(nn.Module):
    """The conv layer as evorl wrote it before evorl.hardware: nn.Dense over the patches."""

    features: int
    kernel_size: int
    stride: int

    @nn.compact
    def __call__(self, x):
        dense = nn.Dense(self.features, kernel_init=nn.initializers.orthogonal(np.sqrt(2)), name="Conv_0")
        return dense(im2col.conv_patches(x, self.kernel_size, self.stride))


class OneConv(nn.Module):
    features: int
    kernel_size: int
    stride: int

    @nn.compact
    def __call__(self, x):
        return hardware.Conv(self.features, self.kernel_size, self.stride, name="Conv_0")(x)


@pytest.mark.parametrize("shape, layer", [((5, 10, 10, 4), (16, 3, 1)), ((3, 20, 20, 4), (8, 8, 4)),
                                          ((3, 20, 20, 8), (6, 4, 2)), ((2, 9, 7, 3), (5, 3, 1))])
def test_conv_paths_have_the_same_parameters_and_outputs(shape, layer):
    x = jax.random.normal(jax.random.PRNGKey(0), shape)
    old, conv = DenseOverPatches(*layer), OneConv(*layer)
    old_params = old.init(jax.random.PRNGKey(1), x)
    with hardware.use_fast_paths(conv=True):
        fast_params = conv.init(jax.random.PRNGKey(1), x)
        fast = jax.jit(conv.apply)(fast_params, x)
        fast_grad = jax.jit(jax.grad(lambda p: jnp.sum(jnp.tanh(conv.apply(p, x)))))(fast_params)
    with hardware.use_fast_paths(conv=False):
        plain_params = conv.init(jax.random.PRNGKey(1), x)
        plain = jax.jit(conv.apply)(plain_params, x)
        plain_grad = jax.jit(jax.grad(lambda p: jnp.sum(jnp.tanh(conv.apply(p, x)))))(plain_params)
    # one parameter tree, the pre-hardware one, bit for bit (checkpoints load on either path)
    for params in (fast_params, plain_params):
        assert jax.tree.structure(params) == jax.tree.structure(old_params)
        for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(old_params)):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fast, jax.jit(old.apply)(old_params, x))  # fast path: the old product, exactly
    np.testing.assert_allclose(plain, fast, rtol=1e-5, atol=1e-5)  # plain: lax.conv
    for a, b in zip(jax.tree.leaves(plain_grad), jax.tree.leaves(fast_grad)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    # the plain path is XLA's convolution; the fast one has none
    with hardware.use_fast_paths(conv=False):
        assert "convolution" in jax.jit(conv.apply).lower(plain_params, x).as_text()
    with hardware.use_fast_paths(conv=True):
        assert "convolution" not in jax.jit(conv.apply).lower(plain_params, x).as_text()


@pytest.mark.parametrize("torso, shape", [(ConvTorso((16,), "relu"), (2, 3, 10, 10, 4)),  # Nature CNN: 84x84 frames
                                          pytest.param(NatureCNNTorso(), (2, 84, 84, 4), marks=pytest.mark.slow)])
def test_torsos_on_both_conv_paths(torso, shape):
    obs = jax.random.uniform(jax.random.PRNGKey(2), shape, maxval=255.0)
    with hardware.use_fast_paths(conv=True):
        params = torso.init(jax.random.PRNGKey(3), obs)
        fast = torso.apply(params, obs)
    with hardware.use_fast_paths(conv=False):
        plain_params = torso.init(jax.random.PRNGKey(3), obs)
        plain = torso.apply(params, obs)
    jax.tree.map(np.testing.assert_array_equal, params, plain_params)
    np.testing.assert_allclose(plain, fast, rtol=1e-4, atol=1e-4)


def test_imports_frozen_only_on_the_fast_gc_path():
    assert gc.get_freeze_count() == 0
    with hardware.use_fast_paths(gc=False), hardware.imports_frozen():
        assert gc.get_freeze_count() == 0
    with hardware.use_fast_paths(gc=True), hardware.imports_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
