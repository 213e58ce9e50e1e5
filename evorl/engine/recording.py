"""What the host loop writes metrics to: the :class:`Recorder` protocol, :class:`RecorderChain`
(several behind one), :func:`report_progress`, and the console recorders (plain lines, or a
live progress bar (rich) on a terminal), a workflow's default; and :class:`StartupLines`, the
console's lines while a run starts, before its recorders exist. The file and service recorders
a run folder adds are :mod:`evorl.app.recorders`.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from typing import Any, Callable, Protocol

#: The fewest seconds between two console lines while training runs between logging points.
PROGRESS_SECONDS = 15.0


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


def _fmt(value: float) -> str:
    if isinstance(value, float) and (math.isnan(value) or abs(value) >= 1e4 or (0 < abs(value) < 1e-2)):
        return f"{value:.3g}"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def format_steps_per_s(value: float) -> str:
    """An env steps/s figure as every console line and the progress bar write it: a whole
    number with thousands separators from 100 on (``123``, ``12,346``, ``1,234,567``), three
    significant digits below (``52.3``, ``0.5``)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _shown(key: str, value: float) -> str:
    """A logged metric as the console line writes it."""
    return format_steps_per_s(value) if key == "steps_per_s" else _fmt(value)


def eta_text(remaining_steps: float, steps_per_s: float | None) -> str:
    """``H:MM:SS`` until ``remaining_steps`` are done at ``steps_per_s``; ``-:--:--`` unknown."""
    if steps_per_s is None or not math.isfinite(steps_per_s) or steps_per_s <= 0:
        return "-:--:--"
    seconds = max(0, round(remaining_steps / steps_per_s))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class StartupLines:
    """The console's lines while a run starts, before its recorders exist (they are made for the
    built workflow): each phase says when it begins and, once it ends, how long it took::

        [TD3] building the env (brax inverted_pendulum) and the agent...
        [TD3] built in 19.9 s
        [TD3] initialising the training state (compiles the env's reset and the networks' init)...
        [TD3] initialised in 16.1 s

    and then the console recorder's ``compiling the training program...`` (:class:`ConsoleRecorder`),
    so that no phase of a start, which can take minutes on a loaded machine, is silent. A phase
    that raises prints no end line. Nothing is printed when ``enabled`` is false (the run has no
    console recorder, or this is not process 0)."""

    def __init__(self, prefix: str = "", enabled: bool = True, stream=None,
                 clock: Callable[[], float] = time.perf_counter):
        self.prefix = prefix
        self.enabled = enabled
        self.stream = stream
        self.clock = clock

    @contextlib.contextmanager
    def phase(self, begins: str, ends: str):
        """``PREFIX{begins}...`` now, ``PREFIX{ends} in 1.2 s`` when the ``with`` block ends."""
        if not self.enabled:
            yield
            return
        print(f"{self.prefix}{begins}...", file=self.stream or sys.stdout, flush=True)
        start = self.clock()
        yield
        print(f"{self.prefix}{ends} in {self.clock() - start:.1f} s", file=self.stream or sys.stdout, flush=True)


class ConsoleRecorder:
    """One line per logging point with the headline numbers, and lines between them:

    * ``compiling the training program...`` when it starts compiling (:meth:`compiling`), and
      ``compiled in 23.4 s`` at the next :meth:`progress` call;
    * ``training: env_steps=1500/6000 wall_steps/s=1,234 eta=0:00:04`` at a :meth:`progress` call
      that comes ``progress_seconds`` or more after the previous line (of any kind), so that a
      run whose logging points come sooner prints nothing more.

    Two env-step rates, labelled apart: a logging point's ``train_steps/s`` is the training
    program's own (the chunk's env steps over its time, evaluation left out); the progress
    lines' and the bar's ``wall_steps/s`` are the wall clock's since the first :meth:`progress`
    call after compilation (evaluation, logging and checkpoints included: :meth:`speed`), and
    give the ETA with ``total_steps`` (None: unknown).
    """

    COLUMNS = {
        "iteration": "iter",
        "env_steps": "env_steps",
        "steps_per_s": "train_steps/s",  # the training program's rate, evaluation left out
        "train/episode_return": "train_return",
        "eval/episode_return": "eval_return",
    }

    def __init__(self, stream=None, prefix: str = "", total_steps: int | None = None,
                 progress_seconds: float = PROGRESS_SECONDS, clock: Callable[[], float] = time.perf_counter):
        self.stream = stream or sys.stdout
        self.prefix = prefix
        self.total_steps = total_steps
        self.progress_seconds = progress_seconds
        self.clock = clock
        self._first: tuple[float, int] | None = None  # (time, step) of the first progress point
        self._compile_start: float | None = None  # when the compilation in progress started
        self._last_line: float | None = None  # when the last line was printed

    def line(self, metrics: dict[str, float]) -> str:
        # a population (training.num_seeds) shows its spread across agents; its env_steps are
        # one agent's and its steps_per_s all agents' together
        population = any(key.endswith("episode_return/std") for key in metrics)
        parts = [
            f"{label}={_shown(key, metrics[key])}"
            + (f"±{_fmt(metrics[key + '/std'])}" if key + "/std" in metrics else "")
            + (" (all agents)" if population and key == "steps_per_s" else "")
            for key, label in self.COLUMNS.items() if key in metrics
        ]
        return f"{self.prefix}{' '.join(parts)}"

    def speed(self, metrics: dict[str, float], step: int, now: float) -> float | None:
        """Env steps per wall-clock second since the first progress point (evaluation, logging
        and checkpoints included, compilation left out); before a second point, the logging
        point's own ``steps_per_s`` (None without one)."""
        if self._first is None:
            self._first = (now, step)
        first_time, first_step = self._first
        if step > first_step and now > first_time:
            return (step - first_step) / (now - first_time)
        return metrics.get("steps_per_s")

    def progress_line(self, step: int, speed: float | None) -> str:
        """``training: env_steps=STEP[/TOTAL][ wall_steps/s=RATE][ eta=H:MM:SS]``."""
        parts = [f"env_steps={step}" + (f"/{self.total_steps}" if self.total_steps is not None else "")]
        if speed is not None:
            parts.append(f"wall_steps/s={format_steps_per_s(speed)}")
            if self.total_steps is not None:
                parts.append(f"eta={eta_text(self.total_steps - step, speed)}")
        return f"{self.prefix}training: {' '.join(parts)}"

    def _print(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
        self._last_line = self.clock()

    def init(self, config: Any) -> None:
        pass

    def compiling(self, step: int) -> None:
        """The training program starts compiling; training starts at env step ``step`` once it
        is compiled (the next :meth:`progress` call)."""
        self._print(f"{self.prefix}compiling the training program...")
        self._compile_start = self._last_line

    def progress(self, step: int) -> None:
        """Training has reached env step ``step`` (between logging points)."""
        now = self.clock()
        if self._compile_start is not None:
            self._print(f"{self.prefix}compiled in {now - self._compile_start:.1f} s")
            self._compile_start = None
        speed = self.speed({}, step, now)
        moved = step > self._first[1]  # not the start (a line there would say nothing)
        if moved and (self._last_line is None or now - self._last_line >= self.progress_seconds):
            self._print(self.progress_line(step, speed))

    def write(self, metrics: dict[str, float], step: int) -> None:
        self._print(self.line(metrics))

    def close(self) -> None:
        pass


class ProgressRecorder(ConsoleRecorder):
    """A rich progress bar (env steps, wall-clock steps/s, ETA, latest train and eval return) with the
    log lines above it; on a stream that is not a terminal (``style="auto"``), the plain lines
    of :class:`ConsoleRecorder`.

    The bar starts at ``start_step`` (a resumed run's step) and moves at each
    :meth:`progress` call: when training starts (compilation done), after every learner
    update of the asynchronous runner and after every compiled chunk of the fused one; the log
    lines come at logging points (:meth:`write`). Steps/s and the ETA are those of
    :meth:`~ConsoleRecorder.speed`. rich's own estimate needs two progress updates within 30 s,
    so it showed ``-:--:--`` until the end.
    """

    def __init__(self, total_steps: int | None, stream=None, prefix: str = "", style: str = "auto",
                 start_step: int = 0, progress_seconds: float = PROGRESS_SECONDS,
                 clock: Callable[[], float] = time.perf_counter):
        super().__init__(stream, prefix, total_steps, progress_seconds, clock)
        self.start_step = start_step
        interactive = getattr(self.stream, "isatty", lambda: False)()
        self.use_bar = total_steps is not None and (style == "bar" or (style == "auto" and interactive))
        self._progress = None
        self._written = False  # a logging point has been shown

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
                       table_column=kept("steps 123,456 wall steps/s ETA 0:00:00")),
            TextColumn("{task.fields[status]}", markup=False, table_column=Column(no_wrap=True, overflow="ellipsis")),
            console=Console(file=self.stream), transient=False, expand=False,
        )
        self._task = self._progress.add_task("train", total=self.total_steps, completed=self.start_step,
                                             status="compiling...", eta="-:--:--", rate="")
        self._progress.start()

    def _update(self, step: int, metrics: dict[str, float], **fields: str) -> None:
        speed = self.speed(metrics, step, self.clock())
        rate = f"{format_steps_per_s(float(speed))} wall steps/s " if speed is not None else ""
        self._progress.update(self._task, completed=step, eta=eta_text(self.total_steps - step, speed), rate=rate,
                              **fields)

    def compiling(self, step: int) -> None:
        """The training program starts compiling: the bar says ``compiling...`` (as it does from
        :meth:`init` on), or the plain line."""
        if self._progress is not None:
            self._progress.update(self._task, status="compiling...")
        elif not self.use_bar:
            super().compiling(step)

    def progress(self, step: int) -> None:
        """Training has reached env step ``step`` (between logging points): the bar moves, or
        the plain lines."""
        if self._progress is None:
            if not self.use_bar:
                super().progress(step)
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
