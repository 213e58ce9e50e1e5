"""Network factories. A :class:`Network` is a pair of pure functions over a params pytree.

``make_policy_network`` returns a network whose output parametrises the action
distribution of :func:`evorl.networks.distributions.make_distribution` (logits for ``Discrete``,
``(mean, log_std)`` for ``Box``); ``make_v_network`` returns a state-value network ``[...]``.
Any object with the same ``init`` / ``apply`` can replace them in an agent.

``network`` picks the torso: ``"mlp"`` flattens the observation; ``"cnn"`` (image
observations ``[H, W, C]``, e.g. MinAtar's ``[10, 10, C]``) first applies 3x3 convolutions
(``CNN_CHANNELS``, stride 1, no padding) and flattens their output; ``"nature_cnn"`` (Atari
frames, ``[84, 84, 4]`` uint8) is the torso of the Nature DQN (Mnih et al., 2015): pixels
``/ 255``, then 32 8x8 stride-4, 64 4x4 stride-2 and 64 3x3 stride-1 VALID convolutions
with ReLU, flattened. All continue with the fully connected ``hidden_layer_sizes`` and a
linear head. Observations enter every torso as float32 (uint8 pixels never overflow).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from evorl import hardware
from evorl.config.agents import check_activation, check_hidden_sizes
from evorl.envs.spaces import Box, Discrete, Space
from evorl.networks.distributions import make_distribution
from evorl.networks.initializers import orthogonal

ACTIVATIONS: dict[str, Callable] = {
    "tanh": nn.tanh,
    "relu": nn.relu,
    "elu": nn.elu,
    "gelu": nn.gelu,
    "silu": nn.silu,
    "swish": nn.silu,
}


NETWORKS = ("mlp", "cnn", "nature_cnn")
#: Networks whose torso needs image observations ``[H, W, C]``.
IMAGE_NETWORKS = ("cnn", "nature_cnn")
#: Conv channels of the ``"cnn"`` torso: MinAtar's reference network (Young & Tian, 2019)
#: has one 16-channel 3x3 layer.
CNN_CHANNELS = (16,)
#: Range of a state-dependent ``log_std`` (clipped), keeping the policy's std in [e^-5, e^2].
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def get_activation(name: str) -> Callable:
    check_activation(name, tuple(ACTIVATIONS))
    return ACTIVATIONS[name]


@dataclass(frozen=True)
class Network:
    """``init(key) -> params`` and ``apply(params, obs [..., *obs_shape]) -> out [..., ...]``."""

    init: Callable[[jax.Array], Any]
    apply: Callable[[Any, jax.Array], jax.Array]


class ConvTorso(nn.Module):
    """3x3 VALID convolutions + activation, flattened: ``[..., H, W, C] -> [..., F]``; each
    convolution a :class:`evorl.hardware.Conv` (kernel ``Conv_k`` ``[9 C_in, channels]``)."""

    channels: Sequence[int]
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs):
        batch_shape = obs.shape[:-3]
        x = obs.reshape((-1,) + obs.shape[-3:])  # [N, H, W, C]
        for k, channels in enumerate(self.channels):
            conv = hardware.Conv(channels, 3, 1, kernel_init=orthogonal(np.sqrt(2)), name=f"Conv_{k}")
            x = conv(x)  # [N, H-2, W-2, channels]
            x = get_activation(self.activation)(x)
        return x.reshape(batch_shape + (-1,))  # [..., H' W' C']


class NatureCNNTorso(nn.Module):
    """The Nature DQN torso: ``[..., H, W, C]`` pixels in ``[0, 255]`` -> ``[..., F]``
    (``F = 7 * 7 * 64 = 3136`` for 84x84 frames); ReLU, orthogonal init ``sqrt(2)``. Each
    convolution is a :class:`evorl.hardware.Conv` (its kernel ``Conv_k`` is
    ``[kernel^2 C_in, channels]``, see :func:`evorl.hardware.im2col.conv_patches`)."""

    #: ``(channels, kernel side, stride)`` of each VALID convolution.
    layers: Sequence[tuple[int, int, int]] = ((32, 8, 4), (64, 4, 2), (64, 3, 1))

    @nn.compact
    def __call__(self, obs):
        batch_shape = obs.shape[:-3]
        x = obs.reshape((-1,) + obs.shape[-3:]).astype(jnp.float32) / 255.0  # [N, H, W, C]
        for k, (channels, kernel, stride) in enumerate(self.layers):
            conv = hardware.Conv(channels, kernel, stride, kernel_init=orthogonal(np.sqrt(2)), name=f"Conv_{k}")
            x = nn.relu(conv(x))  # [N, H', W', channels]
        return x.reshape(batch_shape + (-1,))  # [..., H' W' C']


def image_torso(obs: jax.Array, nature_cnn: bool, conv_channels: Sequence[int], activation: str) -> jax.Array:
    """The image torso's features ``[..., F]``, called inside a compact module: the Nature DQN
    torso, or the 3x3 conv torso with ``conv_channels``."""
    return NatureCNNTorso()(obs) if nature_cnn else ConvTorso(conv_channels, activation)(obs)


class MLP(nn.Module):
    """(Optional conv torso +) fully connected layers + linear head, orthogonal init
    (hidden ``sqrt(2)``). ``nature_cnn``: the Nature DQN torso; else ``conv_channels``
    non-empty: the 3x3 conv torso; else the observation is flattened."""

    hidden_layer_sizes: Sequence[int]
    output_size: int
    activation: str = "tanh"
    head_scale: float = 1.0
    obs_ndim: int = 1
    conv_channels: Sequence[int] = ()
    nature_cnn: bool = False

    @nn.compact
    def __call__(self, obs):
        obs = jnp.asarray(obs, jnp.float32)
        if self.nature_cnn or self.conv_channels:
            x = image_torso(obs, self.nature_cnn, self.conv_channels, self.activation)
        else:
            x = obs.reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))
        act = get_activation(self.activation)
        for size in self.hidden_layer_sizes:
            x = nn.Dense(size, kernel_init=orthogonal(np.sqrt(2)))(x)
            x = act(x)
        return nn.Dense(self.output_size, kernel_init=orthogonal(self.head_scale))(x)


class GaussianPolicyMLP(nn.Module):
    """MLP mean and ``log_std``; outputs ``[..., 2d]``. ``log_std`` is a free parameter, or
    with ``state_dependent_std`` a second head, ``clip(init_log_std + head(s), LOG_STD_MIN,
    LOG_STD_MAX)``."""

    hidden_layer_sizes: Sequence[int]
    action_dim: int
    activation: str = "tanh"
    init_log_std: float = 0.0
    obs_ndim: int = 1
    conv_channels: Sequence[int] = ()
    state_dependent_std: bool = False
    nature_cnn: bool = False

    @nn.compact
    def __call__(self, obs):
        outputs = self.action_dim * (2 if self.state_dependent_std else 1)
        out = MLP(self.hidden_layer_sizes, outputs, self.activation, 0.01, self.obs_ndim, self.conv_channels,
                  self.nature_cnn)(obs)
        if self.state_dependent_std:
            mean, raw = jnp.split(out, 2, axis=-1)  # [..., d] each
            log_std = jnp.clip(self.init_log_std + raw, LOG_STD_MIN, LOG_STD_MAX)
        else:
            mean = out
            log_std = self.param("log_std", nn.initializers.constant(self.init_log_std), (self.action_dim,))
        return jnp.concatenate([mean, jnp.broadcast_to(log_std, mean.shape)], axis=-1)


def _check_sizes(hidden_layer_sizes) -> tuple[int, ...]:
    sizes = tuple(int(s) for s in hidden_layer_sizes)
    check_hidden_sizes(hidden_layer_sizes)
    return sizes


def _network(module: nn.Module, obs_space: Box) -> Network:
    dummy = jnp.zeros((1,) + obs_space.shape, jnp.float32)
    return Network(init=lambda key: module.init(key, dummy), apply=module.apply)


def conv_channels_for(network: str, obs_space: Box) -> tuple[int, ...]:
    """The 3x3 conv torso's channels for ``network`` (empty for ``"mlp"`` and
    ``"nature_cnn"``), checking the obs rank."""
    if network not in NETWORKS:
        raise ValueError(f"Unknown network {network!r}; valid: {', '.join(NETWORKS)}.")
    if network in IMAGE_NETWORKS and len(obs_space.shape) != 3:
        raise ValueError(
            f"network={network!r} needs image observations [H, W, C], got obs shape {obs_space.shape}; "
            f"use network='mlp'."
        )
    return CNN_CHANNELS if network == "cnn" else ()


def make_policy_network(
    action_space: Space,
    obs_space: Box,
    hidden_layer_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    init_log_std: float = 0.0,
    state_dependent_std: bool = False,
    network: str = "mlp",
) -> Network:
    """Policy network for ``action_space``: logits for ``Discrete``, ``(mean, log_std)`` for
    ``Box`` (``state_dependent_std``: ``log_std`` from a head instead of a free parameter)."""
    sizes = _check_sizes(hidden_layer_sizes)
    get_activation(activation)
    conv = conv_channels_for(network, obs_space)
    ndim = len(obs_space.shape)
    if isinstance(action_space, Discrete):
        if state_dependent_std:
            raise ValueError("state_dependent_std applies to Box (Gaussian) action spaces, not Discrete.")
        module = MLP(sizes, action_space.n, activation, head_scale=0.01, obs_ndim=ndim, conv_channels=conv,
                     nature_cnn=network == "nature_cnn")
    elif isinstance(action_space, Box):
        dim = make_distribution(action_space).dim
        module = GaussianPolicyMLP(sizes, dim, activation, init_log_std, ndim, conv, state_dependent_std,
                                   nature_cnn=network == "nature_cnn")
    else:
        raise TypeError(f"Unsupported action space {action_space!r}")
    return _network(module, obs_space)


def make_torso_network(obs_space: Box, network: str, activation: str = "relu",
                       dense_size: int | None = None) -> tuple[Network, Box]:
    """The torso of ``network`` alone, for an actor and a critic that share it (and a recurrent
    core, which reads it): ``apply(params, obs [..., *obs_shape]) -> features [..., F]``. The
    image torso of ``"cnn"`` / ``"nature_cnn"``; for ``"mlp"``, the flattened observation
    through one fully connected layer of ``dense_size`` units with ``activation``. Returns the
    network and the space of its features (``Box`` of shape ``[F]``), which the heads read."""
    if network not in IMAGE_NETWORKS and dense_size is None:
        raise ValueError(f"a shared torso needs an image network ({', '.join(IMAGE_NETWORKS)}) or, for "
                         f"{network!r}, a dense_size")
    conv = conv_channels_for(network, obs_space)
    act = get_activation(activation)
    ndim = len(obs_space.shape)

    class Torso(nn.Module):
        @nn.compact
        def __call__(self, obs):
            obs = jnp.asarray(obs, jnp.float32)
            if network in IMAGE_NETWORKS:
                return image_torso(obs, network == "nature_cnn", conv, activation)
            x = obs.reshape(obs.shape[: obs.ndim - ndim] + (-1,))  # [..., prod(obs_shape)]
            return act(nn.Dense(dense_size, kernel_init=orthogonal(np.sqrt(2)))(x))

    torso = _network(Torso(), obs_space)
    features = jax.eval_shape(lambda: torso.apply(torso.init(jax.random.PRNGKey(0)), jnp.zeros((1,) + obs_space.shape)))
    dim = features.shape[-1]
    return torso, Box(low=np.full((dim,), -np.inf, np.float32), high=np.full((dim,), np.inf, np.float32))


def make_v_network(
    obs_space: Box,
    hidden_layer_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    network: str = "mlp",
) -> Network:
    """State-value network ``V(s)``; ``apply`` returns ``[...]`` (no trailing unit axis)."""
    sizes = _check_sizes(hidden_layer_sizes)
    get_activation(activation)
    conv = conv_channels_for(network, obs_space)
    module = MLP(sizes, 1, activation, head_scale=1.0, obs_ndim=len(obs_space.shape), conv_channels=conv,
                 nature_cnn=network == "nature_cnn")
    net = _network(module, obs_space)
    return Network(init=net.init, apply=lambda params, obs: net.apply(params, obs)[..., 0])


#: Recurrent cores (``agent.core``): none, a GRU (Cho et al., 2014) or an LSTM (Hochreiter &
#: Schmidhuber, 1997).
CORES = ("none", "gru", "lstm")


@dataclass(frozen=True)
class RecurrentCore:
    r"""A recurrent cell between the torso and the heads.

    ``init(key) -> params``; ``initial_state(batch_shape=()) -> carry`` (zeros: ``[*batch, H]``
    for a GRU, the pair ``(c, h)`` for an LSTM); ``apply(params, carry, x [*batch, F]) ->
    (carry, y [*batch, H])``, one step. The GRU's step is

    .. math::
        r = \sigma(W_r x + U_r h), \; z = \sigma(W_z x + U_z h), \;
        n = \tanh(W_n x + r \odot (U_n h + b_n)), \; h' = (1 - z) \odot n + z \odot h = y
    """

    kind: str
    size: int
    init: Callable[[jax.Array], Any]
    apply: Callable[[Any, Any, jax.Array], tuple[Any, jax.Array]]
    initial_state: Callable[..., Any]


def make_core(kind: str, input_dim: int, size: int) -> RecurrentCore:
    """A :class:`RecurrentCore` of ``kind`` (``"gru"`` or ``"lstm"``, flax's cells) with ``size``
    units reading features of ``input_dim``."""
    if kind not in CORES[1:]:
        raise ValueError(f"Unknown core {kind!r}; valid: {', '.join(CORES[1:])}.")
    if int(size) < 1:
        raise ValueError(f"core size must be >= 1, got {size}")
    cell = nn.GRUCell(features=size) if kind == "gru" else nn.OptimizedLSTMCell(features=size)

    def initial_state(batch_shape: tuple[int, ...] = ()) -> Any:
        zeros = jnp.zeros(tuple(batch_shape) + (size,), jnp.float32)
        return zeros if kind == "gru" else (zeros, zeros)

    return RecurrentCore(kind, size, init=lambda key: cell.init(key, initial_state(), jnp.zeros((input_dim,))),
                         apply=cell.apply, initial_state=initial_state)
