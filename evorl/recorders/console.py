"""Console recorders: plain lines, or a live progress bar (rich) on a terminal."""

from __future__ import annotations

import math
import sys
import time
from typing import Any


def _fmt(value: float) -> str:
    if isinstance(value, float) and (math.isnan(value) or abs(value) >= 1e4 or (0 < abs(value) < 1e-2)):
        return f"{value:.3g}"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


class ConsoleRecorder:
    """One line per logging point with the headline numbers."""

    COLUMNS = {
        "iteration": "iter",
        "env_steps": "env_steps",
        "steps_per_s": "steps/s",
        "train/episode_return": "train_return",
        "eval/episode_return": "eval_return",
    }

    def __init__(self, stream=None, prefix: str = ""):
        self.stream = stream or sys.stdout
        self.prefix = prefix

    def line(self, metrics: dict[str, float]) -> str:
        # a population (training.num_seeds) shows its spread across agents; its env_steps are
        # one agent's and its steps_per_s all agents' together
        population = any(key.endswith("episode_return/std") for key in metrics)
        parts = [
            f"{label}={_fmt(metrics[key])}" + (f"±{_fmt(metrics[key + '/std'])}" if key + "/std" in metrics else "")
            + (" (all agents)" if population and key == "steps_per_s" else "")
            for key, label in self.COLUMNS.items() if key in metrics
        ]
        return f"{self.prefix}{' '.join(parts)}"

    def init(self, config: Any) -> None:
        pass

    def write(self, metrics: dict[str, float], step: int) -> None:
        print(self.line(metrics), file=self.stream, flush=True)

    def close(self) -> None:
        pass


def eta_text(remaining_steps: float, steps_per_s: float | None) -> str:
    """``H:MM:SS`` until ``remaining_steps`` are done at ``steps_per_s``; ``-:--:--`` unknown."""
    if steps_per_s is None or not math.isfinite(steps_per_s) or steps_per_s <= 0:
        return "-:--:--"
    seconds = max(0, round(remaining_steps / steps_per_s))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressRecorder(ConsoleRecorder):
    """A rich progress bar (env steps, steps/s, ETA, latest train and eval return) with the
    log lines above it; plain lines when ``stream`` is not a terminal (``style="auto"``).

    The bar starts at ``start_step`` (a resumed run's step) and moves at each
    :meth:`progress` call: when training starts (compilation done), after every learner
    update of the asynchronous runner and after every compiled chunk of the fused one; the log
    lines come at logging points (:meth:`write`). Steps/s and the ETA are measured from the
    first :meth:`progress` call: env steps per wall-clock second since then (evaluation,
    logging and checkpoints included, compilation left out); before a second point, the
    logging point's own ``steps_per_s``. rich's own estimate needs two progress updates
    within 30 s, so it showed ``-:--:--`` until the end.
    """

    def __init__(self, total_steps: int | None, stream=None, prefix: str = "", style: str = "auto",
                 start_step: int = 0):
        super().__init__(stream, prefix)
        self.total_steps = total_steps
        self.start_step = start_step
        interactive = getattr(self.stream, "isatty", lambda: False)()
        self.use_bar = total_steps is not None and (style == "bar" or (style == "auto" and interactive))
        self._progress = None
        self._first: tuple[float, int] | None = None  # (time, step) of the first progress point
        self._written = False  # a logging point has been shown

    def speed(self, metrics: dict[str, float], step: int, now: float) -> float | None:
        """Env steps per second for the ETA (see the class docstring)."""
        if self._first is None:
            self._first = (now, step)
        first_time, first_step = self._first
        if step > first_step and now > first_time:
            return (step - first_step) / (now - first_time)
        return metrics.get("steps_per_s")

    @property
    def completed(self) -> int | None:
        """The bar's env-step count (None without a bar)."""
        return None if self._progress is None else int(self._progress.tasks[0].completed)

    def init(self, config: Any) -> None:
        if not self.use_bar:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.table import Column

        def kept(example: str) -> Column:  # on a narrow console the bar and the returns give way first
            return Column(no_wrap=True, min_width=len(example))

        label = self.prefix.strip() or "train"
        self._progress = Progress(
            TextColumn(label, markup=False, table_column=kept(label)), BarColumn(bar_width=20),
            MofNCompleteColumn(table_column=kept(f"{self.total_steps}/{self.total_steps}")),
            TextColumn("steps {task.fields[rate]}ETA {task.fields[eta]}", markup=False,
                       table_column=kept("steps 1.23e+04 steps/s ETA 0:00:00")),
            TextColumn("{task.fields[status]}", markup=False, table_column=Column(no_wrap=True, overflow="ellipsis")),
            console=Console(file=self.stream), transient=False, expand=False,
        )
        self._task = self._progress.add_task("train", total=self.total_steps, completed=self.start_step,
                                             status="compiling...", eta="-:--:--", rate="")
        self._progress.start()

    def _update(self, step: int, metrics: dict[str, float], **fields: str) -> None:
        speed = self.speed(metrics, step, time.perf_counter())
        rate = f"{_fmt(float(speed))} steps/s " if speed is not None else ""
        self._progress.update(self._task, completed=step, eta=eta_text(self.total_steps - step, speed), rate=rate,
                              **fields)

    def progress(self, step: int) -> None:
        """Training has reached env step ``step`` (between logging points)."""
        if self._progress is None:
            return
        self._update(step, {}, **({} if self._written else {"status": "training..."}))

    def write(self, metrics: dict[str, float], step: int) -> None:
        if self._progress is None:
            return super().write(metrics, step)
        status = " ".join(
            f"{label}={_fmt(metrics[key])}" for key, label in
            (("train/episode_return", "train"), ("eval/episode_return", "eval")) if key in metrics
        )
        self._progress.console.print(self.line(metrics), markup=False, highlight=False)
        self._written = True
        self._update(step, metrics, status=status)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
