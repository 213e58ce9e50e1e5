"""Advantage actor-critic (A2C): the synchronous variant of A3C (Mnih et al., 2016)."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import struct

from evorl.config.hparams import check_a2c
from evorl.engine.on_policy_workflow import OnPolicyWorkflow
from evorl.envs.spaces import Box, Space
from evorl.rl.actor_critic import ActorCriticAgent, NetworkFactory, build_actor_critic
from evorl.rl.algorithm import ON_POLICY, Algorithm
from evorl.rl.gae import explained_variance, normalize_advantages


@struct.dataclass
class A2CHParams:
    """A2C's loss hyperparameters (data: a population may vary each field, see ``PPOHParams``)."""

    #: The discount :math:`\gamma` (``training.gamma``).
    gamma: float
    #: GAE's :math:`\lambda` (``training.gae_lambda``; 1 gives n-step returns).
    gae_lambda: float
    #: :math:`c_v`, the value loss's weight.
    vf_coef: float
    #: :math:`c_e`, the entropy bonus's weight.
    ent_coef: float

    def validated(self) -> "A2CHParams":
        check_a2c(self)
        return self


@dataclass(frozen=True, eq=False)
class A2CAgent(ActorCriticAgent):
    r"""The plain actor-critic loss, no importance ratio, on the rollout just collected:

    .. math::
        L = -\mathbb{E}[\log \pi(a|s) A] + c_v \tfrac12 \mathbb{E}[(V(s) - \hat R)^2]
            - c_e \mathbb{E}[H(\pi(\cdot|s))]

    :math:`A` and :math:`\hat R = A + V` come from :func:`~evorl.rl.gae.compute_gae`
    (``ActorCriticAgent.compute_targets``). ``gae_lambda = 1`` gives A3C's n-step returns
    :math:`\sum_{k<n} \gamma^k r_{t+k} + \gamma^n V(s_{t+n})` with ``n`` reaching to the end
    of the rollout (``n = rollout_length - t``) or of the episode; ``gae_lambda < 1`` gives GAE.
    """

    #: Normalise the advantages of each minibatch to mean 0, std 1.
    normalize_gae: bool = False

    def loss(self, agent_state, batch, key):
        hp = agent_state.hparams
        dist_params, values, _ = self.unroll(agent_state, batch)  # [N, num_params], [N] (or [T, b, ...])

        advantages = batch.extras["advantages"]  # [N]
        if self.normalize_gae:
            advantages = normalize_advantages(advantages, self.axis_name)
        log_prob = self.distribution.log_prob(dist_params, batch.actions)  # [N]
        policy_loss = -jnp.mean(log_prob * advantages)

        returns = batch.extras["returns"]  # [N]
        value_loss = 0.5 * jnp.mean(jnp.square(values - returns))
        entropy = jnp.mean(self.distribution.entropy(dist_params, key))
        loss = policy_loss + hp.vf_coef * value_loss - hp.ent_coef * entropy
        metrics = {
            "loss": loss,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "explained_variance": explained_variance(values, returns),
        }
        return loss, jax.lax.stop_gradient(metrics)


def make_mlp_a2c_agent(
    action_space: Space,
    obs_space: Box | None = None,
    normalize_gae: bool = False,
    vf_coef: float = 0.5,
    ent_coef: float = 0.01,
    gamma: float = 0.99,
    gae_lambda: float = 1.0,
    network_factory: NetworkFactory | None = None,
    **network_options,
) -> A2CAgent:
    """An A2C agent (see :class:`A2CAgent`); networks as in
    :func:`~evorl.algorithms.ppo.make_mlp_ppo_agent`."""
    hparams = A2CHParams(gamma=gamma, gae_lambda=gae_lambda, vf_coef=vf_coef, ent_coef=ent_coef).validated()
    return build_actor_critic(A2CAgent, "make_mlp_a2c_agent", action_space, obs_space, network_factory,
                              network_options, hparams, normalize_gae=normalize_gae)


A2C = Algorithm("A2C", make_mlp_a2c_agent, A2CHParams, ON_POLICY,
                training_defaults={"num_epochs": 1, "num_minibatches": 1})


class A2CWorkflow(OnPolicyWorkflow):
    """A2C: one synchronous gradient step on each rollout (``num_epochs = num_minibatches = 1``)."""

    algorithm = A2C
    one_gradient_step = True


#: The ``agent:`` config section of A2C (derived from ``make_mlp_a2c_agent``).
A2CAgentConfig = A2C.agent_config_cls
