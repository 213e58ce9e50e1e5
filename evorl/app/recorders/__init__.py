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

from pathlib import Path

from evorl.app.recorders.files import CsvRecorder, JsonlRecorder
from evorl.app.run_folder import METRICS_CSV, METRICS_JSONL, TENSORBOARD_DIR, read_jsonl, truncate_records
from evorl.config.logging import OPTIONAL_RECORDERS, RECORDERS, LoggingConfig, check_recorder_packages  # noqa: F401
from evorl.engine.recording import ConsoleRecorder, ProgressRecorder, Recorder, RecorderChain, report_progress

__all__ = [
    "Recorder", "RecorderChain", "ConsoleRecorder", "ProgressRecorder", "JsonlRecorder", "CsvRecorder",
    "LoggingConfig", "make_recorders", "report_progress", "check_recorder_packages", "read_jsonl", "truncate_records",
    "RECORDERS",
]


def make_recorders(logging: LoggingConfig, run_dir: Path | None, prefix: str = "",
                   total_steps: int | None = None, run_name: str | None = None, start_step: int = 0) -> RecorderChain:
    """The recorders ``logging`` names; file recorders only when there is a ``run_dir``. The
    progress bar counts to ``total_steps`` from ``start_step`` (a resumed run's step)."""
    recorders: list[Recorder] = []
    names = set(logging.recorders)
    if "console" in names:
        recorders.append(ProgressRecorder(total_steps, prefix=prefix, style=logging.console, start_step=start_step))
    if run_dir is not None:
        recorders.append(JsonlRecorder(run_dir / METRICS_JSONL, mark_resume=True))
        if "csv" in names:
            recorders.append(CsvRecorder(run_dir / METRICS_CSV))
        if "tensorboard" in names:
            from evorl.app.recorders.tensorboard import TensorBoardRecorder

            recorders.append(TensorBoardRecorder(run_dir / TENSORBOARD_DIR))
    if "wandb" in names:
        from evorl.app.recorders.wandb import WandbRecorder

        recorders.append(WandbRecorder(project=logging.wandb_project, group=logging.wandb_group,
                                       name=run_name, run_dir=run_dir))
    return RecorderChain(recorders)
