"""One training run with its run folder: config, metrics, checkpoints, plot and ``run.json``.

:func:`run_experiment` is what ``scripts/train.py`` / ``evorl-train`` call (with Hydra's
output folder as the run folder); it works the same from Python without Hydra::

    run_experiment({"env": {...}, "training": {...}}, output_dir="runs/cartpole")
    run_experiment({..., "resume": "runs/cartpole"})   # continue from the newest checkpoint

A config given from Python goes over the default config of ``evorl-train`` (``configs/config.yaml``
with the ``algo`` group of its ``workflow_cls``; see :mod:`evorl.app.config_groups`), so the same keys
train the same experiment from Python and from the command line. ``defaults=False`` takes the
config alone over the typed dataclass defaults (what ``Workflow.build_from_config`` does).

The run folder's layout is described in :mod:`evorl.app.run_folder`. The run's steps are
assembled here (:func:`run_experiment`); what it finds and starts in its folder is
:mod:`evorl.app.run_start`, its training and the record of how it ended :mod:`evorl.app.run_outcome`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from evorl.app.checkpoint import CheckpointError, Checkpointer
from evorl.app.errors import RunFolderError
from evorl.app.recorders import JsonlRecorder, check_recorder_packages, make_recorders
from evorl.app.run_folder import (
    PARETO_JSONL, PBT_LINEAGE_JSONL, RunFolderLock, checkpoint_dir, is_disk_full, load_run_config, run_folder_of,
)
from evorl.app.run_outcome import final_returns_per_agent, record_peer_lost, train_and_record  # noqa: F401  (public here too)
from evorl.app.run_start import check_run_folder, resume_state, start_run_files, take_over
from evorl.config import to_plain
from evorl.config.experiment import check_experiment_mapping, check_names_workflow
from evorl.engine.processes import is_main_process
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
    over); a folder that cannot be created or written is a RunFolderError naming it."""
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
        raise RunFolderError(f"cannot {action} the run folder {files_dir}: {e.strerror or e}{where}.{fix}") from None
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
    found = check_run_folder(config, run_dir, files_dir)  # before anything is compiled or written
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
        state, resumed_from = resume_state(config, checkpointer, state, run_dir, label)
    if files_dir is not None:
        take_over(run_dir, lock, found.stale, found.unreadable, config.resume)
    chain = _recorder_chain(workflow, files_dir, run_dir, recorders, label, resumed_from)
    run_info = None
    if files_dir is not None:
        run_info = start_run_files(workflow, run_dir, run_config, resumed_from, found)
    services = _run_services(workflow, chain, checkpointer, files_dir, run_dir, run_config)
    workflow = workflow.with_services(services)
    state, final, per_agent = train_and_record(workflow, state, services, checkpointer, run_dir, files_dir,
                                               run_info, run_config, label, plot)
    return ExperimentResult(workflow, state, final, run_dir, per_agent)


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
