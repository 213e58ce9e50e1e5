"""One training run with its run folder: config, metrics, checkpoints, plot and ``run.json``.

:func:`run_experiment` is what ``scripts/train.py`` / ``evorl-train`` call (with Hydra's
output folder as the run folder); it works the same from Python without Hydra::

    run_experiment({"env": {...}, "training": {...}}, output_dir="runs/cartpole")
    run_experiment({..., "resume": "runs/cartpole"})   # continue from the newest checkpoint

A config given from Python goes over the default config of ``evorl-train`` (``configs/config.yaml``
with the ``algo`` group of its ``workflow_cls``; see :mod:`evorl.app.config_groups`), so the same keys
train the same experiment from Python and from the command line. ``defaults=False`` takes the
config alone over the typed dataclass defaults (what ``Workflow.build_from_config`` does).

The run folder's layout is described in :mod:`evorl.app.run_folder`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import json
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from evorl.app.checkpoint import CheckpointError, Checkpointer
from evorl.app.recorders import JsonlRecorder, check_recorder_packages, make_recorders
from evorl.app.run_folder import (
    CONFIG_YAML,
    CURVE_PNG,
    METRICS_CSV,
    METRICS_JSONL,
    PARETO_JSONL,
    PARETO_PNG,
    PBT_LINEAGE_JSONL,
    PBT_PNG,
    POPULATION_PNG,
    RUN_JSON,
    UNREADABLE_SUFFIX,
    NoSpaceLeft,
    RunFolderLock,
    UnreadableRunInfo,
    checkpoint_dir,
    finish_run_info,
    is_disk_full,
    load_run_config,
    load_run_info,
    run_folder_of,
    settle_stale_run,
    start_run_info,
    truncate_records,
    write_yaml,
    writing,
)
from evorl.app.stop_signals import stop_on_signals
from evorl.config import ConfigError, to_plain
from evorl.config.experiment import check_experiment_mapping, check_names_workflow, check_resume_length
from evorl.engine.processes import PeerLost, is_main_process, peer_lost
from evorl.engine.processes import watching_run
from evorl.engine.processes import resume_argument
from evorl.engine.recording import StartupLines
from evorl.engine.services import RunServices
from evorl.hardware import imports_frozen  # gc.freeze during a run (evorl.hardware)

#: Keys of the experiment config that locate a run rather than define it.
RUN_LOCATION_KEYS = ("output_dir", "resume")


@dataclass
class ExperimentResult:
    workflow: Any
    state: Any
    final_metrics: dict[str, float]
    run_dir: Path | None
    #: A population's final greedy return of each agent (:func:`final_returns_per_agent`), else None.
    final_per_agent: dict[str, list] | None = None


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


def resolved_config(config: Any) -> dict:
    """The parsed experiment config as plain data: every key, defaults filled in."""
    data = dataclasses.asdict(config)
    if data["training"].get("total_env_steps") is not None:  # num_iterations is derived from it
        data["training"]["num_iterations"] = None
    for key in RUN_LOCATION_KEYS:
        data.pop(key, None)
    for name, values in data.pop("sweep"):  # hyperparameter lists back where they were given
        section, key = name.split(".", 1)
        data[section][key] = list(values)
    return json.loads(json.dumps(data))  # tuples -> lists, as YAML and JSON store them


def run_experiment(cfg: Any, output_dir: str | Path | None = None, recorders: list | None = None, *,
                   defaults: bool = True, label: str | None = None) -> ExperimentResult:
    """Validates ``cfg``, trains (or resumes) and evaluates; writes the run folder.

    ``cfg`` goes over the default config of its algorithm (``defaults=True``; see the module
    docstring); a config composed by Hydra (the CLI) passes ``defaults=False``. An ``algo:``
    node (the CLI's algorithm defaults) is resolved by
    :func:`~evorl.app.config_groups.select_algorithm`. ``output_dir`` (or the config's
    ``output_dir``) is the run folder; with neither, nothing is written. ``resume=<run folder>``
    continues that run in its own folder. ``recorders`` are added to the ones ``logging``
    names; ``label`` prefixes the console lines (default: the workflow's name). While it runs,
    the run folder is locked: another run into it (new or resumed) raises
    :class:`~evorl.app.run_folder.RunFolderInUse`.
    """
    from evorl.app.config_groups import check_agent_keys, select_algorithm, with_default_config
    from evorl.workflows import resolve_workflow_cls

    cfg = to_plain(cfg)
    check_experiment_mapping(cfg)
    cfg = with_default_config(cfg) if defaults else cfg
    cfg, note = select_algorithm(cfg)
    if note and is_main_process():
        print(f"evorl: {note}", file=sys.stderr, flush=True)
    check_names_workflow(cfg)
    check_agent_keys(cfg["workflow_cls"], cfg.get("agent"))
    workflow_cls = resolve_workflow_cls(cfg["workflow_cls"])
    parsed = workflow_cls.parse_config(cfg)  # a bad key is reported before any line
    # before the build (which starts jax.distributed) the process index is the config's
    startup = StartupLines(prefix=f"[{label or workflow_cls.name()}] ",
                           enabled="console" in parsed.logging.recorders and parsed.distributed.process_id in (None, 0))
    with startup.phase(f"building the env ({parsed.env.env_type} {parsed.env.env_name}) and the agent", "built"):
        workflow = workflow_cls.build_from_config(cfg, recorders=[])
    config = workflow.config
    startup.enabled = startup.enabled and is_main_process()
    check_recorder_packages(config.logging)
    run_dir = _run_dir(config, output_dir)
    if config.resume and not run_dir.is_dir():
        raise CheckpointError(f"resume={config.resume}: no such run folder.")
    # Only process 0 writes the run folder's files (and locks it); every process takes part in checkpoints.
    files_dir = run_dir if is_main_process() else None
    with _locked(files_dir, config.resume) as lock, imports_frozen():
        return _run(workflow, run_dir, files_dir, recorders, label or workflow.name(), startup, lock)


@contextlib.contextmanager
def _locked(files_dir: Path | None, resume: str | None):
    """The run folder's lock (None without one), taken quietly (``_run`` reports a lock taken
    over); a folder that cannot be created or written is a ConfigError naming it."""
    if files_dir is None:
        yield None
        return
    lock = RunFolderLock(files_dir, announce=False)
    try:
        lock.acquire()
    except OSError as e:
        if is_disk_full(e):
            raise
        where = f" ({e.filename})" if e.filename and Path(e.filename) != files_dir else ""
        action = "write in" if files_dir.is_dir() else "create"
        fix = "" if resume else " Choose another output_dir."
        raise ConfigError(f"cannot {action} the run folder {files_dir}: {e.strerror or e}{where}.{fix}") from None
    try:
        yield lock
    finally:
        lock.release()


def _run(workflow: Any, run_dir: Path | None, files_dir: Path | None, recorders: list | None,
         label: str, startup: StartupLines, lock: RunFolderLock | None = None) -> ExperimentResult:
    """The run's steps: check the folder, build the state (restored on a resume), open the
    run's files and services, train, evaluate, plot, and record how it ended in run.json."""
    config = workflow.config
    run_config = resolved_config(config)
    found = _check_run_folder(config, run_dir, files_dir)  # before anything is compiled or written
    use_checkpoints = run_dir is not None and (config.checkpoint.enabled or config.resume is not None)
    plot = files_dir is not None and config.logging.plot
    _import_in_background(["orbax.checkpoint"] * use_checkpoints
                          + ["matplotlib.figure", "matplotlib.backends.backend_agg"] * plot)
    _print_config_notes(workflow)
    state = _initial_state(workflow, startup)
    checkpointer = None
    if use_checkpoints:
        checkpointer = Checkpointer(checkpoint_dir(run_dir), config.checkpoint, config.training.eval_interval,
                                    config.training.num_iterations, run_config, **buffer_parts(workflow))
    resumed_from = None
    if config.resume:
        state, resumed_from = _resume(config, checkpointer, state, run_dir, label)
    if files_dir is not None:
        _take_over(run_dir, lock, found.stale, found.unreadable, config.resume)
    chain = _recorder_chain(workflow, files_dir, run_dir, recorders, label, resumed_from)
    run_info = None
    if files_dir is not None:
        run_info = _start_run_files(workflow, run_dir, run_config, resumed_from, found)
    services = _run_services(workflow, chain, checkpointer, files_dir, run_dir, run_config)
    workflow = workflow.with_services(services)
    state, final, per_agent = _train_and_record(workflow, state, services, checkpointer, run_dir, files_dir,
                                                run_info, run_config, label, plot)
    return ExperimentResult(workflow, state, final, run_dir, per_agent)


@dataclass
class _FolderFound:
    """What a run folder held before the run: its run.json (None if none or unreadable), the
    error reading it, and the note on a stale 'running' record settled (None if none)."""
    previous_info: dict | None = None
    unreadable: UnreadableRunInfo | None = None
    stale: str | None = None


def _check_run_folder(config: Any, run_dir: Path | None, files_dir: Path | None) -> _FolderFound:
    """What the folder holds, and whether it can be resumed: a new run into a folder with
    checkpoints, or a resume without a complete one, is a CheckpointError."""
    existing = checkpoint_dir(run_dir) if run_dir is not None else None
    saves = sorted(p.name for p in existing.iterdir()) if existing is not None and existing.is_dir() else []
    found = _FolderFound()
    if files_dir is not None:
        try:
            found.previous_info = load_run_info(run_dir)
        except UnreadableRunInfo as e:
            found.unreadable = e
        found.stale = settle_stale_run(run_dir, found.previous_info)  # we hold the lock: its last writer has ended
    if not config.resume and saves:
        if any(name.isdigit() for name in saves):
            raise CheckpointError(f"{run_dir} already holds checkpoints: pass resume={run_dir} to continue "
                                  f"that run, or choose another folder.")
        raise CheckpointError(f"{existing} holds only unfinished checkpoint saves ({', '.join(saves)}): the run "
                              f"there stopped during its first save and cannot be resumed. Delete {run_dir} or "
                              f"choose another folder.")
    if config.resume:
        _check_resumable(config, run_dir, saves, found.stale)
    return found


def _print_config_notes(workflow: Any) -> None:
    """The workflow's notes on its config, on stderr (process 0 only)."""
    if is_main_process():
        for note in workflow.config_notes():
            print(f"evorl: note: {note}", file=sys.stderr, flush=True)


def _initial_state(workflow: Any, startup: StartupLines) -> Any:
    """The training state from the config's seed, announced as a startup phase."""
    with startup.phase("initialising the training state (envs reset, networks and buffers created)", "initialised"):
        # compiles while those imports run; computed here, not in learn()'s first read of it, which waited for it unannounced
        return jax.block_until_ready(workflow.init(jax.random.PRNGKey(workflow.config.seed)))


def _resume(config: Any, checkpointer: Checkpointer | None, state: Any, run_dir: Path, label: str) -> tuple[Any, int]:
    """The state restored from the newest checkpoint and its iteration, with a line saying so."""
    if checkpointer is None or not checkpointer.steps():
        raise CheckpointError(f"resume={config.resume}: no complete checkpoint in {checkpoint_dir(run_dir)}.")
    state, meta = checkpointer.restore(state)  # validates before anything is written
    resumed_from = meta["iteration"]
    done = (f" (already at training.num_iterations={resumed_from}: nothing left to train)"
            if resumed_from >= config.training.num_iterations else "")
    if not checkpointer.buffer_saved(meta):
        done += ("; its checkpoint has no replay buffer (checkpoint.save_buffer=false): the buffer restarts "
                 "empty, and learning waits for training.learning_starts transitions")
    print(f"[{label}] resuming {run_dir} from iteration {resumed_from}{done}", flush=True)
    return state, resumed_from


def _recorder_chain(workflow: Any, files_dir: Path | None, run_dir: Path | None, recorders: list | None,
                    label: str, resumed_from: int | None):
    """The recorders ``logging`` names, followed by the caller's (process 0 only)."""
    config = workflow.config
    chain = make_recorders(config.logging, files_dir, prefix=f"[{label}] ",
                           total_steps=config.training.num_iterations * workflow.env_steps_per_iteration,
                           run_name=run_dir.name if run_dir else None,
                           start_step=(resumed_from or 0) * workflow.env_steps_per_iteration)
    chain.recorders += list(recorders or []) if is_main_process() else []
    return chain


def _start_run_files(workflow: Any, run_dir: Path, run_config: dict, resumed_from: int | None,
                     found: _FolderFound) -> dict:
    """Writes config.yaml, cuts a resumed run's records back to its checkpoint, and starts
    run.json's record (returned)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(run_dir / CONFIG_YAML, run_config)
    if resumed_from is not None:
        for name in (METRICS_JSONL, METRICS_CSV, PBT_LINEAGE_JSONL, PARETO_JSONL):
            truncate_records(run_dir / name, resumed_from * workflow.env_steps_per_iteration)
    previous_info = found.previous_info if found.unreadable is None else None
    return start_run_info(run_dir, workflow.config, resumed_from, previous_info)


def _run_services(workflow: Any, chain, checkpointer: Checkpointer | None, files_dir: Path | None,
                  run_dir: Path | None, run_config: dict) -> RunServices:
    """The workflow's services: recorders, checkpointer, lineage and Pareto-front records."""
    config = workflow.config
    lineage = JsonlRecorder(run_dir / PBT_LINEAGE_JSONL) if files_dir is not None and config.pbt.enabled else None
    front_recorder = JsonlRecorder(run_dir / PARETO_JSONL) if files_dir is not None and workflow.pareto_plot else None
    for recorder in filter(None, (lineage, front_recorder)):
        recorder.init(run_config)
    return RunServices(recorders=(chain,), checkpointer=checkpointer if config.checkpoint.enabled else None,
                       lineage=lineage, front_recorder=front_recorder, run_dir=run_dir)


def _train_and_record(workflow: Any, state: Any, services: RunServices, checkpointer: Checkpointer | None,
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


def _take_over(run_dir: Path, lock: RunFolderLock | None, stale: str | None, unreadable: Exception | None,
               resume: str | None) -> None:
    """Once the run starts (a resume's checkpoint restored): one line on what it found in its
    folder and changed: a lock taken over from an ended process, a stale 'running' settled, an
    unreadable run.json moved aside (a resume starts a new record). A new run's metrics files
    replace any left there (by a run without checkpoints: one with some is refused)."""
    found = [note for note in (lock.takeover_note() if lock else None,
                               stale and f"its {RUN_JSON} said 'running', now 'interrupted' ({stale})") if note]
    notes = [f"{run_dir}: {'; '.join(found)}"] if found else []
    if unreadable is not None and resume:  # the old bytes are kept
        aside = run_dir / (RUN_JSON + UNREADABLE_SUFFIX)
        (run_dir / RUN_JSON).replace(aside)
        notes.append(f"{unreadable}: moved to {aside.name}; this session starts a new record")
    if notes:
        print(f"evorl: {'; '.join(notes)}", file=sys.stderr, flush=True)
    if not resume:
        for name in (METRICS_JSONL, METRICS_CSV, PBT_LINEAGE_JSONL):
            (run_dir / name).unlink(missing_ok=True)


def _check_resumable(config: Any, run_dir: Path, saves: list[str], stale: str | None) -> None:
    """A resume needs a complete checkpoint, and a ``training.num_iterations`` not below its
    iteration (nothing would be trained, and config.yaml would be rewritten): checked by the
    checkpoints' folder names, before anything is compiled or written."""
    complete = sorted(int(name) for name in saves if name.isdigit())
    where = checkpoint_dir(run_dir)
    if not complete and saves:
        raise CheckpointError(
            f"resume={config.resume}: {run_dir} has no complete checkpoint: its run stopped during its first save "
            f"({', '.join(saves)}), so there is nothing to resume. Delete {where} and start it afresh in the same "
            f"folder with output_dir={run_dir} instead of resume=, or choose another folder.")
    if not complete:
        why = ("its run saved none (checkpoint.enabled=false)" if not config.checkpoint.enabled
               else f"its run{f' ({stale})' if stale else ''} stopped before its first save")
        own = (f" (with its own config: evorl-train --config-path={run_dir} --config-name={Path(CONFIG_YAML).stem} "
               f"output_dir={run_dir})") if (run_dir / CONFIG_YAML).is_file() else ""
        raise CheckpointError(
            f"resume={config.resume}: {run_dir} has no checkpoint yet (no complete checkpoint in {where}): {why}, "
            f"so there is nothing to resume. Start it afresh in the same folder with output_dir={run_dir} instead "
            f"of resume={own}.")
    check_resume_length(config.resume, config.training.num_iterations, complete[-1])


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


def _import_in_background(modules: list[str]) -> None:
    """Imports the tooling's libraries (about 0.6 s) on another thread while XLA compiles
    (which releases the GIL), so they add nothing to a run's wall time."""
    if modules:
        threading.Thread(target=lambda: [importlib.import_module(m) for m in modules], daemon=True).start()


def _run_dir(config: Any, output_dir: str | Path | None) -> Path | None:
    """The run folder, absolute (the messages that name it can be pasted from anywhere)."""
    location = config.resume or (output_dir if output_dir is not None else config.output_dir)
    if location is None:
        return None
    path = Path(os.path.abspath(location))
    return run_folder_of(path) if config.resume else path  # resume=<run>/run.json: that run's folder


def load_run(run_dir: str | Path, step: int | None = None, training: dict | None = None):
    """The workflow of a run folder and its trained state from checkpoint ``step`` (default:
    the newest); ``training`` overrides training keys that do not change the state, e.g.
    ``{"eval_episodes": 100}``. Returns ``(workflow, state, iteration)``."""
    from evorl.app.checkpoint import CheckpointConfig
    from evorl.workflows import resolve_workflow_cls

    cfg = load_run_config(run_dir)
    cfg["training"] = {**cfg.get("training", {}), **(training or {})}
    cfg["logging"] = {**cfg.get("logging", {}), "recorders": []}
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    checkpointer = Checkpointer(checkpoint_dir(run_dir), CheckpointConfig(), workflow.config.training.eval_interval,
                                workflow.config.training.num_iterations, resolved_config(workflow.config),
                                **buffer_parts(workflow))
    try:
        state, meta = checkpointer.restore(workflow.init(jax.random.PRNGKey(workflow.config.seed)), step)
    finally:
        checkpointer.close()
    return workflow, state, meta["iteration"]


def buffer_parts(workflow) -> dict:
    """The :class:`~evorl.app.checkpoint.Checkpointer` arguments that leave a replay buffer out of
    checkpoints (``checkpoint.save_buffer: false``) and put an empty one back on restore."""
    if workflow.replay_buffer_field is None:
        return {}
    return {"without_buffer": workflow.state_without_buffer, "refill_buffer": workflow.state_with_buffer_of}
