"""SIGINT (Ctrl-C) and SIGTERM in ``evorl-train``.

* While ``learn`` runs (:func:`stop_on_signals`): the first signal asks it to stop after the
  current compiled call, with a checkpoint (``TrainingInterrupted``, exit status 130 / 143);
  a second one stops the process at once (the signal's default action).
* Before and after it (imports, Hydra, building the env, compiling; the final evaluation and
  plots) (:func:`stopping_outside_training`, for the whole command): the signal raises
  :class:`StoppedOutsideTraining`, which the command reports in one line with the same exit
  status. Python ignores an exception raised inside a garbage-collection callback (JAX
  registers one), so the signal is also remembered: a run whose exception was swallowed before
  ``learn`` stops at ``learn``'s first safe point, as if the signal had come then.

Kept apart from :mod:`evorl.app.experiment` so that the command installs its handler before it
imports JAX (about a second, the window in which a Ctrl-C was lost).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # imported by the command before JAX: the engine is imported later
    from evorl.engine.services import StopRequest

#: Signals that stop training at the next safe point (the end of the current compiled call).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: A signal received outside ``learn`` and not yet acted on (its name), at most one.
_pending: list[str] = []
#: Whether ``learn`` has started in this process (for the message of a later signal).
_learn_started: list[bool] = []


class StoppedOutsideTraining(KeyboardInterrupt):
    """SIGINT or SIGTERM before ``learn`` started or after it returned."""

    def __init__(self, signum: int):
        self.signal = signal.Signals(signum).name
        #: The shell's status for the signal (128 + its number).
        self.status = 128 + int(signum)
        when = "after training (its checkpoints are written)" if _learn_started else "before training started"
        super().__init__(f"{self.signal}: stopped {when}")


def _raise_outside_training(signum, frame):
    _pending[:] = [signal.Signals(signum).name]
    raise StoppedOutsideTraining(signum)


@contextlib.contextmanager
def stopping_outside_training():
    """For a command's whole run, in the main thread: SIGINT / SIGTERM outside ``learn`` raise
    :class:`StoppedOutsideTraining` (see the module docstring); elsewhere, nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_outside_training) for s in STOP_SIGNALS}
    previous_hook = sys.unraisablehook

    def quiet_about_swallowed_stops(unraisable):  # acted on through pending_signal, not a fault to print
        if not isinstance(unraisable.exc_value, StoppedOutsideTraining):
            previous_hook(unraisable)

    sys.unraisablehook = quiet_about_swallowed_stops
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for s, handler in previous.items():
            signal.signal(s, handler)


def pending_signal() -> StoppedOutsideTraining | None:
    """The signal received outside ``learn`` whose exception was swallowed (None: none), taken."""
    if not _pending:
        return None
    return StoppedOutsideTraining(signal.Signals[_pending.pop()])


@contextlib.contextmanager
def stop_on_signals(stop: StopRequest, label: str, on_stop_now: Callable[[str], None] | None = None):
    """While ``learn`` runs, SIGTERM or SIGINT requests ``stop`` (the workflow's services' stop
    request): ``learn`` stops after the current compiled call
    (a few seconds, :data:`~evorl.engine.execution.CALL_SECONDS`; it evaluates the partial
    chunk, checkpoints and raises ``TrainingInterrupted``); a second signal stops the process at once
    (the signal's default action), after ``on_stop_now(signal name)`` (e.g. run.json's record of
    how the run ended; an error in it is ignored). A signal that came before ``learn`` and was lost
    (:func:`pending_signal`) asks it to stop at once. ``label`` prefixes the line that says so. Only
    in the main thread of a single-process run: the processes of a multi-process run would stop at
    different chunks and wait for each other."""
    import jax

    if threading.current_thread() is not threading.main_thread() or jax.process_count() > 1:
        yield
        return

    def stop_now(signum, frame):
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        if on_stop_now is not None:
            with contextlib.suppress(Exception):
                on_stop_now(signal.Signals(signum).name)
        os.kill(os.getpid(), signum)  # the default action: the process ends with the signal's status

    def request_stop(signum, frame):
        for s in STOP_SIGNALS:
            signal.signal(s, stop_now)
        stop.request(signal.Signals(signum).name)
        print(f"[{label}] {stop.reason}: stopping after the current compiled call "
              f"of iterations, with a checkpoint (send it again to stop at once)", file=sys.stderr, flush=True)

    previous = {s: signal.signal(s, request_stop) for s in STOP_SIGNALS}
    _learn_started[:] = [True]
    if _pending:  # a signal before learn whose exception Python swallowed: stop at the first safe point
        request_stop(signal.Signals[_pending.pop()], None)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
