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
        parts = [  # a population (training.num_seeds) shows its spread across agents
            f"{label}={_fmt(metrics[key])}" + (f"±{_fmt(metrics[key + '/std'])}" if key + "/std" in metrics else "")
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

    The bar advances at logging points only: metrics never leave the device in between. The
    ETA is the remaining steps at the measured speed: the first logging point's ``steps_per_s``,
    then env steps per wall-clock second since the first logging point (evaluation, logging and
    checkpoints included; compilation, before the first point, left out). rich's own estimate
    needs two progress updates within 30 s, so it showed ``-:--:--`` until the end.
    """

    def __init__(self, total_steps: int | None, stream=None, prefix: str = "", style: str = "auto"):
        super().__init__(stream, prefix)
        self.total_steps = total_steps
        interactive = getattr(self.stream, "isatty", lambda: False)()
        self.use_bar = total_steps is not None and (style == "bar" or (style == "auto" and interactive))
        self._progress = None
        self._first: tuple[float, int] | None = None  # (time, step) of the first logging point

    def speed(self, metrics: dict[str, float], step: int, now: float) -> float | None:
        """Env steps per second for the ETA (see the class docstring)."""
        if self._first is None:
            self._first = (now, step)
        first_time, first_step = self._first
        if step > first_step and now > first_time:
            return (step - first_step) / (now - first_time)
        return metrics.get("steps_per_s")

    def init(self, config: Any) -> None:
        if not self.use_bar:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn(self.prefix.strip() or "train", markup=False), BarColumn(bar_width=20), MofNCompleteColumn(),
            TextColumn("steps  ETA"), TextColumn("{task.fields[eta]}", markup=False),
            TextColumn("{task.fields[status]}", markup=False),
            console=Console(file=self.stream), transient=False, expand=False,
        )
        self._task = self._progress.add_task("train", total=self.total_steps, status="compiling...", eta="-:--:--")
        self._progress.start()

    def write(self, metrics: dict[str, float], step: int) -> None:
        if self._progress is None:
            return super().write(metrics, step)
        status = " ".join(
            f"{label}={_fmt(metrics[key])}" for key, label in
            (("steps_per_s", "steps/s"), ("train/episode_return", "train"), ("eval/episode_return", "eval"))
            if key in metrics
        )
        self._progress.console.print(self.line(metrics), markup=False, highlight=False)
        eta = eta_text(self.total_steps - step, self.speed(metrics, step, time.perf_counter()))
        self._progress.update(self._task, completed=step, status=status, eta=eta)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
