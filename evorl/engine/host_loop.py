"""The host loop every workflow shares (:class:`ChunkedWorkflow`, on ``RLWorkflow``).

``learn`` runs compiled chunks of ``training.eval_interval`` iterations through the workflow's
runner (the fused :class:`evorl.engine.execution.Executor`, or the actor-learner), checks
that every agent is still finite (:mod:`evorl.engine.health`; a population's diverged agent
is frozen, and training stops only when all are), evaluates greedily, logs and checkpoints;
asked to stop (the services' ``stop`` request), it checkpoints and raises :class:`TrainingInterrupted`.

Two parts of :class:`ChunkedWorkflow` live in their own files: how it assembles its runner,
evaluator and PBT (:mod:`evorl.engine.runner_assembly`), and what it makes of a chunk's
metrics, the health check and the aggregation over a population (:mod:`evorl.engine.chunk_report`).
"""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import jax
import numpy as np

from evorl.engine.actors import ActorLearnerError, EvaluationFailed
from evorl.engine.chunk_report import (  # noqa: F401  (the seed's import paths)
    ENV_FAULTS, EPISODE_METRICS, NONFINITE_PARAMS, ChunkReport, chunk_health, train_metrics,
)
from evorl.engine.evaluator import HostEnvFault
from evorl.engine.execution import to_host
from evorl.engine.health import TrainingDiverged
from evorl.engine.last_finite import LastFinite
from evorl.engine.lineage import lineage_record
from evorl.engine.processes import is_main_process, resume_argument
from evorl.engine.rl_base import RLWorkflow
from evorl.engine.runner_assembly import RunnerAssembly, training_env  # noqa: F401  (the seed's import path)


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


class ChunkedWorkflow(RunnerAssembly, ChunkReport, RLWorkflow, Generic[State]):
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


class TrainingInterrupted(Exception):
    """``learn`` stopped early on request (the services' ``stop``), at the end of a chunk."""

    def __init__(self, reason: str, iteration: int, checkpointed: bool, run_dir: Path | str | None = None):
        self.reason, self.iteration = reason, iteration
        then = (f"its state is checkpointed: continue with {resume_argument(run_dir)}" if checkpointed
                else "nothing was checkpointed (no run folder, or checkpoint.enabled=false)")
        super().__init__(f"{reason}: training stopped after iteration {iteration}; {then}.")

