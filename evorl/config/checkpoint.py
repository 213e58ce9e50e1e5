"""The ``checkpoint:`` config section (:mod:`evorl.app.checkpoint` writes the checkpoints)."""

from __future__ import annotations

from dataclasses import dataclass

from evorl.config.errors import require


@dataclass(frozen=True)
class CheckpointConfig:
    """The ``checkpoint:`` section (checkpoints are written only when there is a run folder)."""

    #: Save checkpoints (every ``save_interval`` iterations and at the end).
    enabled: bool = True
    #: Iterations between saves, a multiple of ``training.eval_interval`` (saves happen at the
    #: end of the compiled chunks); null: every ``eval_interval``. The final state is always saved.
    save_interval: int | None = None
    #: Newest checkpoints kept; null keeps all.
    max_to_keep: int | None = 3
    #: Keep an off-policy run's replay buffer in its checkpoints. false: checkpoints stay small,
    #: and a resumed run starts with an empty buffer (no gradient step until it holds
    #: ``training.learning_starts`` transitions again), so the resume is no longer exact.
    save_buffer: bool = True

    def validate(self, where: str) -> None:
        require(self.save_interval is None or self.save_interval >= 1,
                f"{where}.save_interval must be >= 1 or null, got {self.save_interval}.")
        require(self.max_to_keep is None or self.max_to_keep >= 1,
                f"{where}.max_to_keep must be >= 1 or null, got {self.max_to_keep}.")

    def check_against(self, eval_interval: int) -> None:
        require(
            not self.enabled or self.save_interval is None or self.save_interval % eval_interval == 0,
            f"checkpoint.save_interval={self.save_interval} must be a multiple of "
            f"training.eval_interval={eval_interval} (checkpoints are taken between compiled chunks).",
        )
