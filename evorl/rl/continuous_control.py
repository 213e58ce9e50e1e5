r"""What the off-policy actor-critics for continuous actions (DDPG, TD3, SAC) share.

Actions live in the cube ``[-1, 1]^d``: the actor's output, the replay buffer's actions and
the critics' inputs are all in it; the environment receives the affine image
``low + (a + 1) / 2 * (high - low)`` of its ``Box`` (:meth:`ContinuousQAgent.to_env_action`).

* :func:`make_q_ensemble` builds ``num_critics`` independent critics
  :math:`Q_i(s, a)`, one MLP each over the concatenated observation and action, stacked on a
  leading axis: ``apply(params, obs [..., *obs_shape], action [..., d]) -> [num_critics, ...]``.
* :func:`make_deterministic_actor` builds :math:`\mu(s) = \tanh(\mathrm{MLP}(s))`.
* :class:`ContinuousQAgent` is the base of the agents: observation normalisation, the
  critics, greedy evaluation and the training behaviour (:class:`ExploringActor`: the
  algorithm's exploration, uniformly random actions during the warm-up).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from evorl.config.agents import check_continuous_options, check_obs_space_given
from evorl.envs.spaces import Box, Space
from evorl.networks import MLP, Network, get_activation
from evorl.rl.agent import Agent, AgentState, hparams_as_arrays


@dataclass(frozen=True)
class ContinuousNetworkOptions:
    """The network keywords of ``make_mlp_td3_agent`` / ``make_mlp_sac_agent`` (``agent:`` keys)."""

    #: Hidden layer widths of the actor.
    actor_hidden_layer_sizes: tuple[int, ...] = (256, 256)
    #: Hidden layer widths of each critic ``Q(s, a)``.
    critic_hidden_layer_sizes: tuple[int, ...] = (256, 256)
    #: Hidden layer activation (``relu``, ``tanh``, ...).
    activation: str = "relu"
    #: Normalise observations by their running mean and std (updated every iteration from the
    #: rollout; the buffer keeps raw observations).
    normalize_obs: bool = False


def check_options(action_space: Space, obs_space: Box | None, options: ContinuousNetworkOptions, factory: str) -> int:
    """Refuses what the networks cannot serve, in one line each; returns the action dimension."""
    check_obs_space_given(obs_space, factory)
    is_box = isinstance(action_space, Box)
    check_continuous_options(options, is_box, is_box and action_space.is_bounded, action_space, factory)
    get_activation(options.activation)
    return int(action_space.low.size)


class _Critic(nn.Module):
    hidden_layer_sizes: tuple[int, ...]
    activation: str
    obs_ndim: int

    @nn.compact
    def __call__(self, obs, action):
        obs = jnp.asarray(obs, jnp.float32)
        obs = obs.reshape(obs.shape[: obs.ndim - self.obs_ndim] + (-1,))  # [..., obs_dim]
        return MLP(self.hidden_layer_sizes, 1, self.activation)(jnp.concatenate([obs, action], axis=-1))[..., 0]


def make_q_ensemble(obs_space: Box, action_dim: int, hidden_layer_sizes, activation: str, num_critics: int) -> Network:
    """``num_critics`` independent critics ``Q_i(s, a)`` (each its own initialisation):
    ``apply(params, obs [..., *obs_shape], action [..., d]) -> [num_critics, ...]``."""
    module = _Critic(tuple(int(s) for s in hidden_layer_sizes), activation, len(obs_space.shape))
    obs = jnp.zeros((1,) + obs_space.shape, jnp.float32)
    action = jnp.zeros((1, action_dim), jnp.float32)
    return Network(
        init=lambda key: jax.vmap(module.init, in_axes=(0, None, None))(jax.random.split(key, num_critics), obs, action),
        apply=jax.vmap(module.apply, in_axes=(0, None, None)),
    )


def make_deterministic_actor(obs_space: Box, action_dim: int, hidden_layer_sizes, activation: str) -> Network:
    r""":math:`\mu(s) = \tanh(\mathrm{MLP}(s)) \in [-1, 1]^d`: ``apply(params, obs) -> [..., d]``."""
    module = MLP(tuple(int(s) for s in hidden_layer_sizes), action_dim, activation, head_scale=0.01,
                 obs_ndim=len(obs_space.shape))
    obs = jnp.zeros((1,) + obs_space.shape, jnp.float32)
    return Network(init=lambda key: module.init(key, obs), apply=lambda params, o: jnp.tanh(module.apply(params, o)))


@dataclass(frozen=True)
class ExploringActor:
    """The behaviour policy of a continuous off-policy agent: ``agent.explore`` (TD3's noisy
    actor, SAC's sampled policy), or uniformly random actions in ``[-1, 1]^d`` while
    ``random_actions`` (the warm-up). The rollout acts with it as with an agent."""

    agent: "ContinuousQAgent"
    random_actions: jax.Array  # [] bool
    recurrent = False

    @property
    def metrics(self) -> dict:
        return {"random_actions": self.random_actions.astype(jnp.float32)}

    def initial_policy_state(self, num_envs: int) -> None:
        return None

    def policy_step(self, agent_state, policy_state, obs, keys, greedy=False):
        if greedy:
            return self.agent.evaluate_actions(agent_state, obs), {}, policy_state
        explore_keys, random_keys = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)  # [B] each
        shape = self.agent.action_shape
        uniform = jax.vmap(lambda k: jax.random.uniform(k, shape, minval=-1.0, maxval=1.0))(random_keys)  # [B, *shape]
        actions = jnp.where(self.random_actions, uniform, self.agent.explore(agent_state, obs, explore_keys))
        return actions, {}, policy_state

    def to_env_action(self, actions):
        return self.agent.to_env_action(actions)


@dataclass(frozen=True, eq=False)
class ContinuousQAgent(Agent):
    """An actor and an ensemble of critics over a bounded ``Box`` action space. Subclasses give
    :meth:`actor_actions` (greedy), :meth:`explore` and the losses (``update_groups``)."""

    action_space: Box
    obs_space: Box
    actor: Network
    critic: Network
    normalize_obs: bool = False
    hparams_defaults: Any = None

    @property
    def action_dim(self) -> int:
        return int(self.action_space.low.size)

    @property
    def action_shape(self) -> tuple[int, ...]:
        """One env's actions in the cube: ``(d,)``; a multi-agent agent's ``(n_agents, d)``."""
        return (self.action_dim,)

    def init(self, key: jax.Array) -> AgentState:
        actor_key, critic_key = jax.random.split(key)
        params = {"actor": self.actor.init(actor_key), "critic": self.critic.init(critic_key), **self.extra_params()}
        return AgentState(params=params, obs_stats=self.init_obs_statistics(),
                          hparams=hparams_as_arrays(self.hparams_defaults))

    def extra_params(self) -> dict:
        """Trained parameters beside the actor and the critics (SAC's temperature)."""
        return {}

    def default_hparams(self):
        return self.hparams_defaults

    def q_values(self, agent_state: AgentState, critic_params: Any, obs: jax.Array, action: jax.Array) -> jax.Array:
        """The critics ``[num_critics, ...]`` with ``critic_params`` (online or target)."""
        return self.critic.apply(critic_params, self.normalized_obs(agent_state, obs), action)

    def evaluate_actions(self, agent_state, obs):
        return self.actor_actions(agent_state, agent_state.params["actor"], obs)

    def actor_actions(self, agent_state: AgentState, actor_params: Any, obs: jax.Array) -> jax.Array:
        """The greedy actions ``[..., d]`` in ``[-1, 1]`` of the actor with ``actor_params``."""
        raise NotImplementedError

    def explore(self, agent_state: AgentState, obs: jax.Array, keys: jax.Array) -> jax.Array:
        """Training actions ``[B, *action_shape]`` in ``[-1, 1]`` for ``obs [B, ...]``, one key per env."""
        raise NotImplementedError

    def compute_actions(self, agent_state, obs, key):
        return self.explore(agent_state, obs[None], key[None])[0], {}

    def behaviour(self, agent_state: AgentState, env_steps: jax.Array, random_actions: jax.Array) -> ExploringActor:
        return ExploringActor(self, random_actions)

    def to_env_action(self, actions):
        low, high = self.action_space.low.reshape(-1), self.action_space.high.reshape(-1)
        env_actions = low + (jnp.clip(actions, -1.0, 1.0) + 1.0) / 2.0 * (high - low)
        return env_actions.reshape(env_actions.shape[:-1] + self.action_space.shape)


#: ``network_factory(action_space, obs_space, options) -> (actor, critic)`` for a custom pair.
ContinuousNetworkFactory = Callable[[Box, Box, ContinuousNetworkOptions], tuple[Network, Network]]
