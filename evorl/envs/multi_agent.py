"""The multi-agent env protocol: ``n_agents`` agents acting together in each of ``B`` copies.

A :class:`MultiAgentVectorEnv` is a :class:`~evorl.envs.vec_env.VectorEnv` whose copies hold
several agents of one shape (homogeneous agents); everything else (per-env keys, auto-reset,
the time limit reported as ``truncated``, the true final observation, action repeat, reward
scale) is the single-agent VectorEnv's, unchanged. Per copy of the environment:

* observations stacked on an agent axis: ``obs [B, n_agents, obs_dim]``;
* actions ``[B, n_agents]`` (discrete) or ``[B, n_agents, action_dim]``, each agent's in
  ``action_space`` (one agent's space);
* rewards per agent ``reward [B, n_agents]``;
* one ``terminated`` / ``truncated`` ``[B]`` the agents share (an episode ends for all);
* ``episode_return [B]``: the team return, the agents' mean reward summed over the episode
  (what JaxMARL's baselines log: their per-agent returns averaged over agents);
* the global state a centralised critic reads, :meth:`MultiAgentVectorEnv.global_state`:
  the concatenation of all agents' observations (JaxMARL's MAPPO ``world_state`` for MPE).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from evorl.config import ConfigError
from evorl.envs.spaces import Box, Space
from evorl.envs.vec_env import VectorEnv


class MultiAgentVectorEnv(VectorEnv):
    """``num_envs`` copies of an environment of ``num_agents`` homogeneous agents (see the
    module docstring). ``obs_space`` is the stacked ``Box [n_agents, obs_dim]``,
    ``agent_obs_space`` one agent's ``Box [obs_dim]``, ``action_space`` one agent's."""

    num_agents: int
    agent_obs_space: Box
    action_space: Space

    def _set_agent_spaces(self, num_agents: int, agent_obs_space: Box, action_space: Space) -> None:
        self.num_agents = int(num_agents)
        self.reward_shape = (self.num_agents,)
        self.agent_obs_space = agent_obs_space
        self.action_space = action_space
        self.obs_space = Box(np.broadcast_to(agent_obs_space.low, (self.num_agents,) + agent_obs_space.shape),
                             np.broadcast_to(agent_obs_space.high, (self.num_agents,) + agent_obs_space.shape))

    def episode_reward(self, reward: jax.Array) -> jax.Array:
        """The team's reward of one step: the mean over agents of ``reward [n_agents]``."""
        return jnp.mean(reward, axis=-1)

    @staticmethod
    def global_state(obs: jax.Array) -> jax.Array:
        """The global state ``[..., n_agents * obs_dim]`` of observations ``[..., n_agents,
        obs_dim]``: all agents' observations concatenated, agent 0 first."""
        return obs.reshape(obs.shape[:-2] + (obs.shape[-2] * obs.shape[-1],))


def is_multi_agent(env) -> bool:
    """Whether ``env`` follows the multi-agent protocol (:class:`MultiAgentVectorEnv`)."""
    return isinstance(env, MultiAgentVectorEnv)


def homogeneous(name: str, agents: list[str], spaces: list, what: str):
    """The one space ``spaces`` (one per agent) all are; a ConfigError naming the agents whose
    ``what`` space differs otherwise (agents are stacked on one axis)."""
    first = spaces[0]
    odd = [a for a, s in zip(agents, spaces) if repr(s) != repr(first)]
    if odd:
        raise ConfigError(f"{name}: the agents' {what} spaces differ ({agents[0]}: {first!r}; "
                          f"{', '.join(odd)} differ); evorl stacks agents on one axis and takes homogeneous agents only.")
    return first
