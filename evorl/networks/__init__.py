"""Network factories. A :class:`Network` is a pair of pure functions over a params pytree.

``make_policy_network`` returns a network whose output parametrises the action
distribution of :func:`evorl.distributions.make_distribution` (logits for ``Discrete``,
``(mean, log_std)`` for ``Box``); ``make_v_network`` returns a state-value network ``[...]``.
Any object with the same ``init`` / ``apply`` can replace them in an agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from evorl.distributions import make_distribution
from evorl.envs.spaces import Box, Discrete, Space
from evorl.config import ConfigError

ACTIVATIONS: dict[str, Callable] = {
    "tanh": nn.tanh,
    "relu": nn.relu,
    "elu": nn.elu,
    "gelu": nn.gelu,
    "silu": nn.silu,
    "swish": nn.silu,
}


def get_activation(name: str) -> Callable:
    if name not in ACTIVATIONS:
        raise ConfigError(f"Unknown activation {name!r}; valid: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


@dataclass(frozen=True)
class Network:
    """``init(key) -> params`` and ``apply(params, obs [..., *obs_shape]) -> out [..., ...]``."""

    init: Callable[[jax.Array], Any]
    apply: Callable[[Any, jax.Array], jax.Array]


class MLP(nn.Module):
    """Fully connected torso + linear head, orthogonal init (hidden ``sqrt(2)``)."""

    hidden_layer_sizes: Sequence[int]
    output_size: int
    activation: str = "tanh"
    head_scale: float = 1.0
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs):
        x = obs.reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))
        act = get_activation(self.activation)
        for size in self.hidden_layer_sizes:
            x = nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2)))(x)
            x = act(x)
        return nn.Dense(self.output_size, kernel_init=nn.initializers.orthogonal(self.head_scale))(x)


class GaussianPolicyMLP(nn.Module):
    """MLP mean and a state-independent ``log_std`` parameter; outputs ``[..., 2d]``."""

    hidden_layer_sizes: Sequence[int]
    action_dim: int
    activation: str = "tanh"
    init_log_std: float = 0.0
    obs_ndim: int = 1

    @nn.compact
    def __call__(self, obs):
        mean = MLP(self.hidden_layer_sizes, self.action_dim, self.activation, 0.01, self.obs_ndim)(obs)
        log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (self.action_dim,))
        return jnp.concatenate([mean, jnp.broadcast_to(log_std, mean.shape)], axis=-1)


def _check_sizes(hidden_layer_sizes) -> tuple[int, ...]:
    sizes = tuple(int(s) for s in hidden_layer_sizes)
    if any(s < 1 for s in sizes):
        raise ConfigError(f"hidden_layer_sizes must be positive, got {list(hidden_layer_sizes)}")
    return sizes


def _network(module: nn.Module, obs_space: Box) -> Network:
    dummy = jnp.zeros((1,) + obs_space.shape, jnp.float32)
    return Network(init=lambda key: module.init(key, dummy), apply=module.apply)


def make_policy_network(
    action_space: Space,
    obs_space: Box,
    hidden_layer_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    init_log_std: float = 0.0,
) -> Network:
    """Policy MLP for ``action_space``: logits for ``Discrete``, ``(mean, log_std)`` for ``Box``."""
    sizes = _check_sizes(hidden_layer_sizes)
    get_activation(activation)
    ndim = len(obs_space.shape)
    if isinstance(action_space, Discrete):
        module = MLP(sizes, action_space.n, activation, head_scale=0.01, obs_ndim=ndim)
    elif isinstance(action_space, Box):
        dim = make_distribution(action_space).dim
        module = GaussianPolicyMLP(sizes, dim, activation, init_log_std, obs_ndim=ndim)
    else:
        raise TypeError(f"Unsupported action space {action_space!r}")
    return _network(module, obs_space)


def make_v_network(
    obs_space: Box, hidden_layer_sizes: Sequence[int] = (64, 64), activation: str = "tanh"
) -> Network:
    """State-value MLP ``V(s)``; ``apply`` returns ``[...]`` (no trailing unit axis)."""
    sizes = _check_sizes(hidden_layer_sizes)
    get_activation(activation)
    module = MLP(sizes, 1, activation, head_scale=1.0, obs_ndim=len(obs_space.shape))
    net = _network(module, obs_space)
    return Network(init=net.init, apply=lambda params, obs: net.apply(params, obs)[..., 0])
