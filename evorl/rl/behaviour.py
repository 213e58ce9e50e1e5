"""An off-policy agent's behaviour policy as the rollouts act with it, in the fused iteration
and in the actor-learner's actors alike (:mod:`evorl.rl.off_policy`): a static policy
object over an :class:`ActingState` (the agent and the env steps its learner has received),
so that what the actors need from the learner is declared in one small pytree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
from flax import struct

from evorl.rl.agent import Agent, AgentState


@struct.dataclass
class ActingState:
    """What the behaviour policy acts with: the agent and the env steps its learner has
    received (the warm-up and DQN's epsilon schedule count them)."""

    agent_state: AgentState
    env_steps: jax.Array  # [] int32


@dataclass(frozen=True, eq=False)
class BehaviourPolicy:
    """The agent's behaviour policy as a rollout acts with it, on an :class:`ActingState`:
    ``agent.behaviour`` (exploration noise, SAC's sampled actions, epsilon-greedy), uniformly
    random while ``env_steps < warmup_steps``. Feed-forward; no extras."""

    agent: Agent
    warmup_steps: int
    recurrent = False

    def behaviour(self, acting: ActingState):
        return self.agent.behaviour(acting.agent_state, acting.env_steps,
                                    random_actions=acting.env_steps < self.warmup_steps)

    def initial_policy_state(self, num_envs: int) -> None:
        return None

    def policy_step(self, acting: ActingState, policy_state, obs, keys, greedy=False):
        return self.behaviour(acting).policy_step(acting.agent_state, policy_state, obs, keys, greedy)

    def to_env_action(self, actions):
        return self.agent.to_env_action(actions)


def acting_state(state: Any, tc: Any) -> ActingState:
    """The behaviour policy's input after ``state.iteration`` iterations (learner updates), each
    of ``num_envs x rollout_length`` env steps."""
    return ActingState(state.agent_state, state.iteration * tc.env_steps_per_iteration)
