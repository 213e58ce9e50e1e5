"""What a run gives the workflow that trains in it: :class:`RunServices`.

A workflow receives its services when it is built (``build_from_config(cfg, services=...)``),
or as a copy that holds them (:meth:`~evorl.engine.rl_base.RLWorkflow.with_services`: a run
folder's checkpointer and recorders exist only once the initial state is restored, after the
workflow is built); nothing sets them on a workflow from outside. The defaults are a run
without a folder: one console recorder, no checkpoints, no lineage or front records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evorl.engine.recording import Recorder


class Checkpoints(Protocol):
    """What the host loop calls on a checkpointer (``evorl.app.checkpoint.Checkpointer``)."""

    holds_buffer: bool

    def maybe_save(self, state: Any, iteration: int) -> bool: ...

    def save(self, state: Any, iteration: int, with_buffer: bool = True) -> None: ...

    def steps(self) -> list[int]: ...

    def wait(self) -> None: ...

    def without_buffer(self, state: Any) -> Any: ...


class StopRequest:
    """A request that ``learn`` stop after its current compiled call (seconds), checkpoint and
    raise ``TrainingInterrupted``: :meth:`request` is called with a reason (``"SIGTERM"``, by
    :func:`evorl.app.stop_signals.stop_on_signals`), the host loop reads :attr:`reason`."""

    def __init__(self) -> None:
        #: Why training should stop; None: it should not.
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        self.reason = reason


@dataclass(frozen=True)
class RunServices:
    """The outputs and controls of one run, given to its workflow when it is built."""

    #: Where each logging point's metrics go (and progress, for those that show it); None: one
    #: console recorder labelled with the workflow's name.
    recorders: tuple[Recorder, ...] | None = None
    #: ``learn`` calls its ``maybe_save(state, iteration)`` after each chunk; None: no checkpoints.
    checkpointer: Checkpoints | None = None
    #: Where PBT's lineage records go (:func:`~evorl.engine.lineage.lineage_record`); None: nowhere.
    lineage: Recorder | None = None
    #: Where a Pareto workflow writes each logging point's front; None: nowhere.
    front_recorder: Recorder | None = None
    #: The run folder: what a stopped or diverged run's message says to resume from.
    run_dir: Path | None = None
    #: Set by a signal handler to stop ``learn`` at its next safe point.
    stop: StopRequest = field(default_factory=StopRequest)
