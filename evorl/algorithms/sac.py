r"""Soft actor-critic (Haarnoja et al., 2018, with the automatic temperature of "SAC algorithms
and applications"), trained by :class:`~evorl.engine.off_policy_workflow.OffPolicyWorkflow`.

A tanh-Gaussian actor :math:`a = \tanh(u)`, :math:`u \sim \mathcal N(\mu_\phi(s), \sigma_\phi(s)^2)`,
twin critics :math:`Q_{\theta_{1,2}}` and a temperature :math:`\alpha = e^{\log\alpha}`.
Each gradient step, in this order:

.. math::
    L_Q = \sum_i \mathbb E\big[(Q_{\theta_i}(s, a) - y)^2\big], \quad
    y = R + D \big(\min_i \bar Q_i(s', a') - \alpha \log \pi(a' \mid s')\big), \; a' \sim \pi(\cdot \mid s')

    L_\pi = \mathbb E_{a \sim \pi}\big[\alpha \log \pi(a \mid s) - \min_i Q_{\theta_i}(s, a)\big]
    \quad \text{(reparameterised)}

    L_\alpha = -\mathbb E\big[\log\alpha \, (\log \pi(a \mid s) + \bar{\mathcal H})\big]

(:math:`R, D` the transition's discounted reward sum and bootstrap discount, :math:`\bar Q`
the Polyak-averaged target critics, :math:`\bar{\mathcal H}` the target entropy, by default
:math:`-\dim \mathcal A`). With a fixed ``alpha`` there is no :math:`L_\alpha`. It explores
by sampling :math:`\pi` and evaluates with :math:`\tanh(\mu_\phi(s))`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from evorl.config import parse_section
from evorl.config.agents import check_init_alpha
from evorl.config.hparams import check_sac
from evorl.engine.off_policy_workflow import OffPolicyWorkflow
from evorl.envs.spaces import Box, Space
from evorl.networks import GaussianPolicyMLP, Network
from evorl.networks.distributions import TanhGaussian
from evorl.rl.continuous_control import (
    ContinuousNetworkFactory, ContinuousNetworkOptions, ContinuousQAgent, check_options, make_q_ensemble,
)
from evorl.rl.algorithm import OFF_POLICY, Algorithm
from evorl.rl.off_policy import UpdateGroup
from evorl.rl.q_targets import Transition, soft_q_targets


@struct.dataclass
class SACHParams:
    """SAC's hyperparameters, float32 data in the compiled program (``agent.<field>``;
    ``gamma`` is ``training.gamma``)."""

    #: The discount :math:`\gamma` (``training.gamma``).
    gamma: float
    #: A fixed temperature :math:`\alpha` (null: learned, from ``init_alpha``).
    alpha: float | None = None
    #: The entropy the learned temperature aims for (null: minus the action dimension).
    target_entropy: float | None = None
    #: Polyak coefficient of a target update (``training.tau``; 1: a copy).
    tau: float = 0.005

    def validated(self) -> "SACHParams":
        check_sac(self)
        return self


def temperature_loss(log_alpha: jax.Array, log_probs: jax.Array, target_entropy: jax.Array) -> jax.Array:
    r""":math:`L_\alpha = -\mathrm{mean}(\log\alpha \, (\log\pi + \bar{\mathcal H}))`, ``log_probs [N]``
    held constant: it raises :math:`\alpha` while the policy's entropy is below the target."""
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_probs + target_entropy))


@dataclass(frozen=True, eq=False)
class SACAgent(ContinuousQAgent):
    """See the module docstring. ``params["alpha"]["log_alpha"]`` is the learned temperature."""

    #: The learned temperature's initial value (with ``alpha: null``).
    init_alpha: float = 1.0
    target_keys = ("critic",)

    @property
    def learns_alpha(self) -> bool:
        return self.hparams_defaults.alpha is None

    @property
    def update_groups(self) -> tuple[UpdateGroup, ...]:
        groups = (UpdateGroup("critic", self.critic_loss), UpdateGroup("actor", self.actor_loss))
        return groups + ((UpdateGroup("alpha", self.alpha_loss),) if self.learns_alpha else ())

    def extra_params(self) -> dict:
        return {"alpha": {"log_alpha": jnp.asarray(math.log(self.init_alpha), jnp.float32)}}

    @property
    def distribution(self) -> TanhGaussian:
        ones = np.ones(self.action_dim, np.float32)
        return TanhGaussian(-ones, ones, (self.action_dim,))

    def alpha(self, agent_state) -> jax.Array:
        hp = agent_state.hparams
        return jnp.exp(agent_state.params["alpha"]["log_alpha"]) if hp.alpha is None else hp.alpha

    def target_entropy(self, agent_state) -> jax.Array | float:
        hp = agent_state.hparams
        return -float(self.action_dim) if hp.target_entropy is None else hp.target_entropy

    def sample(self, agent_state, actor_params, obs: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Reparameterised actions ``tanh(u) [N, d]`` and their log-probabilities ``[N]``."""
        dist_params = self.actor.apply(actor_params, self.normalized_obs(agent_state, obs))  # [N, 2d]
        u = self.distribution.sample(dist_params, key)
        return jnp.tanh(u), self.distribution.log_prob(dist_params, u)

    def actor_actions(self, agent_state, actor_params, obs):
        return jnp.tanh(self.distribution.mode(self.actor.apply(actor_params, self.normalized_obs(agent_state, obs))))

    def explore(self, agent_state, obs, keys):
        return jax.vmap(lambda o, k: self.sample(agent_state, agent_state.params["actor"], o[None], k)[0][0])(obs, keys)

    def critic_loss(self, agent_state, target_params: Any, batch: Transition, key: jax.Array):
        alpha = jax.lax.stop_gradient(self.alpha(agent_state))
        next_actions, next_log_probs = self.sample(agent_state, agent_state.params["actor"], batch.next_obs, key)
        q_next = self.q_values(agent_state, target_params["critic"], batch.next_obs, next_actions)  # [C, N]
        targets = jax.lax.stop_gradient(soft_q_targets(q_next, next_log_probs, alpha, batch.reward, batch.discount))
        q = self.q_values(agent_state, agent_state.params["critic"], batch.obs, batch.action)  # [C, N]
        loss = jnp.sum(jnp.mean(jnp.square(q - targets), axis=-1))  # summed over the critics
        return loss, jax.lax.stop_gradient({"critic_loss": loss, "q_mean": jnp.mean(q[0]), "alpha": alpha})

    def actor_loss(self, agent_state, target_params: Any, batch: Transition, key: jax.Array):
        alpha = jax.lax.stop_gradient(self.alpha(agent_state))
        actions, log_probs = self.sample(agent_state, agent_state.params["actor"], batch.obs, key)  # [N, d], [N]
        q = jnp.min(self.q_values(agent_state, agent_state.params["critic"], batch.obs, actions), axis=0)  # [N]
        loss = jnp.mean(alpha * log_probs - q)
        return loss, jax.lax.stop_gradient({"actor_loss": loss, "entropy": -jnp.mean(log_probs)})

    def alpha_loss(self, agent_state, target_params: Any, batch: Transition, key: jax.Array):
        _, log_probs = self.sample(agent_state, agent_state.params["actor"], batch.obs, key)
        loss = temperature_loss(agent_state.params["alpha"]["log_alpha"], log_probs, self.target_entropy(agent_state))
        return loss, jax.lax.stop_gradient({"alpha_loss": loss})


def make_sac_actor(obs_space: Box, action_dim: int, options: ContinuousNetworkOptions) -> Network:
    """The tanh-Gaussian actor's network: ``(mean, log_std) [..., 2d]``, ``log_std`` from a head."""
    module = GaussianPolicyMLP(tuple(int(s) for s in options.actor_hidden_layer_sizes), action_dim, options.activation,
                               obs_ndim=len(obs_space.shape), state_dependent_std=True)
    obs = jnp.zeros((1,) + obs_space.shape, jnp.float32)
    return Network(init=lambda key: module.init(key, obs), apply=module.apply)


def make_mlp_sac_agent(action_space: Space, obs_space: Box | None = None, alpha: float | None = None,
                       init_alpha: float = 1.0, target_entropy: float | None = None, gamma: float = 0.99,
                       tau: float = 0.005, network_factory: ContinuousNetworkFactory | None = None, **network_options) -> SACAgent:
    """A SAC agent (see the module docstring): twin critics, a learned temperature starting at
    ``init_alpha`` unless ``alpha`` fixes it. ``network_options``: :class:`ContinuousNetworkOptions`."""
    options = parse_section(ContinuousNetworkOptions, network_options, "agent")
    action_dim = check_options(action_space, obs_space, options, "make_mlp_sac_agent")
    check_init_alpha(init_alpha)
    if network_factory is None:
        actor = make_sac_actor(obs_space, action_dim, options)
        critic = make_q_ensemble(obs_space, action_dim, options.critic_hidden_layer_sizes, options.activation, 2)
    else:
        actor, critic = network_factory(action_space, obs_space, options)
    hparams = SACHParams(gamma=gamma, alpha=alpha, target_entropy=target_entropy, tau=tau).validated()
    return SACAgent(action_space=action_space, obs_space=obs_space, actor=actor, critic=critic,
                    normalize_obs=options.normalize_obs, hparams_defaults=hparams, init_alpha=init_alpha)


SAC = Algorithm("SAC", make_mlp_sac_agent, SACHParams, OFF_POLICY, training_hparams=("gamma", "tau"),
                agent_options_cls=ContinuousNetworkOptions)


class SACWorkflow(OffPolicyWorkflow):
    algorithm = SAC


__all__ = ["SAC", "SACAgent", "SACHParams", "SACWorkflow", "make_mlp_sac_agent", "soft_q_targets", "temperature_loss"]
