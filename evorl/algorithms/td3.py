r"""TD3 (Fujimoto et al., 2018) and DDPG (Lillicrap et al., 2016), trained by
:class:`~evorl.engine.off_policy_workflow.OffPolicyWorkflow`.

A deterministic actor :math:`\mu_\phi(s) \in [-1, 1]^d` and critics :math:`Q_{\theta_i}(s, a)`.
Each gradient step fits the critics to

.. math::
    y = R + D \min_i \bar Q_i\big(s', \mathrm{clip}(\bar\mu(s') + \mathrm{clip}(\epsilon, -c, c), -1, 1)\big),
    \qquad \epsilon \sim \mathcal N(0, \sigma^2)

(target policy smoothing, clipped double Q; :math:`R, D` the transition's discounted reward
sum and bootstrap discount, :math:`\bar\cdot` the Polyak-averaged targets), and every
``policy_delay`` steps moves the actor up :math:`Q_{\theta_1}(s, \mu_\phi(s))`. It explores
with :math:`\mathrm{clip}(\mu(s) + \mathcal N(0, \sigma_{explore}^2), -1, 1)`.
DDPG is the same agent with one critic, no smoothing (:math:`\sigma = 0`) and no delay.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from evorl.config import parse_section
from evorl.config.agents import check_policy_delay
from evorl.config.hparams import check_td3
from evorl.engine.off_policy_workflow import OffPolicyWorkflow
from evorl.envs.spaces import Box, Space
from evorl.rl.continuous_control import (
    ContinuousNetworkFactory, ContinuousNetworkOptions, ContinuousQAgent, check_options, make_deterministic_actor,
    make_q_ensemble,
)
from evorl.rl.algorithm import OFF_POLICY, Algorithm
from evorl.rl.off_policy import UpdateGroup
from evorl.rl.q_targets import Transition, clipped_double_q_targets


@struct.dataclass
class TD3HParams:
    """TD3's hyperparameters, float32 data in the compiled program (``agent.<field>``;
    ``gamma`` is ``training.gamma``). Noise scales are in the ``[-1, 1]`` action cube."""

    #: The discount :math:`\gamma` (``training.gamma``).
    gamma: float
    #: Std of the Gaussian noise added to the actor's action when exploring.
    exploration_noise: float
    #: Std :math:`\sigma` of the target policy smoothing noise (0: none, as DDPG).
    target_noise: float
    #: The smoothing noise is clipped to ``[-c, c]``.
    target_noise_clip: float
    #: Polyak coefficient of a target update (``training.tau``; 1: a copy).
    tau: float = 0.005

    def validated(self) -> "TD3HParams":
        check_td3(self)
        return self


@struct.dataclass
class DDPGHParams(TD3HParams):
    """DDPG's hyperparameters: TD3's without target policy smoothing."""

    target_noise: float = 0.0
    target_noise_clip: float = 0.0


def smoothed_target_actions(target_actions: jax.Array, noise: jax.Array, noise_clip: jax.Array) -> jax.Array:
    r""":math:`\mathrm{clip}(\bar\mu(s') + \mathrm{clip}(\epsilon, -c, c), -1, 1)`; ``[N, d]``."""
    return jnp.clip(target_actions + jnp.clip(noise, -noise_clip, noise_clip), -1.0, 1.0)


@dataclass(frozen=True, eq=False)
class TD3Agent(ContinuousQAgent):
    """See the module docstring; ``policy_delay`` is static (the actor's update period)."""

    #: Gradient steps per actor update (TD3's delayed policy updates; the targets move with
    #: ``training.target_update_period``, usually the same).
    policy_delay: int = 2
    target_keys = ("actor", "critic")

    @property
    def update_groups(self) -> tuple[UpdateGroup, ...]:
        return (UpdateGroup("critic", self.critic_loss), UpdateGroup("actor", self.actor_loss, self.policy_delay))

    def actor_actions(self, agent_state, actor_params, obs):
        return self.actor.apply(actor_params, self.normalized_obs(agent_state, obs))

    def explore(self, agent_state, obs, keys):
        actions = self.actor_actions(agent_state, agent_state.params["actor"], obs)  # [B, *action_shape]
        noise = jax.vmap(lambda k: jax.random.normal(k, self.action_shape))(keys)  # [B, *action_shape]
        return jnp.clip(actions + agent_state.hparams.exploration_noise * noise, -1.0, 1.0)

    def critic_loss(self, agent_state, target_params: Any, batch: Transition, key: jax.Array):
        hp = agent_state.hparams
        next_actions = self.actor_actions(agent_state, target_params["actor"], batch.next_obs)  # [N, *action_shape]
        noise = hp.target_noise * jax.random.normal(key, next_actions.shape)
        next_actions = smoothed_target_actions(next_actions, noise, hp.target_noise_clip)
        q_next = self.q_values(agent_state, target_params["critic"], batch.next_obs, next_actions)  # [C, N(, n_agents)]
        targets = jax.lax.stop_gradient(clipped_double_q_targets(q_next, batch.reward, batch.discount))  # [N(, agents)]
        q = self.q_values(agent_state, agent_state.params["critic"], batch.obs, batch.action)  # [C, N(, n_agents)]
        loss = jnp.sum(jnp.mean(jnp.square(q - targets), axis=tuple(range(1, q.ndim))))  # summed over the critics
        return loss, jax.lax.stop_gradient({"critic_loss": loss, "q_mean": jnp.mean(q[0])})

    def policy_q(self, agent_state, batch: Transition, actions: jax.Array) -> jax.Array:
        r""":math:`Q_1(s, \mu_\phi(s))` ``[N]``, what the actor climbs, for its ``actions`` on ``batch.obs``."""
        return self.q_values(agent_state, agent_state.params["critic"], batch.obs, actions)[0]

    def actor_loss(self, agent_state, target_params: Any, batch: Transition, key: jax.Array):
        actions = self.actor_actions(agent_state, agent_state.params["actor"], batch.obs)  # [N, *action_shape]
        loss = -jnp.mean(self.policy_q(agent_state, batch, actions))
        return loss, jax.lax.stop_gradient({"actor_loss": loss})


def build_td3_agent(action_space: Space, obs_space: Box | None, hparams: TD3HParams, num_critics: int,
                    policy_delay: int, network_factory: ContinuousNetworkFactory | None, network_options: dict,
                    factory: str) -> TD3Agent:
    options = parse_section(ContinuousNetworkOptions, network_options, "agent")
    action_dim = check_options(action_space, obs_space, options, factory)
    check_policy_delay(policy_delay)
    if network_factory is None:
        actor = make_deterministic_actor(obs_space, action_dim, options.actor_hidden_layer_sizes, options.activation)
        critic = make_q_ensemble(obs_space, action_dim, options.critic_hidden_layer_sizes, options.activation,
                                 num_critics)
    else:
        actor, critic = network_factory(action_space, obs_space, options)
    return TD3Agent(action_space=action_space, obs_space=obs_space, actor=actor, critic=critic,
                    normalize_obs=options.normalize_obs, hparams_defaults=hparams.validated(),
                    policy_delay=policy_delay)


def make_mlp_td3_agent(action_space: Space, obs_space: Box | None = None, exploration_noise: float = 0.1,
                       target_noise: float = 0.2, target_noise_clip: float = 0.5, policy_delay: int = 2,
                       gamma: float = 0.99, tau: float = 0.005, network_factory: ContinuousNetworkFactory | None = None,
                       **network_options) -> TD3Agent:
    """A TD3 agent: twin critics, target policy smoothing, the actor updated every
    ``policy_delay`` gradient steps. ``network_options``: :class:`ContinuousNetworkOptions`."""
    hparams = TD3HParams(gamma, exploration_noise, target_noise, target_noise_clip, tau)
    return build_td3_agent(action_space, obs_space, hparams, 2, policy_delay, network_factory, network_options,
                           "make_mlp_td3_agent")


def make_mlp_ddpg_agent(action_space: Space, obs_space: Box | None = None, exploration_noise: float = 0.1,
                        gamma: float = 0.99, tau: float = 0.005, network_factory: ContinuousNetworkFactory | None = None,
                        **network_options) -> TD3Agent:
    """A DDPG agent: one critic, the actor updated every gradient step, no target smoothing."""
    hparams = DDPGHParams(gamma, exploration_noise, tau=tau)
    return build_td3_agent(action_space, obs_space, hparams, 1, 1, network_factory, network_options,
                           "make_mlp_ddpg_agent")


TD3 = Algorithm("TD3", make_mlp_td3_agent, TD3HParams, OFF_POLICY, training_hparams=("gamma", "tau"),
                agent_options_cls=ContinuousNetworkOptions)
#: TD3 without its twin critics, target smoothing and delay.
DDPG = dataclasses.replace(TD3, label="DDPG", agent_factory=make_mlp_ddpg_agent, hparams_cls=DDPGHParams)


class TD3Workflow(OffPolicyWorkflow):
    """TD3 (Fujimoto et al., 2018): a deterministic actor with twin critics (clipped double Q),
    target policy smoothing and delayed actor updates."""

    algorithm = TD3


class DDPGWorkflow(OffPolicyWorkflow):
    """DDPG (Lillicrap et al., 2016): a deterministic actor with one critic, the actor updated at
    every critic step (TD3 without its twin critics, smoothing and delay)."""

    algorithm = DDPG


__all__ = ["DDPG", "DDPGHParams", "DDPGWorkflow", "TD3", "TD3Agent", "TD3HParams", "TD3Workflow",
           "clipped_double_q_targets", "make_mlp_ddpg_agent", "make_mlp_td3_agent", "smoothed_target_actions"]
