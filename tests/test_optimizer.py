"""``training.optimizer``: RMSprop is PyTorch's (SB3's and rl-baselines3-zoo's A2C), checked
against a NumPy transcription of ``torch.optim.RMSprop``; Adam stays optax's Adam. The on-policy
and off-policy training sections share the key and the one ``make_optimizer``."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from evorl.config import ConfigError, TrainingConfig
from evorl.config.training import OffPolicyTrainingConfig
from evorl.rl.learner import make_optimizer

GRADS = [np.array([[0.3, -2.0], [1e-4, 0.0]], np.float32), np.array([[-0.1, 0.5], [2e-4, 3.0]], np.float32),
         np.array([[0.2, 0.2], [-1e-4, -1.0]], np.float32)]


def torch_rmsprop(params, grads, lr, alpha=0.99, eps=1e-5):
    """torch.optim.RMSprop (not centred, no momentum): ``v = alpha v + (1 - alpha) g^2`` from
    ``v = 0``; ``p -= lr g / (sqrt(v) + eps)``."""
    v = np.zeros_like(params, np.float64)
    p = params.astype(np.float64)
    for g in grads:
        v = alpha * v + (1 - alpha) * g.astype(np.float64) ** 2
        p = p - lr * g / (np.sqrt(v) + eps)
    return p


def apply(optimizer, params, grads):
    state = optimizer.init(params)
    for g in grads:
        updates, state = optimizer.update(jnp.asarray(g), state, params)
        params = optax.apply_updates(params, updates)
    return np.asarray(params)


SECTIONS = pytest.mark.parametrize("section", [TrainingConfig, OffPolicyTrainingConfig],
                                   ids=["on_policy", "off_policy"])


@SECTIONS
def test_rmsprop_is_pytorchs(section):
    params = jnp.ones((2, 2), jnp.float32)
    tc = section(optimizer="rmsprop", learning_rate=7e-4, adam_eps=1e-5, max_grad_norm=None)
    got = apply(make_optimizer(tc), params, GRADS)
    np.testing.assert_allclose(got, torch_rmsprop(np.ones((2, 2)), GRADS, lr=7e-4), rtol=1e-6, atol=1e-7)


def test_rmsprop_clips_first():
    params = jnp.ones((2, 2), jnp.float32)
    tc = TrainingConfig(optimizer="rmsprop", learning_rate=7e-4, max_grad_norm=0.5)
    clipped = [g * min(1.0, 0.5 / np.linalg.norm(g)) for g in GRADS]
    got = apply(make_optimizer(tc), params, GRADS)
    np.testing.assert_allclose(got, torch_rmsprop(np.ones((2, 2)), clipped, lr=7e-4), rtol=1e-6, atol=1e-7)


@SECTIONS
def test_adam_is_the_default_and_optaxs(section):
    assert section().optimizer == "adam"
    params = jnp.ones((2, 2), jnp.float32)
    tc = section(learning_rate=1e-3, adam_eps=1e-5, max_grad_norm=None)
    expected = apply(optax.adam(1e-3, eps=1e-5), params, GRADS)
    np.testing.assert_array_equal(apply(make_optimizer(tc), params, GRADS), expected)


def test_off_policy_defaults_clip_then_adam():
    """The off-policy section's defaults: global norm clipped to 10, then Adam with eps 1e-8."""
    params = jnp.ones((2, 2), jnp.float32)
    big = [g * 100 for g in GRADS]
    expected = apply(optax.chain(optax.clip_by_global_norm(10.0), optax.adam(2.5e-4, eps=1e-8)), params, big)
    np.testing.assert_array_equal(apply(make_optimizer(OffPolicyTrainingConfig()), params, big), expected)


@SECTIONS
def test_an_unknown_optimizer_is_refused_in_one_line(section):
    with pytest.raises(ConfigError, match=r"training\.optimizer must be one of adam, rmsprop, got 'sgd'"):
        section(optimizer="sgd").validate("training")
