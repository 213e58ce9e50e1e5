"""``OffPolicyWorkflow``: DQN, DDPG, TD3 and SAC on the shared host loop and execution layer.

The iteration it runs (collect, n-step transitions into the replay buffer in the state,
gradient steps of the agent's update groups) is :mod:`evorl.rl.off_policy`; this module holds
the workflow: its ``training:`` section and checks, the runner it builds (fused, or the
actor-learner acting with the behaviour policy), the warm-up program's length
(:func:`iterations_before_learning`) and the memory estimate.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np

from evorl.config import (
    TrainingConfig, config_mapping, num_agents, section_data,
)
from evorl.config.env import HOST_ENV_TYPES
from evorl.config.runs import check_off_policy_placement, check_off_policy_run
from evorl.config.training import OffPolicyTrainingConfig, check_training_keys
from evorl.engine.actor_learner import ActorPolicy, check_async_config, learner_placement
from evorl.engine.execution import Placement, to_host
from evorl.engine.host_loop import ChunkedWorkflow
from evorl.engine.memory_estimate import Term, transition_words
from evorl.engine.pbt import check_pbt_config
from evorl.engine.rl_base import ExperimentConfig
from evorl.rl.agent import Agent
from evorl.rl.behaviour import BehaviourPolicy, acting_state
from evorl.rl.off_policy import OffPolicyState
from evorl.rl.learner import make_optimizer
from evorl.rl.state_roles import buffer_field


def iterations_before_learning(tc: OffPolicyTrainingConfig, state: OffPolicyState) -> int:
    """How many of the iterations after ``state`` cannot learn: those whose rollout leaves
    fewer than ``learning_starts`` transitions in the buffer of every agent (``state.buffer.size``,
    ``[N]`` for a population, read on the host). Each iteration adds ``num_envs x rollout_length``
    (fewer once the buffer is full: the count is then at most the true one)."""
    size = int(np.max(to_host(state.buffer.size)))
    if size >= tc.learning_starts:
        return 0
    added = tc.num_envs * tc.rollout_length
    return -(-(tc.learning_starts - size) // added) - 1  # the first learning iteration's index


#: ``training:`` keys of the on-policy workflows that an off-policy run does not read.
ON_POLICY_ONLY = tuple(f.name for f in dataclasses.fields(TrainingConfig)
                       if f.name not in OffPolicyTrainingConfig.__dataclass_fields__)


class OffPolicyWorkflow(ChunkedWorkflow):
    """Off-policy training from a replay buffer (see the module docstring) on the shared host
    loop: ``learn``, greedy evaluation, health checks, populations and checkpoints are
    :class:`~evorl.engine.host_loop.ChunkedWorkflow`'s. A subclass declares its algorithm, a
    record of the off-policy family (:data:`evorl.rl.algorithm.OFF_POLICY`: ``training.gamma``
    and ``training.tau`` are data in the agent's hyperparameters), as an on-policy one does."""

    training_config_cls = OffPolicyTrainingConfig
    replay_buffer_field = buffer_field(OffPolicyState)
    #: The fused runner's iterations before the learning start run as a program of their own
    #: (:func:`iterations_before_learning`); False: every iteration runs the full one.
    warmup_program = True

    def config_notes(self) -> list[str]:
        return self.config.training.run_length_notes("training")

    def __init__(self, config: ExperimentConfig, env, agent, enable_multi_devices=False, services=None):
        tc = config.training
        eval_env, env = self.runner_and_envs(config, env)
        self.placement = Placement(self.num_agents, None) if self.asynchronous else \
            Placement.create(self.num_agents, enable_multi_devices, config.distributed.layout)
        super().__init__(config, env, agent, services)
        self.optimizer = make_optimizer(tc)
        self._variant_data = self.variant_data(config)
        # actors act with the behaviour policy; the learner runs the fused iteration's update. A
        # PBT-replaced agent takes its source's networks, Adam states and targets, keeps its buffer
        # a population's learning start and delayed updates branch once for all its agents
        population_axis, family = self.placement.population_axis_name, self.algorithm.family
        self.build_runner(config, env, eval_env, agent,
                          functools.partial(family.make_iteration, population_axis=population_axis),
                          functools.partial(family.make_learner_update, population_axis=population_axis),
                          family.state_cls,
                          actor_devices=learner_placement(False, None)[1] if self.asynchronous else None,
                          acting=ActorPolicy(BehaviourPolicy(agent, tc.warmup_steps),
                                             functools.partial(acting_state, tc=tc)),
                          warmup_iterations=functools.partial(iterations_before_learning, tc)
                          if self.warmup_program else None)

    def init(self, key: jax.Array) -> OffPolicyState:
        """The initial state; for a population, agent ``v * num_seeds + s`` trains variant
        ``v`` with the ``s``-th key split from ``key`` (as the on-policy workflow's)."""
        init_state = self.algorithm.family.init_state
        return self.init_agents(
            functools.partial(init_state, self.env, self.agent, self.optimizer, self.config.training), key)

    # --- config ---------------------------------------------------------------------------
    @classmethod
    def parse_config(cls, cfg: Any) -> ExperimentConfig:
        """The shared validation (:meth:`RLWorkflow.parse_config`) with this workflow's own
        ``training:`` section, :class:`OffPolicyTrainingConfig`."""
        cfg = config_mapping(cfg)
        training = section_data(cfg.get("training", {}), "training")
        check_training_keys(training, cls.name(), list(OffPolicyTrainingConfig.__dataclass_fields__),
                            on_policy_only=ON_POLICY_ONLY)
        base = vars(super().parse_config(cfg))  # sweeps of learning_rate, gamma, tau
        asynchronous = base["runner"].asynchronous(env_on_host=base["env"].env_type in HOST_ENV_TYPES)
        check_off_policy_run(cls.name(), asynchronous, base["distributed"])
        return ExperimentConfig(**base)

    @classmethod
    def check_config(cls, config: ExperimentConfig, agent: Agent, num_devices: int) -> None:
        tc, layout = config.training, config.distributed.layout
        asynchronous = config.runner.asynchronous(config.env.env_type in HOST_ENV_TYPES)
        agents = num_agents(config)
        check_off_policy_placement(num_devices, layout, agents, tc.num_envs)
        if config.pbt.enabled:
            check_pbt_config(config, cls, agents, asynchronous, split_envs=num_devices > 1 and layout == "envs")
        if asynchronous:
            check_async_config(config, agent, num_devices=1)

    @classmethod
    def memory_terms(cls, config: ExperimentConfig, sizes: Any, num_devices: int, asynchronous: bool) -> list:
        return memory_terms(config, sizes)


def memory_terms(config: ExperimentConfig, sizes) -> list[Term]:
    """The large contributors of an off-policy run: parameters (with target, gradient and
    Adam's moments) and the replay buffer, per agent."""
    tc = config.training
    agents = num_agents(config)
    per_transition = transition_words(sizes)
    return [
        Term("parameters", f"{agents} agent(s) x {sizes.num_params:,} x 5 copies (weights, target, gradient, "
                           f"Adam's 2 moments)", agents * sizes.num_params * 5,
             "agent hidden layer sizes, training.num_seeds"),
        Term("replay buffer", f"{agents} agent(s) x {tc.buffer_size:,} transitions x {per_transition:g} floats",
             agents * tc.buffer_size * per_transition, "training.buffer_size, training.num_seeds"),
    ]
