"""Proximal Policy Optimization (Schulman et al., 2017) with the clipped surrogate objective."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import struct

from evorl.agent import ActorCriticAgent, actor_critic_parts
from evorl.config import dataclass_from_signature, require
from evorl.envs.spaces import Box, Space
from evorl.utils.rl_toolkits import explained_variance, normalize_advantages
from evorl.workflows.rl_workflow import OnPolicyWorkflow


@struct.dataclass
class PPOHParams:
    discount: float
    gae_lambda: float
    clip_epsilon: float
    value_clip_epsilon: float | None
    vf_coef: float
    ent_coef: float
    kl_coef: float
    target_kl: float | None


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

    normalize_gae: bool = True
    hparams_defaults: PPOHParams | None = None

    def default_hparams(self) -> PPOHParams:
        return self.hparams_defaults

    def loss(self, agent_state, batch, key):
        hp = agent_state.hparams
        dist = self.distribution
        obs = self.preprocess(agent_state, batch.obs)  # [N, *obs_shape]
        dist_params = self.policy_network.apply(agent_state.params["policy"], obs)
        values = self.value_network.apply(agent_state.params["value"], obs)  # [N]

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
        target_kl = agent_state.hparams.target_kl
        if target_kl is None:
            return None
        if "approx_kl" not in metrics:
            return jnp.zeros((), bool)
        return metrics["approx_kl"] > 1.5 * target_kl


def make_mlp_ppo_agent(
    action_space: Space,
    obs_space: Box | None = None,
    actor_hidden_layer_sizes: tuple[int, ...] = (64, 64),
    critic_hidden_layer_sizes: tuple[int, ...] = (64, 64),
    activation: str = "tanh",
    network: str = "mlp",
    policy_distribution: str = "clipped_gaussian",
    state_dependent_std: bool = False,
    init_log_std: float = 0.0,
    normalize_obs: bool = False,
    normalize_gae: bool = True,
    clip_epsilon: float = 0.2,
    value_clip_epsilon: float | None = None,
    vf_coef: float = 0.5,
    ent_coef: float = 0.01,
    kl_coef: float = 0.0,
    target_kl: float | None = None,
    discount: float = 0.99,
    gae_lambda: float = 0.95,
) -> PPOAgent:
    """A PPO agent with separate actor and critic networks (see :class:`PPOAgent`).

    ``network``: "mlp", or "cnn" for image observations (see :mod:`evorl.networks`).
    ``policy_distribution`` / ``state_dependent_std``: the Gaussian of ``Box`` action spaces
    (see :mod:`evorl.distributions`); ``Discrete`` action spaces use the categorical.
    """
    parts = actor_critic_parts(
        "make_mlp_ppo_agent", action_space, obs_space, actor_hidden_layer_sizes, critic_hidden_layer_sizes,
        activation, network, policy_distribution, state_dependent_std, init_log_std, normalize_obs,
    )
    require(clip_epsilon > 0, f"clip_epsilon must be > 0, got {clip_epsilon}.")
    require(value_clip_epsilon is None or value_clip_epsilon > 0,
            f"value_clip_epsilon must be > 0 or null, got {value_clip_epsilon}.")
    require(target_kl is None or target_kl > 0, f"target_kl must be > 0 or null, got {target_kl}.")
    for name, value in (("vf_coef", vf_coef), ("ent_coef", ent_coef), ("kl_coef", kl_coef)):
        require(value >= 0, f"{name} must be >= 0, got {value}.")
    return PPOAgent(
        **parts,
        normalize_gae=normalize_gae,
        hparams_defaults=PPOHParams(
            discount=discount, gae_lambda=gae_lambda, clip_epsilon=clip_epsilon,
            value_clip_epsilon=value_clip_epsilon, vf_coef=vf_coef, ent_coef=ent_coef,
            kl_coef=kl_coef, target_kl=target_kl,
        ),
    )


PPOAgentConfig = dataclass_from_signature(
    "PPOAgentConfig", make_mlp_ppo_agent, exclude=("action_space", "obs_space", "discount", "gae_lambda")
)


class PPOWorkflow(OnPolicyWorkflow):
    agent_config_cls = PPOAgentConfig

    @classmethod
    def name(cls):
        return "PPO"

    @classmethod
    def build_agent(cls, env, agent_cfg, training):
        return make_mlp_ppo_agent(
            env.action_space, env.obs_space, discount=training.gamma, gae_lambda=training.gae_lambda,
            **vars(agent_cfg),
        )
