"""The last finite training state on disk: what a run that diverged leaves behind.

The host loop checkpoints only states that passed the health check
(:mod:`evorl.engine.health`), so once a checkpoint is on disk the newest one is finite. Before
the first save (a divergence in the first chunk, or before the first ``checkpoint.save_interval``)
there is none: :class:`LastFinite` keeps a host copy of the newest finite state until then, and
saves it when training stops diverged. The error then names the checkpoint that is really there.
The copy leaves out an off-policy run's replay buffer (saved as ``checkpoint.save_buffer: false``
saves it: a resume refills an empty one), which at the run's start holds nothing.
"""

from __future__ import annotations

from typing import Any

from evorl.engine.execution import to_host
from evorl.engine.health import TrainingDiverged
from evorl.engine.processes import resume_argument


class LastFinite:
    """The newest finite state of a run with ``checkpointer`` (None: no run folder, or
    ``checkpoint.enabled=false``): its newest checkpoint, or, while none is saved, a host copy."""

    def __init__(self, checkpointer: Any, run_dir: Any, state: Any, iteration: int):
        self.checkpointer, self.run_dir = checkpointer, run_dir
        self.newest = None if checkpointer is None else max(checkpointer.steps(), default=None)
        self._copy = None
        self.passed(state, iteration, saved=False)

    def passed(self, state: Any, iteration: int, saved: bool) -> None:
        """``state`` at ``iteration`` passed the health check (and was checkpointed if ``saved``)."""
        if self.checkpointer is None:
            return
        if saved:
            self.newest, self._copy = iteration, None
        elif self.newest is None:  # the training loop donates the device buffers: a host copy
            # without a replay buffer (empty at a run's start; a copy of a full one would double its memory)
            self._copy = (iteration, to_host(self.checkpointer.without_buffer(state)))

    def save_for(self, error: TrainingDiverged) -> TrainingDiverged:
        """``error`` saying where the last finite state is, saved first if only its copy held it."""
        if self.checkpointer is None:
            return error.with_checkpoint("Nothing was checkpointed (no run folder, or checkpoint.enabled=false).")
        if self._copy is not None:
            iteration, state = self._copy
            if iteration not in self.checkpointer.steps():
                self.checkpointer.save(state, iteration, with_buffer=not self.checkpointer.holds_buffer)
                self.checkpointer.wait()
            self.newest, self._copy = iteration, None
        start = " (the run's start)" if self.newest == 0 else ""
        return error.with_checkpoint(
            f"Nothing non-finite was checkpointed: the newest checkpoint, iteration {self.newest}{start}, holds the "
            f"last finite state saved (evorl-eval reads it; {resume_argument(self.run_dir)} trains on from it).")
