"""What a run finds in its folder before it trains, and what it does there
(:func:`~evorl.app.experiment.run_experiment`'s steps, :mod:`evorl.app.run_folder` the layout):
whether the folder may be trained into or resumed (:func:`check_run_folder`, before anything
is compiled or written), the state restored on a resume (:func:`resume_state`), the notes on
what it took over (:func:`take_over`), and config.yaml and run.json's record started
(:func:`start_run_files`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evorl.app.checkpoint import CheckpointError, Checkpointer
from evorl.app.run_folder import (
    CONFIG_YAML, METRICS_CSV, METRICS_JSONL, PARETO_JSONL, PBT_LINEAGE_JSONL, RUN_JSON, UNREADABLE_SUFFIX,
    RunFolderLock, UnreadableRunInfo, checkpoint_dir, load_run_info, settle_stale_run, start_run_info,
    truncate_records, write_yaml,
)
from evorl.config.experiment import check_resume_length


@dataclass
class FolderFound:
    """What a run folder held before the run: its run.json (None if none or unreadable), the
    error reading it, and the note on a stale 'running' record settled (None if none)."""
    previous_info: dict | None = None
    unreadable: UnreadableRunInfo | None = None
    stale: str | None = None


def check_run_folder(config: Any, run_dir: Path | None, files_dir: Path | None) -> FolderFound:
    """What the folder holds, and whether it can be resumed: a new run into a folder with
    checkpoints, or a resume without a complete one, is a CheckpointError."""
    existing = checkpoint_dir(run_dir) if run_dir is not None else None
    saves = sorted(p.name for p in existing.iterdir()) if existing is not None and existing.is_dir() else []
    found = FolderFound()
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


def resume_state(config: Any, checkpointer: Checkpointer | None, state: Any, run_dir: Path, label: str) -> tuple[Any, int]:
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


def take_over(run_dir: Path, lock: RunFolderLock | None, stale: str | None, unreadable: Exception | None,
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


def start_run_files(workflow: Any, run_dir: Path, run_config: dict, resumed_from: int | None,
                    found: FolderFound) -> dict:
    """Writes config.yaml, cuts a resumed run's records back to its checkpoint, and starts
    run.json's record (returned)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(run_dir / CONFIG_YAML, run_config)
    if resumed_from is not None:
        for name in (METRICS_JSONL, METRICS_CSV, PBT_LINEAGE_JSONL, PARETO_JSONL):
            truncate_records(run_dir / name, resumed_from * workflow.env_steps_per_iteration)
    previous_info = found.previous_info if found.unreadable is None else None
    return start_run_info(run_dir, workflow.config, resumed_from, previous_info)
