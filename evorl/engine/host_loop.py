"""The host loop every workflow shares (:class:`ChunkedWorkflow`, on ``RLWorkflow``).

``learn`` runs compiled chunks of ``training.eval_interval`` iterations through the workflow's
runner (the fused :class:`evorl.engine.execution.Executor`, or the actor-learner), checks
that every agent is still finite (:mod:`evorl.engine.health`; a population's diverged agent
is frozen, and training stops only when all are), evaluates greedily, logs and checkpoints;
asked to stop (the services' ``stop`` request), it checkpoints and raises :class:`TrainingInterrupted`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import sys
import time
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from evorl.config import num_agents, sweep_variants
from evorl.config.runs import check_host_env_runner, check_train_episode_length
from evorl.engine.actor_learner import ActorLearnerExecutor
from evorl.engine.actors import ActorLearnerError, EvaluationFailed
from evorl.engine.evaluator import HostEnvFault, each_agent, make_evaluator
from evorl.engine.execution import DEVICE_AXIS, Executor, Warmup, to_host
from evorl.engine.health import (
    TrainingDiverged, all_frozen_problems, check_environment, check_finite, freeze_diverged,
    frozen_message, nonfinite_metrics, replaced_message, tree_all_finite,
)
from evorl.engine.last_finite import LastFinite
from evorl.engine.lineage import lineage_record
from evorl.engine.pbt import PBT, HyperparameterStore, evolving_hyperparameters
from evorl.engine.population import aggregate_metrics, apply_variant, population_inputs, variant_label
from evorl.engine.processes import is_main_process, resume_argument
from evorl.engine.rl_base import RLWorkflow
from evorl.rl import metrics as M
from evorl.rl.state_roles import env_axes


class TrainingState(Protocol):
    """What the host loop reads of any runner's state (on-policy, off-policy, ES, CEM-RL, ERL):
    the iterations done, the PRNG key (the evaluation's key is folded from it) and the agent
    (``params``, ``obs_stats``), each leading with ``[N]`` for a population."""

    key: jax.Array
    agent_state: Any
    iteration: jax.Array

    def replace(self, **changes: Any) -> Any: ...


#: The state of the workflow's runner, handed back as it came (checked against :class:`TrainingState`).
State = TypeVar("State", bound=TrainingState)

#: Logged metrics that are NaN when there is nothing to measure (no episode ended in the
#: chunk); every other training metric must be finite.
EPISODE_METRICS = ("train/episode_return", "train/episode_length")
#: Env steps whose reward or observation was not finite for a finite action (see EpisodeStats).
ENV_FAULTS = "train/env_faults"


class ChunkedWorkflow(RLWorkflow, Generic[State]):
    """The host loop every population-and-chunks workflow shares: ``learn`` runs compiled
    chunks of ``training.eval_interval`` iterations through ``self.executor``, then checks
    health, evaluates greedily, logs and checkpoints (see the module docstring).

    A subclass's ``__init__`` sets what the loop runs (an RL workflow with
    :meth:`runner_and_envs` and :meth:`build_runner`, one whose iteration is a compiled
    generation with :meth:`build_generation_runner`): ``variants``, ``num_agents``,
    ``asynchronous``, ``placement``, ``executor`` (a :class:`~evorl.engine.execution.Runner`),
    ``pbt``, ``evaluator`` and ``_evaluate`` (greedy episodes of ``state.agent_state``),
    ``_evaluation_compiled`` (True when ``_evaluate`` is one jitted program, which ``compile``
    compiles beside the chunk); and it defines ``init`` (RL workflows with :meth:`init_agents`).
    Its state has ``iteration``, ``key`` and ``agent_state`` (``params``, ``obs_stats``).
    """

    #: The population's hyperparameter variants and agents, and the runner: one agent, fused,
    #: unless the workflow says otherwise (:meth:`runner_and_envs`).
    variants, num_agents, asynchronous = ({},), 1, False
    #: PBT's population step (:class:`~evorl.engine.pbt.PBT`), run by the executor; None without PBT.
    pbt: PBT | None = None
    _params_finite = None
    #: The agents PBT replaced in the last chunk after they diverged (see :meth:`write_lineage`).
    _replacements: dict = {}

    def __init__(self, config, env, agent, services=None):
        super().__init__(config, env, agent, services)
        #: The metrics of the last logging point (aggregated over a population), and of each agent.
        self.last_metrics: dict[str, float] = {}
        self.last_metrics_per_agent: dict[str, np.ndarray] = {}

    def state_without_buffer(self, state):
        """What a checkpoint holds with ``checkpoint.save_buffer: false``: ``state`` without its
        replay buffer (:attr:`replay_buffer_field`)."""
        return state.replace(**{self.replay_buffer_field: None})

    def state_with_buffer_of(self, restored, template):
        """A state restored without its buffer, with ``template``'s (a fresh, empty one)."""
        return restored.replace(**{self.replay_buffer_field: getattr(template, self.replay_buffer_field)})

    def runner_and_envs(self, config, env):
        """``(eval_env, train_env)``: the evaluation env (whole episodes) and the training env
        (:func:`training_env`); sets ``asynchronous`` (a host env needs the actor-learner, said
        in one line otherwise), ``variants`` and ``num_agents`` (variants x ``training.num_seeds``)."""
        eval_env, env = env.for_evaluation(), training_env(env, config.training)
        self.asynchronous = config.runner.asynchronous(env.on_host)
        check_host_env_runner(self.asynchronous, env.on_host, config.env.env_type, config.runner.mode)
        self.variants = sweep_variants(list(config.sweep))
        self.num_agents = num_agents(config)
        return eval_env, env

    @property
    def population(self) -> bool:
        return self.placement.population

    def host_step_timeout(self, config) -> float | None:
        """How long an evaluation's host env step may take (``runner.env_step_timeout_seconds``
        with the actor-learner; None: a JAX env, compiled)."""
        return config.runner.env_step_timeout_seconds if self.asynchronous else None

    def build_runner(self, config, env, eval_env, agent, make_iteration, make_learner_update, state_cls, *,
                     learner_mesh=None, actor_devices=None, acting=None, deterministic: bool = True,
                     warmup_iterations=None) -> None:
        """Sets what ``learn`` runs, once ``placement`` and ``optimizer`` are: ``pbt`` (with
        ``pbt.enabled``), ``executor`` (with
        ``asynchronous`` the actor-learner over ``make_learner_update(agent, optimizer, training,
        axis)``, else the fused :class:`~evorl.engine.execution.Executor` over
        ``make_iteration(env, agent, optimizer, training, axis)``, and over its ``warmup=True``
        variant for the ``warmup_iterations(state)`` iterations that cannot learn yet; a
        population's diverged agent is frozen), and ``evaluator``. The roles of the fields of
        ``state_cls`` (:mod:`evorl.rl.state_roles`) say which PBT copies and keeps, which the
        freeze keeps and which ``distributed.layout=envs`` splits."""
        tc = config.training
        self.pbt = self.make_pbt(config, eval_env, agent)
        # an actor-learner's learner on a mesh runs inside shard_map too: no population branch there
        population_axis = None if learner_mesh is not None else self.placement.population_axis_name
        freeze = functools.partial(freeze_diverged, axis_name=population_axis) if self.population else None
        if self.asynchronous:
            update = make_learner_update(agent, self.optimizer, tc, None if learner_mesh is None else DEVICE_AXIS)
            self.executor = ActorLearnerExecutor(update, env, agent, tc, config.runner, learner_mesh, actor_devices,
                                                 final_metrics=chunk_health, acting=acting, num_agents=self.num_agents,
                                                 freeze=freeze, population_step=self.pbt)
        else:
            steps = {"step": make_iteration(env, agent, self.optimizer, tc, self.placement.step_axis_name)}
            if warmup_iterations is not None:
                steps["warmup"] = make_iteration(env, agent, self.optimizer, tc, self.placement.step_axis_name,
                                                 warmup=True)
            if self.pbt is not None:
                steps = {name: self.pbt.summing_fitness_episodes(step) for name, step in steps.items()}
            warmup = Warmup(steps["warmup"], warmup_iterations) if warmup_iterations is not None else None
            self.executor = Executor(steps["step"], self.placement, env_axes(state_cls), final_metrics=chunk_health,
                                     freeze=freeze, population_step=self.pbt, warmup=warmup)
        self.build_evaluator(eval_env, agent, tc.eval_episodes, deterministic, self.host_step_timeout(config))
        #: A population's agents alive at the last report, and each frozen agent's bad metrics.
        self._reported_alive, self._frozen_metrics = None, {}

    def build_generation_runner(self, step, env, agent, eval_episodes: int) -> None:
        """Sets what ``learn`` runs for a workflow whose iteration is one compiled generation
        (``step``, on a JAX ``env``), once ``placement`` and ``pbt`` are: ``executor``, the fused
        :class:`~evorl.engine.execution.Executor` over ``step`` (with PBT's population step when
        ``pbt`` is set), and the evaluator of ``eval_episodes`` greedy episodes."""
        self.executor = Executor(step, self.placement, final_metrics=chunk_health, population_step=self.pbt)
        self.build_evaluator(env, agent, eval_episodes)

    def build_evaluator(self, eval_env, agent, eval_episodes: int, deterministic: bool = True,
                        step_timeout: float | None = None) -> None:
        """Sets ``evaluator`` (``eval_episodes`` episodes of ``eval_env``), ``_evaluation_compiled``
        and ``_evaluate`` (:meth:`evaluation_function`)."""
        self.evaluator = make_evaluator(eval_env, agent, eval_episodes, deterministic, step_timeout)
        # a host evaluator steps its envs in Python (with a jitted policy); a JAX one is compiled whole
        self._evaluation_compiled = not eval_env.on_host
        self._evaluate = self.evaluation_function()

    def make_pbt(self, config, eval_env, agent, store: HyperparameterStore | None = None) -> PBT | None:
        """With ``pbt.enabled``, PBT's step on this population (``store``: where the state holds
        the hyperparameters, default :class:`~evorl.engine.pbt.AgentHyperparameters`); None otherwise."""
        if not config.pbt.enabled:
            return None
        fitness = make_evaluator(eval_env, agent, config.pbt.eval_episodes, step_timeout=self.host_step_timeout(config))
        return PBT(config.pbt, evolving_hyperparameters(config, type(self)), self.num_agents, fitness.evaluate,
                   evaluates_on_host=eval_env.on_host, **({} if store is None else {"store": store}))

    def evaluation_function(self):
        """``_evaluate(agent_state, key) -> (returns, lengths) [(N,) E]`` over the population: the
        evaluator compiled for it (a JAX env), or a host env's evaluator run for one agent after
        another."""
        evaluate = self.evaluator.evaluate
        if self._evaluation_compiled:
            return self.executor.map_agents(evaluate)
        return each_agent(evaluate, self.num_agents) if self.population else evaluate

    def variant_data(self, config) -> list[tuple]:
        """``(hyperparameters, learning rate)`` of each variant of the population (``self.variants``).

        The hyperparameters are built once, by the agent's factory from the config
        (``agent.hparams_defaults``, under the config's names); a variant replaces the values
        of the keys it sweeps, which the config check (:meth:`hparams_of`, every variant) passed."""
        defaults = None if self.hparams_cls is None else self.agent.hparams_defaults
        names = set() if defaults is None else {f.name for f in dataclasses.fields(defaults)}
        out = []
        for variant in self.variants:
            _, training = apply_variant(config.agent, config.training, variant)
            swept = {key.split(".", 1)[1]: value for key, value in variant.items()}
            hparams = None if defaults is None else \
                dataclasses.replace(defaults, **{k: v for k, v in swept.items() if k in names})
            out.append((hparams, training.learning_rate))
        return out

    def init_agents(self, init_one, key: jax.Array):
        """The initial state of every agent, ``init_one(key, *data)`` run by the executor
        (``data``: the agent's variant's entry of ``_variant_data``, :meth:`variant_data`'s
        ``(hparams, learning_rate)`` for an RL workflow); with PBT it also holds the sums of the episodes PBT's fitness ranks by.
        For a population, agent ``v * num_seeds + s`` trains variant ``v`` with the ``s``-th
        key split from ``key``, shared by all variants (:func:`population_inputs`); one agent
        is initialised with ``key`` itself."""
        if self.pbt is not None:
            init_one = _then(init_one, self.pbt.with_pbt_fields)
        if not self.population:
            return self.executor.init(init_one, key, *self._variant_data[0])
        return self.executor.init(init_one, *population_inputs(key, self._variant_data, self.config.training.num_seeds))

    @property
    def env_steps_per_iteration(self) -> int:
        """Env steps one iteration counts on the logged ``step`` axis."""
        return self.config.training.env_steps_per_iteration

    def env_steps_taken(self, chunk_metrics: dict, num_iterations: int) -> float:
        """Env steps a chunk of ``num_iterations`` iterations took, all agents together
        (``steps_per_s``); ``chunk_metrics`` are the executor's (episode sums included)."""
        return self.num_agents * num_iterations * self.env_steps_per_iteration

    @property
    def compile_seconds(self) -> float | None:
        return self.executor.compile_seconds

    def place(self, state: State) -> State:
        """``state`` on the devices the compiled programs expect (a no-op when it already is)."""
        return self.executor.place(state)

    # --- training -------------------------------------------------------------------------
    def run_iterations(self, state: State, num_iterations: int) -> tuple[State, dict]:
        """Runs ``num_iterations`` iterations (compiled calls of a few seconds, see
        :class:`~evorl.engine.execution.Executor`); returns host metrics (aggregated over a
        population). The input state's buffers are donated (fused runner)."""
        with self.executor.running(state):
            state, metrics = self.executor.run(state, num_iterations)
        self.write_lineage()
        return state, self._aggregate(train_metrics(metrics))

    def write_lineage(self) -> None:
        """The records of the PBT steps run since the last call (:func:`~evorl.engine.lineage.lineage_record`),
        kept in ``last_pbt_records`` and written to the services' ``lineage``."""
        records = self.executor.take_records()
        if self.pbt is None:
            return
        keys = [e.key for e in self.pbt.evolving]
        self.last_pbt_records = [lineage_record(r, keys) for r in records]
        #: Each agent PBT replaced after it diverged, in these records: ``{agent: (iteration, source, values)}``.
        self._replacements = {entry["agent"]: (record["iteration"], entry["from"], ", ".join(
            f"{key}={record['new_hyperparameters'][key][entry['agent']]}" for key in keys))
            for record in self.last_pbt_records for entry in record["copied"] if entry.get("diverged")}
        lineage = self.services.lineage
        if lineage is None or not is_main_process():
            return
        steps_per_iteration = self.env_steps_per_iteration
        for record in self.last_pbt_records:
            lineage.write(record, record["iteration"] * steps_per_iteration)

    def params_finite(self, state: State) -> np.ndarray:
        """Whether each agent's parameters and observation statistics are finite: bool ``[N]``
        (``[1]`` for one agent), computed on the device."""
        if self._params_finite is None:
            self._params_finite = self.executor.map_agents(lambda s: tree_all_finite((s.params, s.obs_stats)))
        return np.reshape(to_host(self._params_finite(state.agent_state)), (self.num_agents,))

    def agent_labels(self) -> list[str]:
        """How errors name each agent: ``agent 3 (clip_epsilon=0.2, seed 1)``."""
        if not self.population:
            return ["the agent"]
        seeds = self.config.training.num_seeds
        labels = []
        for i in range(self.num_agents):
            variant, seed = self.variants[i // seeds], i % seeds
            labels.append(f"agent {i} ({', '.join(filter(None, [variant_label(variant), f'seed {seed}']))})")
        return labels

    def check_health(self, per_agent_metrics: dict, iteration: int) -> None:
        """Raises :class:`~evorl.engine.health.TrainingDiverged` if any agent's parameters
        (:func:`chunk_health`) or training metrics (``train_metrics``, per agent) are not finite.
        A population whose executor freezes diverged agents instead reports each newly frozen
        agent once (one line on stderr) and raises only when every agent is frozen."""
        check_environment(iteration, per_agent_metrics.get(ENV_FAULTS), self.agent_labels())
        bad_metrics = nonfinite_metrics(per_agent_metrics, self.num_agents, exempt=EPISODE_METRICS)
        params_finite = np.reshape(per_agent_metrics[NONFINITE_PARAMS], (self.num_agents,)) == 0
        alive = self.alive_agents()
        if alive is not None:
            self._report_frozen(alive, bad_metrics, iteration)
            self._report_replaced(alive, iteration)
            excused = ~alive | self.replaced_agents()  # frozen, or diverged and replaced by PBT
            bad_metrics = [[] if e else bad for bad, e in zip(bad_metrics, excused)]
            params_finite = params_finite | excused
        check_finite(iteration, params_finite, bad_metrics, self.agent_labels())

    def replaced_agents(self) -> np.ndarray:
        """Which agents PBT replaced in the last chunk after they diverged: bool ``[N]``."""
        replaced = np.zeros(self.num_agents, bool)
        replaced[list(self._replacements)] = True
        return replaced

    def _report_replaced(self, alive: np.ndarray, iteration: int) -> None:
        """One line naming the agents PBT replaced in the last chunk after they diverged."""
        replacements = self._replacements
        if replacements and is_main_process():
            labels = self.agent_labels()
            entries = [(labels[i], *replacements[i]) for i in sorted(replacements)]
            print(f"evorl: {replaced_message(iteration, entries, int(alive.sum()), self.num_agents)}",
                  file=sys.stderr, flush=True)

    def alive_agents(self) -> np.ndarray | None:
        """Which agents of a population still train (bool ``[N]``); None when no agent is ever
        frozen (one agent, or an executor without ``freeze``)."""
        if not self.population or self.executor.freeze is None:
            return None
        return np.reshape(self.executor.alive, (self.num_agents,))

    def _report_frozen(self, alive: np.ndarray, bad_metrics: list[list[str]], iteration: int) -> None:
        """Reports the agents frozen since the last call (one line); raises when none is left."""
        was_alive = self._reported_alive if self._reported_alive is not None else np.ones(self.num_agents, bool)
        self._reported_alive = alive
        newly = np.flatnonzero(was_alive & ~alive)
        self._frozen_metrics = {**self._frozen_metrics, **{int(i): bad_metrics[i] for i in newly}}
        labels = self.agent_labels()
        if not alive.any():
            raise TrainingDiverged(iteration, all_frozen_problems(labels, self._frozen_metrics))
        if newly.size and is_main_process():
            message = frozen_message(iteration, [labels[i] for i in newly], [bad_metrics[i] for i in newly],
                                     int(alive.sum()), self.num_agents)
            then = " PBT replaces frozen agents at its next step." if self.config.pbt.enabled else ""
            print(f"evorl: {message}{then}", file=sys.stderr, flush=True)

    def compile(self, state: State) -> float:
        """Compiles the training chunk (or the learner's update) ahead of time; returns the
        seconds it took. A compiled evaluation (a JAX env) is compiled meanwhile in a second
        thread: XLA compiles outside the GIL, so with two or more cores the evaluator's compile
        hides behind the chunk's, and the first ``evaluate`` finds it compiled."""
        if not self._evaluation_compiled:
            return self.executor.compile(state)
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evorl-compile") as pool:
            evaluation = pool.submit(
                lambda: self._evaluate.lower(state.agent_state, self._evaluation_key(state)).compile())
            seconds = self.executor.compile(state)
            evaluation.result()  # an error compiling the evaluation is raised here
        return seconds

    def step(self, state: State) -> tuple[State, dict]:
        """One training iteration: the new state and its metrics (on the host); no
        evaluation, logging or checkpoint."""
        return self.run_iterations(state, 1)

    def _aggregate(self, metrics: dict) -> dict[str, float]:
        metrics = {k: v for k, v in metrics.items() if k != ENV_FAULTS}  # checked (check_health), not logged
        if not self.population:
            return {k: float(v) for k, v in metrics.items()}
        self.last_metrics_per_agent = {**self.last_metrics_per_agent, **metrics}
        # under PBT the hyperparameters evolve: no per-variant means labelled by their initial values
        pbt = self.config.pbt.enabled
        variants, seeds = ([{}], self.num_agents) if pbt else (self.variants, self.config.training.num_seeds)
        alive = self.alive_agents()
        include = alive if alive is None or not any(key.startswith("train/") for key in metrics) else \
            alive & ~self.replaced_agents()  # a replaced agent's chunk ran diverged, its copy was not trained
        out = aggregate_metrics(metrics, variants, seeds, may_be_nan=EPISODE_METRICS, include=include)
        if any(key.startswith("train/") for key in metrics):
            bad = nonfinite_metrics(metrics, self.num_agents, exempt=EPISODE_METRICS)
            params_bad = np.reshape(metrics.get(NONFINITE_PARAMS, np.zeros(self.num_agents)), (self.num_agents,)) > 0
            if alive is not None:  # a frozen agent counts, whatever its (left out) metrics say
                params_bad = params_bad | ~alive
            out["train/nonfinite_agents"] = float(sum(bool(entries) or p for entries, p in zip(bad, params_bad)))
        return out

    # --- evaluation -----------------------------------------------------------------------
    def evaluate(self, state: State) -> dict[str, float]:
        """Greedy evaluation; for a population, of every agent (metrics aggregated). A host env
        that raises or hangs raises :class:`EvaluationFailed` carrying ``state``."""
        try:
            returns, lengths = to_host(self._evaluate(state.agent_state, self._evaluation_key(state)))  # [(N,) E]
        except HostEnvFault as e:
            error = EvaluationFailed(str(e))
            error.state = state
            raise error from e
        return self._aggregate({
            "eval/episode_return": np.mean(returns, axis=-1),
            "eval/episode_return_std": np.std(returns, axis=-1),
            "eval/episode_return_min": np.min(returns, axis=-1),
            "eval/episode_return_max": np.max(returns, axis=-1),
            "eval/episode_length": np.mean(lengths, axis=-1),
        })

    def _evaluation_key(self, state: State) -> jax.Array:
        fold = jax.vmap(jax.random.fold_in, in_axes=(0, None)) if self.population else jax.random.fold_in
        return fold(state.key, 0x5EED)  # [(N,) key]

    # --- the host loop --------------------------------------------------------------------
    def learn(self, state: State) -> State:
        """Trains from ``state`` to ``training.num_iterations``, in compiled chunks of
        ``training.eval_interval`` iterations; after each chunk: the health check, a greedy
        evaluation, the recorders' line and a checkpoint (with the services' ``checkpointer``).
        Returns the final state; a stop request ends it after the current compiled call (a few
        seconds: the partial chunk is evaluated, logged and checkpointed) with ``TrainingInterrupted``."""
        tc, services = self.config.training, self.services
        checkpointer, run_dir, stop = services.checkpointer, services.run_dir, services.stop
        done = int(np.max(to_host(state.iteration)))
        if self.compile_seconds is None:
            self.report_progress(done * self.env_steps_per_iteration, compiling=True)
            self.compile(state)
        self.report_progress(done * self.env_steps_per_iteration)  # compiled: the bar leaves "compiling..."
        self.last_metrics: dict[str, float] = {}
        self._last_finite = LastFinite(checkpointer, run_dir, state, done)
        with self.executor.running(state):
            while done < tc.num_iterations:
                # to the next logging point (a run stopped inside a chunk and resumed realigns)
                n = min(tc.eval_interval - done % tc.eval_interval, tc.num_iterations - done)
                try:
                    state, done, saved = self._chunk(state, done, n)
                except ActorLearnerError as e:  # keep what the learner reached, then fail with the actor's error
                    if checkpointer is not None and e.state is not None:
                        reached = int(to_host(e.state.iteration))
                        if reached not in checkpointer.steps():
                            checkpointer.save(e.state, reached)
                        after = "\n" if "\n" in e.args[0] else " "  # a traceback, or one line
                        e.args = (f"{e.args[0]}{after}The learner's state at iteration {reached} is checkpointed: "
                                  f"continue with {resume_argument(run_dir)}.",)
                    raise
                if stop.reason is not None and done < tc.num_iterations:
                    # (a stop that came just after a saved chunk's end runs no iteration: nothing new to save)
                    if checkpointer is not None and not saved and done not in checkpointer.steps():
                        checkpointer.save(state, done)
                    raise TrainingInterrupted(stop.reason, done, checkpointed=checkpointer is not None, run_dir=run_dir)
        return state

    def _chunk(self, state: State, done: int, n: int) -> tuple[State, int, bool]:
        """Up to ``n`` iterations (fewer on a stop request: the executors check it between
        compiled calls or learner updates), then the health check, evaluation, logging and checkpoint of the logging point.
        Returns the state, the iterations done and whether it was checkpointed."""
        steps_per_iteration = self.env_steps_per_iteration
        start = time.perf_counter()
        state, per_agent = self.executor.run(
            state, n, stop=lambda: self.services.stop.reason is not None,
            progress=lambda k: self.report_progress((done + k) * steps_per_iteration))
        self.write_lineage()
        n = int(np.max(to_host(state.iteration))) - done
        elapsed = time.perf_counter() - start
        if n == 0:
            return state, done, False
        done += n
        self.report_progress(done * steps_per_iteration)
        steps_taken = self.env_steps_taken(per_agent, n)
        per_agent = train_metrics(per_agent)
        try:
            self.check_health(per_agent, done)  # before anything is logged or checkpointed
        except TrainingDiverged as e:
            raise self._last_finite.save_for(e) from None
        metrics = self._aggregate(per_agent)
        metrics.update(self.executor.host_metrics())
        metrics.update(self.evaluate(state))
        metrics.update(iteration=done, env_steps=done * steps_per_iteration, steps_per_s=steps_taken / elapsed)
        self.last_metrics = metrics
        self.write_metrics(metrics, done * steps_per_iteration)
        checkpointer = self.services.checkpointer
        saved = checkpointer is not None and checkpointer.maybe_save(state, done)
        self._last_finite.passed(state, done, saved)
        return state, done, saved


def training_env(env, tc):
    """``env`` for training: episodes cut at ``training.train_episode_length`` when it is set
    (at most the evaluation episodes' length)."""
    if tc.train_episode_length is None:
        return env
    check_train_episode_length(tc.train_episode_length, env.episode_length)
    return env.with_episode_length(tc.train_episode_length)



def _then(fn, after):
    """``after(fn(*args))``."""
    return lambda *args: after(fn(*args))


#: The metric :func:`chunk_health` adds to every chunk's (1: the returned state is not finite).
NONFINITE_PARAMS = "train/nonfinite_params"


def chunk_health(state: TrainingState) -> dict:
    """Whether the state a chunk returns (the one checkpointed) has non-finite parameters or
    observation statistics: computed inside the chunk's program, so it costs no extra compile."""
    finite = tree_all_finite((state.agent_state.params, state.agent_state.obs_stats))
    return {"nonfinite_params": M.Metric(1.0 - finite.astype(jnp.float32), "max")}


class TrainingInterrupted(Exception):
    """``learn`` stopped early on request (the services' ``stop``), at the end of a chunk."""

    def __init__(self, reason: str, iteration: int, checkpointed: bool, run_dir: Path | str | None = None):
        self.reason, self.iteration = reason, iteration
        then = (f"its state is checkpointed: continue with {resume_argument(run_dir)}" if checkpointed
                else "nothing was checkpointed (no run folder, or checkpoint.enabled=false)")
        super().__init__(f"{reason}: training stopped after iteration {iteration}; {then}.")


def train_metrics(per_iteration: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The logged ``train/*`` metrics of a chunk (per agent for a population): the loss
    metrics per iteration, and the mean return and length of the episodes that ended in it
    (NaN if none did) with their count ``train/episodes``."""
    metrics = dict(per_iteration)
    count = metrics.pop("episode_count")
    return_sum = metrics.pop("episode_return_sum")
    length_sum = metrics.pop("episode_length_sum")
    out = {f"train/{k}": v for k, v in metrics.items()}
    with np.errstate(invalid="ignore", divide="ignore"):
        out["train/episode_return"] = np.where(count > 0, return_sum / count, np.nan)
        out["train/episode_length"] = np.where(count > 0, length_sum / count, np.nan)
    out["train/episodes"] = count
    return out
