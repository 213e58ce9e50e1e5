"""Proximal Policy Optimization (Schulman et al., 2017) with the clipped surrogate objective."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import struct

from evorl.config.hparams import check_ppo
from evorl.engine.on_policy_workflow import OnPolicyWorkflow
from evorl.envs.spaces import Box, Space
from evorl.rl.actor_critic import ActorCriticAgent, NetworkFactory, build_actor_critic
from evorl.rl.algorithm import ON_POLICY, Algorithm
from evorl.rl.gae import explained_variance, normalize_advantages


@struct.dataclass
class PPOHParams:
    """PPO's loss hyperparameters, float32 data in the compiled program: a population may give
    each agent its own value of any field (``agent.<field>``; ``gamma`` and ``gae_lambda``
    are ``training.gamma`` and ``training.gae_lambda``)."""

    #: The discount :math:`\gamma` (``training.gamma``).
    gamma: float
    #: GAE's :math:`\lambda` (``training.gae_lambda``).
    gae_lambda: float
    #: :math:`\epsilon` of the clipped surrogate: the ratio is clipped to :math:`[1-\epsilon, 1+\epsilon]`.
    clip_epsilon: float
    #: :math:`\epsilon_v` of PPO2's clipped value loss (null: the plain squared error).
    value_clip_epsilon: float | None
    #: :math:`c_v`, the value loss's weight.
    vf_coef: float
    #: :math:`c_e`, the entropy bonus's weight.
    ent_coef: float
    #: :math:`c_{kl}`, the weight of the KL penalty to the behaviour policy.
    kl_coef: float
    #: Stop an iteration's updates once ``approx_kl`` exceeds ``1.5 target_kl`` (null: never).
    target_kl: float | None

    def validated(self) -> "PPOHParams":
        """Range checks (:func:`evorl.config.hparams.check_ppo`); returns the hyperparameters to use."""
        check_ppo(self)
        return self


@dataclass(frozen=True, eq=False)
class PPOAgent(ActorCriticAgent):
    r"""PPO's loss on a minibatch of transitions with ratio :math:`\rho = \pi(a|s) / \mu(a|s)`
    and (optionally normalised) GAE advantages :math:`A`:

    .. math::
        L = -\mathbb{E}[\min(\rho A, \mathrm{clip}(\rho, 1-\epsilon, 1+\epsilon) A)]
            + c_v \tfrac12 \mathbb{E}[(V(s) - \hat R)^2] - c_e \mathbb{E}[H(\pi(\cdot|s))]
            + c_{kl} \mathbb{E}[(\rho - 1) - \log \rho]

    The value loss optionally uses PPO2's clipped form
    :math:`\max((V - \hat R)^2, (V_{old} + \mathrm{clip}(V - V_{old}, \pm\epsilon_v) - \hat R)^2)`.
    The last term is the low-variance estimator of :math:`KL(\mu \| \pi)` (also reported as
    ``approx_kl``); with ``target_kl``, the first minibatch step whose ``approx_kl`` (measured
    before the step) exceeds ``1.5 target_kl`` is not applied, nor any later one of that iteration.
    """

    #: Normalise the advantages of each minibatch to mean 0, std 1.
    normalize_gae: bool = True
    #: Declared by the factory: true when ``target_kl`` is set.
    stops_early: bool = False

    def loss(self, agent_state, batch, key):
        hp = agent_state.hparams
        dist = self.distribution
        dist_params, values, _ = self.unroll(agent_state, batch)  # [N, num_params], [N] (or [T, b, ...])

        log_ratio = dist.log_prob(dist_params, batch.actions) - batch.extras["logp"]  # [N]
        ratio = jnp.exp(log_ratio)
        advantages = batch.extras["advantages"]  # [N]
        if self.normalize_gae:
            advantages = normalize_advantages(advantages, self.axis_name)
        surrogate = jnp.minimum(
            ratio * advantages,
            jnp.clip(ratio, 1.0 - hp.clip_epsilon, 1.0 + hp.clip_epsilon) * advantages,
        )
        policy_loss = -jnp.mean(surrogate)

        returns = batch.extras["returns"]  # [N]
        value_error = jnp.square(values - returns)
        if hp.value_clip_epsilon is not None:
            old_values = batch.extras["values"]
            clipped = old_values + jnp.clip(values - old_values, -hp.value_clip_epsilon, hp.value_clip_epsilon)
            value_error = jnp.maximum(value_error, jnp.square(clipped - returns))
        value_loss = 0.5 * jnp.mean(value_error)

        entropy = jnp.mean(dist.entropy(dist_params, key))  # [N] -> []
        approx_kl = jnp.mean((ratio - 1.0) - log_ratio)
        loss = policy_loss + hp.vf_coef * value_loss - hp.ent_coef * entropy + hp.kl_coef * approx_kl
        metrics = {
            "loss": loss,
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": entropy,
            "approx_kl": jax.lax.stop_gradient(approx_kl),
            "clip_fraction": jnp.mean((jnp.abs(ratio - 1.0) > hp.clip_epsilon).astype(jnp.float32)),
            "explained_variance": explained_variance(values, returns),
        }
        return loss, jax.lax.stop_gradient(metrics)

    def stop_updates(self, agent_state, metrics):
        return metrics["approx_kl"] > 1.5 * agent_state.hparams.target_kl


def make_mlp_ppo_agent(
    action_space: Space,
    obs_space: Box | None = None,
    normalize_gae: bool = True,
    clip_epsilon: float = 0.2,
    value_clip_epsilon: float | None = None,
    vf_coef: float = 0.5,
    ent_coef: float = 0.01,
    kl_coef: float = 0.0,
    target_kl: float | None = None,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    network_factory: NetworkFactory | None = None,
    **network_options,
) -> PPOAgent:
    """A PPO agent (see :class:`PPOAgent`) with the networks of ``network_factory`` (default:
    separate actor and critic MLPs) configured by ``network_options``, the keys of
    :class:`~evorl.rl.actor_critic.ActorCriticOptions` (``actor_hidden_layer_sizes``, ``activation``,
    ``network``, ``policy_distribution``, ``normalize_obs``, ...).
    """
    hparams = PPOHParams(gamma=gamma, gae_lambda=gae_lambda, clip_epsilon=clip_epsilon,
                         value_clip_epsilon=value_clip_epsilon, vf_coef=vf_coef, ent_coef=ent_coef,
                         kl_coef=kl_coef, target_kl=target_kl).validated()
    return build_actor_critic(PPOAgent, "make_mlp_ppo_agent", action_space, obs_space, network_factory,
                              network_options, hparams, normalize_gae=normalize_gae,
                              stops_early=target_kl is not None)


#: Where a config does not say: 8 minibatches per epoch (the default job's value). With the shared
#: default of 4, the seed's ``ppo_cartpole.yaml`` (1M steps, [256, 256]) ended at 178.9 on seed 44
#: after holding 500 to iteration 720; with 8, seeds 42-48, 0, 1 end at 500.
PPO = Algorithm("PPO", make_mlp_ppo_agent, PPOHParams, ON_POLICY, training_defaults={"num_minibatches": 8})


class PPOWorkflow(OnPolicyWorkflow):
    algorithm = PPO


#: The ``agent:`` config section of PPO (derived from ``make_mlp_ppo_agent``).
PPOAgentConfig = PPO.agent_config_cls
