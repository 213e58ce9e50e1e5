"""The run folder: what a training run writes, under which names, and how it is read back.

Run folder layout::

    config.yaml           the resolved config, every key (resume reads it)
    run.json              versions, devices, git commit, seed, start/end time, final evaluation
    metrics.jsonl         one JSON object per logging point (always written)
    metrics.csv           the same as a table (logging.recorders: csv)
    tensorboard/          event files (logging.recorders: tensorboard)
    checkpoints/<iter>/   orbax checkpoints of the whole training state
    learning_curve.png    return vs env steps and vs wall time
    run.lock              while a process writes the folder: its pid, host and start time
    pbt_lineage.jsonl     population-based training: per PBT step, who copied whom, fitness, hyperparameters
    pbt.png               population-based training: hyperparameters and returns over training

Writers: :func:`evorl.app.experiment.run_experiment` (``config.yaml``, ``run.json``, the plot),
the recorders (metrics files) and :class:`evorl.app.checkpoint.Checkpointer`; they take the
names from here (``run.lock``'s, and the lock itself, are :mod:`evorl.app.run_lock`'s). This module
imports no JAX at import time.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import math
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from evorl.app.errors import RunFolderError
from evorl.app.run_lock import LOCK_FILE, RunFolderInUse, RunFolderLock, timestamp  # noqa: F401  (public here too)
from evorl.config import ConfigError
from evorl.engine.processes import resume_argument

CONFIG_YAML = "config.yaml"
RUN_JSON = "run.json"
METRICS_JSONL = "metrics.jsonl"
METRICS_CSV = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"
CHECKPOINT_DIR = "checkpoints"
CURVE_PNG = "learning_curve.png"
PBT_LINEAGE_JSONL = "pbt_lineage.jsonl"
PBT_PNG = "pbt.png"
POPULATION_PNG = "population.png"
PARETO_JSONL = "pareto_front.jsonl"
PARETO_PNG = "pareto.png"


def checkpoint_dir(run_dir: Path | str) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def run_folder_of(path: Path | str) -> Path:
    """The run folder ``path`` names: a file directly inside a run folder (``<run>/run.json``,
    ``<run>/config.yaml``) stands for its folder; anything else is ``path`` itself."""
    path = Path(path)
    if path.is_file() and (path.parent / CONFIG_YAML).is_file():
        return path.parent
    return path


def utf8_text(path: Path | str) -> str:
    """The text of ``path``; bytes that are not UTF-8 are a RunFolderError naming the file and
    where the first bad byte is (line and column, from 1)."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RunFolderError(f"{path} is not UTF-8 text ({_bad_byte(data, e.start)})") from None


def _bad_byte(data: bytes, start: int) -> str:
    line = data.count(b"\n", 0, start) + 1
    column = start - (data.rfind(b"\n", 0, start) + 1) + 1
    return f"byte 0x{data[start]:02x} at line {line}, column {column}"


def load_run_config(run_dir: Path | str) -> dict:
    """The resolved config a run saved in its folder."""
    import yaml

    path = Path(run_dir) / CONFIG_YAML
    if not path.is_file():
        raise RunFolderError(f"{Path(run_dir)} has no {CONFIG_YAML}: it is not an evorl run folder.")
    try:
        cfg = yaml.safe_load(utf8_text(path))
    except ConfigError as e:
        raise RunFolderError(f"{e}: the file is damaged. {_config_copies(run_dir)}") from None
    except yaml.YAMLError as e:
        problem = str(e).replace("\n", " ")
        raise RunFolderError(f"{path} cannot be read as YAML: {problem}") from None
    if not isinstance(cfg, dict):
        raise RunFolderError(f"{path} does not hold a config mapping (got {type(cfg).__name__}).")
    return cfg


def _config_copies(run_dir: Path | str) -> str:
    """Where else a run folder's config is kept: in each checkpoint's metadata."""
    saves = sorted((p for p in checkpoint_dir(run_dir).glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
    if not saves:
        return "Restore it from a copy."
    return (f"Restore it from a copy; each checkpoint holds the run's config too ({saves[-1] / 'meta' / 'metadata'}, "
            f"JSON, its 'config' key).")


# --- strict JSON: no NaN / Infinity tokens, which other JSON readers reject -------------------
def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NumPy's too) replaced by None, NumPy scalars
    by Python numbers, tuples by lists."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # NumPy / JAX scalars
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def dumps_json(value: Any, **kwargs: Any) -> str:
    """Strict JSON text of ``value`` (see :func:`json_safe`)."""
    return json.dumps(json_safe(value), allow_nan=False, **kwargs)


# --- metrics files ----------------------------------------------------------------------
def read_jsonl(path: Path | str) -> list[dict]:
    """The records of a ``metrics.jsonl`` file (a torn last line, from a kill, is skipped)."""
    records = []
    for line in Path(path).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def truncate_records(path: Path, max_step: int) -> None:
    """Drops the records logged after env step ``max_step`` (a resumed run rewrites them).

    Works for ``.jsonl`` and ``.csv`` files; a missing file is left missing.
    """
    if not path.exists():
        return
    if path.suffix == ".jsonl":
        kept = [dumps_json(r) for r in read_jsonl(path) if r.get("step", 0) <= max_step]
        write_text_atomic(path, "".join(line + "\n" for line in kept))
        return
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    fields = list(rows[0]) if rows else []
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=fields)
    if fields:
        writer.writeheader()
    writer.writerows(r for r in rows if float(r.get("step") or 0) <= max_step)
    write_text_atomic(path, table.getvalue())


# --- a full disk: one error naming the file ----------------------------------------------
class NoSpaceLeft(OSError):
    """The device (or the quota) holding ``filename`` is full."""

    def __init__(self, path: Path | str):
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        #: Set when run.json could not record the failure either (it still says "running").
        self.unrecorded = False
        #: The run folder of the run it stopped (set by ``evorl.app.experiment``), which the message names.
        self.run_dir: Path | None = None

    def __str__(self) -> str:
        unrecorded = f"; {RUN_JSON} could not record the failure either (it still says 'running')"
        return (f"no space left on device writing {self.filename}{unrecorded if self.unrecorded else ''}. Free "
                f"some space there; a run it stopped continues from its newest complete checkpoint with "
                f"{resume_argument(self.run_dir)}.")


def is_disk_full(error: BaseException | str) -> bool:
    """An OSError ENOSPC / EDQUOT, or TensorStore's error (or log message) for one: orbax
    writes through TensorStore, which raises ``ValueError: RESOURCE_EXHAUSTED: ... No space
    left on device [os_error_code='28']``."""
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return any(f"[os_error_code='{code}']" in str(error) for code in (errno.ENOSPC, errno.EDQUOT))


@contextlib.contextmanager
def writing(path: Path | str):
    """Turns a full disk while writing ``path`` into :class:`NoSpaceLeft` naming it (a failed
    ``write()`` itself names no file)."""
    try:
        yield
    except NoSpaceLeft:
        raise
    except Exception as e:
        if is_disk_full(e):
            raise NoSpaceLeft(path) from e
        raise


# --- atomic writes: a reader never sees half a file --------------------------------------
def write_text_atomic(path: Path, text: str) -> None:
    """Writes ``path`` through a temporary file renamed over it: if the write fails (a full
    disk), ``path`` keeps its previous content and no temporary file is left behind."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with writing(path):
            tmp.write_text(text)
            tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: dict) -> None:
    write_text_atomic(path, dumps_json(data, indent=2, default=str) + "\n")


def write_yaml(path: Path, data: dict) -> None:
    import yaml

    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False))


# --- run.json -----------------------------------------------------------------------------
#: Where a run.json that cannot be read is moved by a resume (which then starts a new record).
UNREADABLE_SUFFIX = ".unreadable"


class UnreadableRunInfo(RunFolderError):
    """``run.json`` is not UTF-8 JSON holding an object (damaged, or edited badly)."""


def load_run_info(run_dir: Path | str) -> dict | None:
    """The content of ``run.json`` as written (None if there is none); a file that is not a
    JSON object in UTF-8 raises :class:`UnreadableRunInfo` naming it."""
    path = Path(run_dir) / RUN_JSON
    if not path.is_file():
        return None
    data = path.read_bytes()
    try:
        info = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UnreadableRunInfo(f"{path} cannot be read (not UTF-8 text: {_bad_byte(data, e.start)})") from None
    except ValueError as e:
        raise UnreadableRunInfo(f"{path} cannot be read (not JSON: {e})") from None
    if not isinstance(info, dict):
        raise UnreadableRunInfo(f"{path} cannot be read (a JSON {type(info).__name__}, not an object)")
    return info


def settle_stale_run(run_dir: Path | str, info: dict | None) -> str | None:
    """For the holder of the run folder's lock: a ``running`` status left by a process that is
    gone (it held the lock until it ended) becomes ``interrupted`` with the reason ``process N
    no longer running``, written to ``run.json``. Returns that reason, or None (nothing stale)."""
    if not info or info.get("status") != "running":
        return None
    sessions = [info, *(info.get("resumes") or [])]
    pid = next((s["pid"] for s in reversed(sessions) if isinstance(s, dict) and s.get("pid") is not None), "?")
    info.update(status="interrupted", reason=f"process {pid} no longer running")
    write_json(Path(run_dir) / RUN_JSON, info)
    return info["reason"]


def read_run_info(run_dir: Path | str) -> dict | None:
    """``run.json`` as it stands: a ``running`` status whose process is gone (the run folder's
    lock is free) reads as ``interrupted`` (``process N no longer running``) and is updated in
    the file; a live run's is left as it is. None if the folder has no ``run.json``."""
    info = load_run_info(run_dir)
    if not info or info.get("status") != "running":
        return info
    lock = RunFolderLock(run_dir, announce=False)
    try:
        lock.acquire()
    except (RunFolderInUse, OSError):  # a live run, or a folder this process cannot lock: as it stands
        return info
    try:
        info = load_run_info(run_dir)  # as it is now that no one else writes it
        settle_stale_run(run_dir, info)
    finally:
        lock.release()
    return info


def start_run_info(run_dir: Path, config: Any, resumed_from: int | None, previous: dict | None = None) -> dict:
    """Writes ``run.json`` with ``status: running`` and returns its content.

    A new run records what it ran on; a resumed one (``resumed_from`` = the checkpoint's
    iteration) keeps ``previous`` (the record as it was; None: a new record) and appends this
    session to ``resumes``, with how the session before it ended (``previous_status``,
    ``previous_reason``): the record's own ``reason`` and ``final_eval`` are the new session's
    to write.
    """
    import jax

    from evorl import __version__

    session = {"start_time": timestamp(), "hostname": platform.node(), "pid": os.getpid()}
    if resumed_from is not None and previous is not None:
        info = dict(previous)
        ended = {"previous_status": info.get("status")}
        if info.get("reason") is not None:
            ended["previous_reason"] = info["reason"]
        for key in ("reason", "final_eval"):
            info.pop(key, None)
    else:
        info = {
            "workflow": config.workflow_cls, "env": config.env.env_name, "seed": config.seed,
            "evorl_version": __version__, "jax_version": jax.__version__, "python": platform.python_version(),
            "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
            "git_commit": _git_commit(), **session,
        }
        ended = {}
    if resumed_from is not None:
        resumes = info.get("resumes") if isinstance(info.get("resumes"), list) else []
        info["resumes"] = [*resumes, {**session, "from_iteration": resumed_from, **ended}]
    info.update(status="running", end_time=None)
    write_json(run_dir / RUN_JSON, info)
    return info


def finish_run_info(run_dir: Path, info: dict, status: str, **fields: Any) -> None:
    """Rewrites ``run.json``: ``info`` with the final ``status``, the end time and ``fields``."""
    info.update(status=status, end_time=timestamp(), **fields)
    write_json(run_dir / RUN_JSON, info)


def _git_commit() -> str | None:
    """The commit of the evorl checkout in use (None for an installed package)."""
    source = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
