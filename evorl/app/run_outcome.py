"""A run's training under its guards, and run.json's record of how it ended
(:func:`train_and_record`, the last of :func:`~evorl.app.experiment.run_experiment`'s steps):
``learn()`` under the signal handlers and the peer watch, the final evaluation and the plots,
the checkpointer and recorders closed on the way out, and the ending recorded whatever it is
(finished, interrupted, failed, a lost peer)."""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np

from evorl.app.checkpoint import Checkpointer
from evorl.app.run_folder import (
    CURVE_PNG, PARETO_PNG, PBT_PNG, POPULATION_PNG, RUN_JSON, NoSpaceLeft, checkpoint_dir, finish_run_info, writing,
)
from evorl.app.stop_signals import stop_on_signals
from evorl.engine.processes import PeerLost, peer_lost, resume_argument, watching_run
from evorl.engine.services import RunServices


def final_returns_per_agent(workflow: Any) -> dict[str, list] | None:
    """A population's last greedy evaluation, agent by agent: ``{"agents": labels [N],
    "eval/episode_return": [N]}`` (each agent's mean over ``eval_episodes``; a frozen agent's is
    None), which run.json records as ``final_eval_per_agent``. The aggregated metrics keep only
    the spread (mean, std, min, max across agents); this says which seed ended where. None for
    a single agent or a population not yet evaluated."""
    returns = workflow.last_metrics_per_agent.get("eval/episode_return")
    if not workflow.population or returns is None:
        return None
    alive = workflow.alive_agents()
    values = [float(v) if np.isfinite(v) and (alive is None or alive[i]) else None
              for i, v in enumerate(np.ravel(np.asarray(returns, np.float64)))]
    return {"agents": workflow.agent_labels(), "eval/episode_return": values}


def train_and_record(workflow: Any, state: Any, services: RunServices, checkpointer: Checkpointer | None,
                     run_dir: Path | None, files_dir: Path | None, run_info: dict | None, run_config: dict,
                     label: str, plot: bool) -> tuple[Any, dict, dict | None]:
    """Trains, evaluates and plots (:func:`_train_and_evaluate`); run.json records how it
    ended, whatever the ending. Returns the state, the final metrics and those per agent."""
    from evorl.engine.host_loop import TrainingInterrupted

    status, error, final, per_agent = "failed", None, None, None
    for chain in services.recorders:  # the one chain of the run's recorders
        chain.init(run_config)
    try:
        state, final, per_agent = _train_and_evaluate(workflow, state, services, checkpointer, run_dir, files_dir,
                                                      run_info, label, plot)
        status = "finished"
    except (KeyboardInterrupt, TrainingInterrupted) as e:
        status, error = "interrupted", e
        raise
    except Exception as e:  # e.g. TrainingDiverged, NoSpaceLeft, PeerLost: run.json says why the run failed
        error = _run_failure(e, run_dir, files_dir)
        if error is not e:
            raise error from e
        raise
    finally:
        if files_dir is not None:
            _finish_record(workflow, run_dir, run_info, status, error, final, per_agent)
    return state, final, per_agent


def _train_and_evaluate(workflow: Any, state: Any, services: RunServices, checkpointer: Checkpointer | None,
                        run_dir: Path | None, files_dir: Path | None, run_info: dict | None, label: str,
                        plot: bool) -> tuple[Any, dict, dict | None]:
    """``learn()`` under the signal handlers and the peer watch, the final evaluation and the
    plots; the checkpointer and recorders are closed on the way out, each even if one fails."""
    with contextlib.ExitStack() as closing:  # closes each, even when one fails (a full disk)
        if checkpointer is not None:
            closing.push(_closer(checkpointer))
        for recorder in (*services.recorders, *filter(None, (services.lineage, services.front_recorder))):
            closing.callback(recorder.close)
        closing.enter_context(watching_run(run_dir, functools.partial(_record_stopped_peer, run_dir)))
        with stop_on_signals(services.stop, label, on_stop_now=functools.partial(
                _record_stopped_at_once, run_dir, run_info, workflow) if files_dir is not None else None):
            state = workflow.learn(state)
        # learn() evaluated the final state at its last logging point; evaluate only if it ran none
        final = {k: v for k, v in workflow.last_metrics.items() if k.startswith("eval/")}
        final = final or workflow.evaluate(state)
        per_agent = final_returns_per_agent(workflow)
        if plot:  # while the last checkpoint is being written
            _plot_run(workflow, run_dir)
    return state, final, per_agent


def _plot_run(workflow: Any, run_dir: Path) -> None:
    """The run's figures: its learning curve, and its PBT lineage, population and Pareto front
    where it has them."""
    from evorl.app.plotting import plot_runs

    with writing(run_dir / CURVE_PNG):
        plot_runs([run_dir], run_dir / CURVE_PNG)
    if workflow.config.pbt.enabled:
        from evorl.app.pbt_lineage import plot_lineage

        with writing(run_dir / PBT_PNG):
            plot_lineage(run_dir, run_dir / PBT_PNG)
    if workflow.population_plot:
        from evorl.app.population_plot import plot_population

        with writing(run_dir / POPULATION_PNG):
            plot_population(run_dir, run_dir / POPULATION_PNG)
    if workflow.pareto_plot:
        from evorl.app.pareto_plot import plot_pareto

        with writing(run_dir / PARETO_PNG):
            plot_pareto(run_dir, run_dir / PARETO_PNG)


def _run_failure(e: Exception, run_dir: Path | None, files_dir: Path | None) -> Exception:
    """The error a failed run raises: ``e``, or the :class:`PeerLost` it stands for (which a
    process other than 0 records in run.json, since process 0 may be the one lost)."""
    if isinstance(e, NoSpaceLeft):
        e.run_dir = run_dir
    error = peer_lost(e, run_dir) or e
    if error is not e and files_dir is None and run_dir is not None:
        record_peer_lost(run_dir, error)
    return error


def _finish_record(workflow: Any, run_dir: Path, run_info: dict, status: str, error: BaseException | None,
                   final: dict | None, per_agent: dict | None) -> None:
    """run.json's record of how the run ended. A full disk that keeps it from being written is
    raised when the run had no error of its own, else said beside that error."""
    outcome = ({"final_eval": final, **({"final_eval_per_agent": per_agent} if per_agent else {})}
               if status == "finished"
               else {"reason": f"{type(error).__name__}: {error}"} if error is not None else {})
    try:
        finish_run_info(run_dir, run_info, status, compile_seconds=workflow.compile_seconds, **outcome)
    except NoSpaceLeft as e:  # run.json keeps its previous content ("running")
        if error is None:
            e.run_dir = run_dir
            raise
        if isinstance(error, NoSpaceLeft):
            error.unrecorded = True  # said in its message
        else:  # the run's own error is the one to raise
            print(f"evorl: {run_dir / RUN_JSON} could not record how the run ended: {e}", file=sys.stderr,
                  flush=True)


def _record_stopped_at_once(run_dir: Path, run_info: dict, workflow: Any, signal_name: str) -> None:
    """run.json's record of a run a second signal ended at once (the process then dies)."""
    finish_run_info(run_dir, run_info, "interrupted", compile_seconds=workflow.compile_seconds,
                    reason=f"{signal_name} sent twice: stopped at once, without checkpointing the current state; the "
                           f"newest checkpoint is the last one saved whole: continue with {resume_argument(run_dir)}")


def record_peer_lost(run_dir: Path, error: Exception) -> None:
    """A surviving process of a multi-process run records the failure in the shared run
    folder's ``run.json`` if it still says ``running`` (process 0, which writes it, may be the
    process that was lost). Nothing happens where the folder is not visible to this process."""
    path = run_dir / RUN_JSON
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if info.get("status") == "running":
        reason = f"{type(error).__name__}: {error} (recorded by process {jax.process_index()})"
        finish_run_info(run_dir, info, "failed", reason=reason)


def _record_stopped_peer(run_dir: Path | None, message: str) -> None:
    """A peer stopped without dying (:mod:`evorl.engine.processes`): ``run.json`` says failed, and the
    checkpoint being written (whose collectives wait for the peer) is removed half-written."""
    if run_dir is None:
        return
    record_peer_lost(run_dir, PeerLost(message))
    for partial in checkpoint_dir(run_dir).glob("*.orbax-checkpoint-tmp*"):
        shutil.rmtree(partial, ignore_errors=True)


def _closer(checkpointer: Checkpointer):
    """Closes ``checkpointer`` (waiting for a save in flight) on leaving a ``with``, unless a lost
    process would keep that save, and orbax's barriers, waiting for ever."""
    def close(exc_type, error, traceback) -> None:
        if not peer_lost(error):
            checkpointer.close()
    return close
