"""Action distributions: a categorical for ``Discrete`` and Gaussians for ``Box``.

Gaussian policies act in the normalised cube ``[-1, 1]^d``: a sample ``u`` of
``N(mean, std^2)`` is the policy's action (trajectories store ``u``; log-probabilities and
the loss use ``u``), and the environment receives ``low + (squash(u) + 1) / 2 * (high - low)``.
Two squashings are available (``policy_distribution``):

* ``"clipped_gaussian"`` (:class:`DiagGaussian`): ``squash = clip(u, -1, 1)``; the
  log-probability is the Gaussian's (the clipping is treated as part of the env).
* ``"tanh_gaussian"`` (:class:`TanhGaussian`): ``squash = tanh``; the log-probability is
  the density of ``a = tanh(u)``, with the change-of-variables correction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from evorl import hardware
from evorl.envs.spaces import Box, Discrete, Space


@dataclass(frozen=True)
class Categorical:
    """Softmax distribution over ``n`` actions; parameters are logits ``[..., n]``."""

    n: int

    def sample(self, logits, key):
        return jax.random.categorical(key, logits, axis=-1)

    def mode(self, logits):
        return jnp.argmax(logits, axis=-1)

    def log_prob(self, logits, action):
        return hardware.take_along_last(jax.nn.log_softmax(logits, axis=-1), action)

    def entropy(self, logits, key=None):
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.sum(jnp.exp(logp) * logp, axis=-1)

    def kl(self, logits_p, logits_q):
        """``KL(p || q)``."""
        logp = jax.nn.log_softmax(logits_p, axis=-1)
        logq = jax.nn.log_softmax(logits_q, axis=-1)
        return jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)

    def to_env_action(self, action):
        return action


@dataclass(frozen=True, eq=False)
class DiagGaussian:
    """Gaussian with diagonal covariance; parameters ``[..., 2d]`` = ``(mean, log_std)``."""

    low: np.ndarray  # [d] flattened bounds of the Box
    high: np.ndarray  # [d]
    shape: tuple[int, ...]  # the Box's own action shape

    @property
    def dim(self) -> int:
        return int(self.low.shape[0])

    def _split(self, params):
        mean, log_std = jnp.split(params, 2, axis=-1)
        return mean, log_std

    def sample(self, params, key):
        mean, log_std = self._split(params)
        return mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape, mean.dtype)

    def mode(self, params):
        return self._split(params)[0]

    def log_prob(self, params, action):
        mean, log_std = self._split(params)
        z = (action - mean) * jnp.exp(-log_std)
        return jnp.sum(-0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi), axis=-1)

    def entropy(self, params, key=None):
        _, log_std = self._split(params)
        return jnp.sum(log_std + 0.5 * (1.0 + math.log(2 * math.pi)), axis=-1)

    def kl(self, params_p, params_q):
        """``KL(p || q)``."""
        mp, lsp = self._split(params_p)
        mq, lsq = self._split(params_q)
        return jnp.sum(
            lsq - lsp + (jnp.exp(2 * lsp) + (mp - mq) ** 2) / (2 * jnp.exp(2 * lsq)) - 0.5, axis=-1
        )

    def to_env_action(self, action):
        unit = (jnp.clip(action, -1.0, 1.0) + 1.0) / 2.0
        action = self.low + unit * (self.high - self.low)
        return action.reshape(action.shape[:-1] + self.shape)


def log1m_tanh_sq(u):
    r"""Stable :math:`\log(1 - \tanh(u)^2) = 2 (\log 2 - u - \mathrm{softplus}(-2u))`."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


class TanhGaussian(DiagGaussian):
    r"""``a = tanh(u)``, ``u ~ N(mean, diag(std^2))``; the action kept for learning is ``u``.

    .. math::
        \log p(a) = \log \mathcal N(u; \mu, \sigma^2) - \sum_i \log(1 - \tanh(u_i)^2)

    (the density of ``a`` in ``[-1, 1]^d``; the further affine map into the Box bounds adds a
    constant). Its entropy has no closed form:
    :math:`H(a) = H(u) + \mathbb E_u[\sum_i \log(1 - \tanh(u_i)^2)]`. With a ``key`` we use a
    one-sample reparameterised estimate of the expectation (as brax does), which penalises
    saturating the tanh; without one, the Gaussian entropy :math:`H(u)`, an upper bound.
    ``kl`` is the Gaussians' KL: KL is invariant under the bijection ``tanh``.
    """

    def log_prob(self, params, action):
        return super().log_prob(params, action) - jnp.sum(log1m_tanh_sq(action), axis=-1)

    def entropy(self, params, key=None):
        gaussian_entropy = super().entropy(params)
        if key is None:
            return gaussian_entropy
        u = self.sample(params, key)
        return gaussian_entropy + jnp.sum(log1m_tanh_sq(u), axis=-1)

    def to_env_action(self, action):
        unit = (jnp.tanh(action) + 1.0) / 2.0
        action = self.low + unit * (self.high - self.low)
        return action.reshape(action.shape[:-1] + self.shape)


#: ``policy_distribution`` name -> Gaussian class for ``Box`` action spaces.
GAUSSIANS = {"clipped_gaussian": DiagGaussian, "tanh_gaussian": TanhGaussian}


def make_distribution(action_space: Space, policy_distribution: str = "clipped_gaussian"):
    """The categorical for ``Discrete``; for ``Box``, the Gaussian named ``policy_distribution``."""
    if policy_distribution not in GAUSSIANS:
        raise ValueError(f"Unknown policy_distribution {policy_distribution!r}; valid: {', '.join(GAUSSIANS)}.")
    if isinstance(action_space, Discrete):
        return Categorical(action_space.n)
    if isinstance(action_space, Box):
        if not action_space.is_bounded:
            raise ValueError(f"Gaussian policies need a bounded Box action space, got {action_space}")
        return GAUSSIANS[policy_distribution](
            action_space.low.reshape(-1), action_space.high.reshape(-1), action_space.shape
        )
    raise TypeError(f"Unsupported action space {action_space!r}; expected Box or Discrete.")
