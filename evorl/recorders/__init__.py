"""Recorders receive host-side metric dicts at logging points (never inside the hot loop).

A recorder has ``init(config)`` (once, with the resolved config as a plain dict),
``write(metrics, step)`` (at each logging point; ``step`` is the env-step count) and
``close()``; a recorder that shows progress between logging points (the console) may also
have ``compiling(step)``, called when the training program starts compiling (training then
starts at env step ``step``), and ``progress(step)``, called when training starts and after
every learner update or compiled chunk. :class:`RecorderChain` fans out to several.
:func:`make_recorders` builds the chain a config's ``logging`` section names; heavy backends
(tensorboardX, wandb) are imported only when named.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Protocol

from evorl.config import ConfigError
from evorl.config.logging import RECORDERS, LoggingConfig
from evorl.recorders.console import ConsoleRecorder, ProgressRecorder
from evorl.recorders.files import CsvRecorder, JsonlRecorder
from evorl.run_folder import METRICS_CSV, METRICS_JSONL, TENSORBOARD_DIR, read_jsonl, truncate_records

__all__ = [
    "Recorder", "RecorderChain", "ConsoleRecorder", "ProgressRecorder", "JsonlRecorder", "CsvRecorder",
    "LoggingConfig", "make_recorders", "report_progress", "check_recorder_packages", "read_jsonl", "truncate_records",
    "RECORDERS",
]

#: The optional recorders: the module each imports and the extra that installs it.
OPTIONAL_RECORDERS = {"tensorboard": ("tensorboardX", "tensorboard"), "wandb": ("wandb", "wandb")}


class Recorder(Protocol):
    def init(self, config: Any) -> None: ...

    def write(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class RecorderChain:
    """Several recorders behind one: each call goes to every recorder, in order."""

    def __init__(self, recorders: list[Recorder]):
        self.recorders = list(recorders)

    def init(self, config: Any) -> None:
        for recorder in self.recorders:
            recorder.init(config)

    def write(self, metrics: dict[str, float], step: int) -> None:
        for recorder in self.recorders:
            recorder.write(metrics, step)

    def compiling(self, step: int) -> None:
        """The training program starts compiling: passed to the recorders that show it."""
        report_progress(self.recorders, step, compiling=True)

    def progress(self, step: int) -> None:
        """Training has reached env step ``step``: passed to the recorders that show it."""
        report_progress(self.recorders, step)

    def close(self) -> None:
        for recorder in self.recorders:
            recorder.close()


def report_progress(recorders: list[Recorder], step: int, compiling: bool = False) -> None:
    """``progress(step)`` of each recorder that has one, or with ``compiling`` (the training
    program starts compiling) its ``compiling(step)``; the others only see logging points."""
    for recorder in recorders:
        hook = getattr(recorder, "compiling" if compiling else "progress", None)
        if hook is not None:
            hook(step)


def check_recorder_packages(logging: LoggingConfig) -> None:
    """A ``ConfigError`` naming the extra to install when a recorder in ``logging.recorders``
    lacks its package: run before compilation, not when the recorders start after it."""
    for name in logging.recorders:
        module, extra = OPTIONAL_RECORDERS.get(name, (None, None))
        if module is not None and importlib.util.find_spec(module) is None:
            raise ConfigError(f"logging.recorders names {name!r}, which needs {module}: "
                              f"pip install 'evorl[{extra}]'.")


def make_recorders(logging: LoggingConfig, run_dir: Path | None, prefix: str = "",
                   total_steps: int | None = None, run_name: str | None = None, start_step: int = 0) -> RecorderChain:
    """The recorders ``logging`` names; file recorders only when there is a ``run_dir``. The
    progress bar counts to ``total_steps`` from ``start_step`` (a resumed run's step)."""
    recorders: list[Recorder] = []
    names = set(logging.recorders)
    if "console" in names:
        recorders.append(ProgressRecorder(total_steps, prefix=prefix, style=logging.console, start_step=start_step))
    if run_dir is not None:
        recorders.append(JsonlRecorder(run_dir / METRICS_JSONL))
        if "csv" in names:
            recorders.append(CsvRecorder(run_dir / METRICS_CSV))
        if "tensorboard" in names:
            from evorl.recorders.tensorboard import TensorBoardRecorder

            recorders.append(TensorBoardRecorder(run_dir / TENSORBOARD_DIR))
    if "wandb" in names:
        from evorl.recorders.wandb import WandbRecorder

        recorders.append(WandbRecorder(project=logging.wandb_project, group=logging.wandb_group,
                                       name=run_name, run_dir=run_dir))
    return RecorderChain(recorders)
