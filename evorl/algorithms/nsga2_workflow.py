"""``NSGA2Workflow``: multi-objective evolution of policy parameters (``workflow_cls:
evorl.workflows.NSGA2Workflow`` with an ``nsga2:`` section, see
:class:`~evorl.config.nsga2.NSGA2Config`).

It runs on the ES engine: one generation (:func:`~evorl.algorithms.nsga2.make_generation`)
is one iteration of the :class:`~evorl.engine.execution.Executor`, and the host loop of
:class:`~evorl.engine.host_loop.ChunkedWorkflow` (health, greedy evaluation of the front
member with the largest sum of objectives, recorders, checkpoints of the whole population
and its objectives, exact resume) runs it unchanged. At every logging point (every
``training.eval_interval`` generations) the front, the objective vectors of the rank-0
members, goes to the services' ``front_recorder`` (``pareto_front.jsonl`` in the run folder, drawn as
``pareto.png`` at the end of the run).

The logged ``step`` counts each generation's env step budget, the episodes it plays
(``population_size x episodes_per_member``, twice that while ``rescore_survivors`` re-scores
the population) ``x env.episode_length``.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

import jax
import numpy as np

from evorl.algorithms.es import ES
from evorl.algorithms.es_workflow import ESWorkflow
from evorl.algorithms.nsga2 import NSGA2State, front_mask, init_nsga2_state, make_generation
from evorl.config.nsga2 import NSGA2Config, check_nsga2_env, check_nsga2_run
from evorl.engine.execution import Placement
from evorl.engine.health import TrainingDiverged
from evorl.engine.host_loop import ChunkedWorkflow
from evorl.engine.memory_estimate import Term
from evorl.engine.processes import is_main_process
from evorl.engine.rl_base import ExperimentConfig
from evorl.rl.algorithm import Family


@dataclass(frozen=True)
class NSGA2ExperimentConfig(ExperimentConfig):
    nsga2: NSGA2Config = NSGA2Config()


#: ES's agent with NSGA-II's generation and state (a population and its objective vectors).
NSGA2 = dataclasses.replace(ES, label="NSGA-II", family=Family(NSGA2State, init_nsga2_state, make_generation))


class NSGA2Workflow(ESWorkflow):
    """NSGA-II on the ES engine: the ES workflow's config handling, agent and evaluation,
    with the population and its objective vectors as the state
    (:class:`~evorl.algorithms.nsga2.NSGA2State`)."""

    algorithm = NSGA2
    section, section_cls, experiment_cls = "nsga2", NSGA2Config, NSGA2ExperimentConfig
    pareto_plot = True

    def __init__(self, config: NSGA2ExperimentConfig, env, agent, enable_multi_devices=False, services=None):
        self.placement = Placement.create(1, enable_multi_devices, "envs")  # children split, state replicated
        num_devices = 1 if self.placement.mesh is None else self.placement.mesh.size
        ChunkedWorkflow.__init__(self, config, env, agent, services)
        generation = self.algorithm.family.make_iteration
        step = generation(env, agent, config.nsga2, self.placement.step_axis_name, num_devices)
        self.build_generation_runner(step, env, agent, config.training.eval_episodes)
        self._front = jax.jit(lambda objectives: (objectives, front_mask(objectives)))

    @classmethod
    def section_list_keys(cls, data: dict) -> tuple[str, ...]:
        return ()  # its keys shape the program or are constants of it

    @classmethod
    def evolvable_keys(cls, config: NSGA2ExperimentConfig) -> tuple[str, ...]:
        return ()

    @classmethod
    def check_config(cls, config: NSGA2ExperimentConfig, agent, num_devices: int) -> None:
        check_nsga2_run(cls.__name__, config.pbt.enabled, config.training.num_seeds)
        super().check_config(config, agent, num_devices)

    @classmethod
    def check_env(cls, env, config: NSGA2ExperimentConfig) -> None:
        """The shared check, and the objectives are reward terms the env declares."""
        super().check_env(env, config)
        check_nsga2_env(config.nsga2, env.reward_terms, env.action_repeat, config.env.env_name)

    @property
    def env_steps_per_iteration(self) -> int:
        return self.config.nsga2.episodes_per_generation * self.env.episode_length

    @classmethod
    def build_agent(cls, env, config: NSGA2ExperimentConfig):
        return cls.agent_factory(env.action_space, env.obs_space, network_factory=cls.network_factory,
                                 **vars(config.agent))

    @classmethod
    def memory_terms(cls, config: NSGA2ExperimentConfig, sizes, num_devices: int, asynchronous: bool) -> list:
        nsga2, p = config.nsga2, sizes.num_params
        players = nsga2.episodes_per_generation
        return [
            Term("population", f"{nsga2.population_size:,} members x {p:,} params x 4 (parents, children, pool)",
                 4 * nsga2.population_size * p, "nsga2.population_size, agent.actor_hidden_layer_sizes"),
            Term("episodes", f"{players:,} episodes x ({sizes.obs_size:,} obs + {sizes.activation_width:,} units)",
                 players * (sizes.obs_size + sizes.activation_width),
                 "nsga2.population_size, nsga2.episodes_per_member, nsga2.rescore_survivors, "
                 "agent.actor_hidden_layer_sizes"),
        ]

    def check_health(self, per_agent_metrics: dict, iteration: int) -> None:
        try:
            ChunkedWorkflow.check_health(self, per_agent_metrics, iteration)
        except TrainingDiverged as e:
            raise e.with_hint("Try a smaller nsga2.sigma.") from None
        for warning in front_warnings(self.config.nsga2, per_agent_metrics, iteration):
            if warning.split(":", 1)[0] not in self._warned and is_main_process():
                self._warned = self._warned | {warning.split(":", 1)[0]}
                print(f"evorl: warning: {warning}", file=sys.stderr, flush=True)

    #: The warnings already printed (each once per run), by their first words.
    _warned: frozenset = frozenset()

    def init(self, key: jax.Array) -> NSGA2State:
        init_state = self.algorithm.family.init_state
        return self.executor.init(lambda k: init_state(self.agent, self.config.nsga2, k), key)

    # --- the front --------------------------------------------------------------------------
    def front(self, state: NSGA2State) -> np.ndarray:
        """The objective vectors of the rank-0 members ``[F, K]``, sorted by the first objective."""
        objectives, mask = (np.asarray(x) for x in self._front(state.objectives))
        front = objectives[mask]
        return front[np.argsort(front[:, 0], kind="stable")]

    def evaluate(self, state: NSGA2State) -> dict[str, float]:
        """The greedy evaluation, and the front written to the services' ``front_recorder`` (one record per
        logging point: ``iteration``, ``objectives`` (names), ``front`` ``[F, K]``)."""
        metrics = super().evaluate(state)
        front_recorder = self.services.front_recorder
        if front_recorder is not None and is_main_process():
            done = int(np.asarray(state.iteration))
            record = {"iteration": done, "objectives": list(self.config.nsga2.objectives),
                      "front": self.front(state).tolist()}
            front_recorder.write(record, done * self.env_steps_per_iteration)
        return metrics


def front_warnings(nsga2: NSGA2Config, metrics: dict, iteration: int) -> list[str]:
    """What a chunk's metrics show to be wrong without stopping the run: children whose
    objectives are not finite (they rank last), and a hypervolume of 0 from a front
    none of whose points dominates ``nsga2.reference_point``."""
    value = lambda key: float(np.max(np.asarray(metrics.get(f"train/{key}", np.nan))))  # noqa: E731
    out = []
    bad = value("nonfinite_children")
    if bad > 0:
        out.append(f"non-finite objectives: up to {bad:.0f} of {nsga2.population_size} children a generation had "
                   f"non-finite returns by iteration {iteration} (a diverged policy: they rank last and are "
                   f"dropped; train/episode_return is NaN while any is). Try a smaller nsga2.sigma or a bounded "
                   f"activation (agent.activation=tanh).")
    best = {name: value(f"best_{name}") for name in nsga2.objectives}
    if value("hypervolume") == 0 and value("front_size") > 0 and all(np.isfinite(list(best.values()))):
        front = ", ".join(f"{name}={v:.4g}" for name, v in best.items())
        out.append(f"nsga2.reference_point={list(nsga2.reference_point)}: no point of the front dominates it by "
                   f"iteration {iteration} (the front's best: {front}), so the hypervolume stays 0; set each "
                   f"value below the returns that count.")
    return out
