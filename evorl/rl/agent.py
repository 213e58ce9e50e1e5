"""Agents: networks, hyperparameters and a loss, separate from the training loop.

An :class:`Agent` is static Python (network structure, flags); everything numeric lives
in its :class:`AgentState` pytree: parameters, observation statistics and the loss
hyperparameters (``hparams``), which are arrays so that they can be vmapped and swept.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from evorl.rl.rollout import Trajectory
from evorl.rl.running_statistics import (
    RunningStatistics, init_running_statistics, normalize, update_running_statistics,
)


@struct.dataclass
class AgentState:
    params: dict[str, Any]  # e.g. {"policy": ..., "value": ...}
    obs_stats: RunningStatistics | None  # running observation statistics, or None
    hparams: Any  # the loss hyperparameters as float32 arrays


def hparams_as_arrays(hparams: Any) -> Any:
    """Every leaf as a float32 array (None stays None), so jit never specialises on values."""
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), hparams)


class Agent(ABC):
    """What the workflows need from an algorithm's agent to act: initial state, actions,
    observation statistics. How it learns is the workflow's contract: an on-policy agent adds
    ``loss(agent_state, batch [T, B], key) -> (scalar, metrics)``
    (:class:`~evorl.rl.actor_critic.ActorCriticAgent`), an off-policy one its ``update_groups`` and ``target_keys``
    (:mod:`evorl.rl.off_policy`); an ES agent has neither."""

    #: Minibatches are whole sequences ``[T, b]`` (split along envs) instead of shuffled
    #: single transitions; needed when the loss recomputes targets along time (V-trace).
    sequence_minibatches: bool = False
    #: The agent may end an iteration's updates early: the workflow then calls
    #: :meth:`stop_updates` after every minibatch step.
    stops_early: bool = False
    #: The policy carries a state from step to step (a recurrent core): the rollout keeps one
    #: per environment, resets it where an episode starts and stores the state each step
    #: acted with in the trajectory (``extras["policy_state"]``), from which the loss unrolls.
    recurrent: bool = False
    #: Declared capability: the agents that act together in each env step (a multi-agent
    #: env's, :mod:`evorl.envs.multi_agent`). ``obs_space`` is then one env step's stacked
    #: observations ``[n_agents, ...]``, ``action_space`` one agent's; actions and the
    #: per-agent scalars (rewards, values, log-probs) carry an axis of this size, and the
    #: networks run once per agent on each sample (:mod:`evorl.engine.memory_estimate`).
    num_agents: int = 1

    @abstractmethod
    def init(self, key: jax.Array) -> AgentState: ...

    def initial_policy_state(self, num_envs: int) -> Any:
        """The policy state of ``num_envs`` environments at the start of an episode (leaves
        ``[B, ...]``); None for a feed-forward policy."""
        return None

    def policy_step(self, agent_state: AgentState, policy_state: Any, obs: jax.Array, keys: jax.Array | None,
                    greedy: bool = False) -> tuple[jax.Array, dict, Any]:
        """Acts on observations ``obs [B, ...]`` with ``policy_state`` (already reset where an
        episode starts): ``(actions [B, ...], extras, next policy_state)``, sampled with the
        per-environment ``keys [B]``, or ``greedy``. A feed-forward policy samples with
        :meth:`compute_actions` per environment (or acts with :meth:`evaluate_actions`); its
        state stays None."""
        if greedy:
            return self.evaluate_actions(agent_state, obs), {}, policy_state
        actions, extras = jax.vmap(self.compute_actions, in_axes=(None, 0, 0))(agent_state, obs, keys)
        return actions, extras, policy_state

    def default_hparams(self) -> Any:
        """The loss hyperparameters ``init`` puts into ``AgentState.hparams``."""
        return None

    @abstractmethod
    def compute_actions(self, agent_state: AgentState, obs: jax.Array, key: jax.Array):
        """Samples actions ``[B, ...]``; returns ``(actions, extras)`` kept in the trajectory."""

    @abstractmethod
    def evaluate_actions(self, agent_state: AgentState, obs: jax.Array) -> jax.Array:
        """Greedy actions ``[B, ...]`` in the policy's own space."""

    def to_env_action(self, actions: jax.Array) -> jax.Array:
        return actions

    # --- observation normalisation ------------------------------------------------------
    #: Keep running statistics of the observations (``AgentState.obs_stats``) and feed the
    #: networks the normalised observations (:func:`~evorl.rl.running_statistics.normalize`).
    normalize_obs: bool = False

    def init_obs_statistics(self) -> RunningStatistics | None:
        """Empty statistics of one observation ``obs_space.shape`` with ``normalize_obs``, else None."""
        return init_running_statistics(self.obs_space.shape) if self.normalize_obs else None

    def normalized_obs(self, agent_state: AgentState, obs: jax.Array) -> jax.Array:
        """``obs`` normalised by ``agent_state.obs_stats``; as it is without statistics."""
        return obs if agent_state.obs_stats is None else normalize(agent_state.obs_stats, obs)

    def update_obs_statistics(self, agent_state: AgentState, obs: jax.Array, axis_name: str | None = None
                              ) -> AgentState:
        """``agent_state`` with the observations ``obs [..., *obs_shape]`` (every device's with
        ``axis_name``) merged into its statistics; unchanged without statistics."""
        if agent_state.obs_stats is None:
            return agent_state
        return agent_state.replace(obs_stats=update_running_statistics(agent_state.obs_stats, obs, axis_name))

    def compute_targets(self, agent_state: AgentState, trajectory: Trajectory) -> Trajectory:
        """Adds what the loss needs (advantages, value targets) to ``trajectory.extras``."""
        return trajectory

    def stop_updates(self, agent_state: AgentState, metrics: dict) -> jax.Array:
        """For an agent that declares ``stops_early``: a boolean, true to skip the rest of this
        iteration's updates, from the metrics of the minibatch step just computed."""
        raise NotImplementedError(f"{type(self).__name__} does not declare stops_early")

    def with_axis_name(self, axis_name: str | None) -> "Agent":
        """This agent with batch statistics in its loss reduced over the device axis
        ``axis_name`` (the workflow calls it when it runs data-parallel)."""
        return dataclasses.replace(self, axis_name=axis_name)
