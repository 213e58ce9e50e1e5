"""An algorithm as a record: what makes it, declared once in its file, read by the workflow that runs it.

An :class:`Algorithm` names the agent (its factory, its loss hyperparameters and the config
keys that feed them) and its :class:`Family`, the state layout and the iteration it trains
with, shared by the on-policy algorithms (:data:`ON_POLICY`) and by the off-policy ones
(:data:`OFF_POLICY`); ES, NSGA-II, CEM-RL and ERL each have their own. A workflow class
(``class PPOWorkflow(OnPolicyWorkflow): algorithm = PPO``) is the record's public face: it
runs the record's family and parses the ``agent:`` section the record derives from its factory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from evorl.config import dataclass_from_signature
from evorl.rl import off_policy, on_policy
from evorl.rl.actor_critic import ActorCriticOptions
from evorl.rl.agent import Agent


@dataclass(frozen=True, eq=False)
class Family:
    """The state layout and the iteration a family of algorithms trains with. Their call
    signatures are the family's workflow's (:class:`~evorl.engine.on_policy_workflow.OnPolicyWorkflow`
    calls ``make_iteration(env, agent, optimizer, training, axis_name)``)."""

    #: The training state's dataclass; its fields' roles (:mod:`evorl.rl.state_roles`) say which
    #: hold env state and which the replay buffer.
    state_cls: type
    #: Builds the initial state of one agent.
    init_state: Callable[..., Any]
    #: Builds the pure iteration ``iteration(state) -> (state, metrics)``.
    make_iteration: Callable[..., Any]
    #: Builds the actor-learner's learner update; None: the family runs fused only.
    make_learner_update: Callable[..., Any] | None = None


#: PPO, A2C, IMPALA, REINFORCE, IPPO, MAPPO: :mod:`evorl.rl.on_policy`.
ON_POLICY = Family(on_policy.OnPolicyState, on_policy.init_state, on_policy.make_iteration,
                   on_policy.make_learner_update)
#: DQN, DDPG, TD3, SAC, MATD3, MADDPG: :mod:`evorl.rl.off_policy`.
OFF_POLICY = Family(off_policy.OffPolicyState, off_policy.init_state, off_policy.make_iteration,
                    off_policy.make_learner_update)


@dataclass(frozen=True, eq=False)
class Algorithm:
    """One algorithm: its agent and the keys that configure it, and its :class:`Family`.
    ``dataclasses.replace`` makes a variant (MAPPO is IPPO's with another ``agent:`` section)."""

    #: Short name in logs and errors (``"PPO"``).
    label: str
    #: ``agent_factory(action_space, obs_space, network_factory=..., **hparams from training,
    #: **agent keys)``, e.g. ``make_mlp_ppo_agent``.
    agent_factory: Callable[..., Agent]
    #: The loss hyperparameters' dataclass (data in ``agent_state.hparams``, whose fields are the
    #: keys a population may vary); None: the algorithm has no loss (ES).
    hparams_cls: type | None
    family: Family
    #: Training keys that are loss hyperparameters, each a field of ``hparams_cls`` under the
    #: same name (off-policy: ``("gamma", "tau")``).
    training_hparams: tuple[str, ...] = ("gamma", "gae_lambda")
    #: Training keys whose default differs for this algorithm (applied when the config does not
    #: set them), e.g. A2C's one gradient step per rollout.
    training_defaults: Mapping[str, Any] = field(default_factory=dict)
    #: The keys the factory takes as ``**network_options``.
    agent_options_cls: type = ActorCriticOptions
    #: Factory keywords the algorithm's own config section sets (ERL's ``erl.tau``): not ``agent:`` keys.
    section_hparams: tuple[str, ...] = ()
    #: The ``agent:`` config section when it is not the factory's keywords (ES's: its policy's
    #: options); None: derived from them.
    agent_section: type | None = None
    #: The ``agent:`` config section: ``agent_section``, or the factory's keyword parameters after
    #: the keys of ``agent_options_cls`` (less the training and section keys).
    agent_config_cls: type = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "training_defaults", MappingProxyType(dict(self.training_defaults)))
        name = re.sub(r"\W", "", self.label) + "AgentConfig"  # "CEM-RL": CEMRLAgentConfig
        object.__setattr__(self, "agent_config_cls", self.agent_section or dataclass_from_signature(
            name, self.agent_factory, include=self.agent_options_cls,
            exclude=("action_space", "obs_space", "network_factory", *self.training_hparams, *self.section_hparams)))
