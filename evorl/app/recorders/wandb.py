"""Weights & Biases (the optional extra ``wandb``, ``pip install -e ".[wandb]"``; imported only
when asked for).

Works offline with ``WANDB_MODE=offline`` (the run is written under the run folder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evorl.config.errors import install_hint


class WandbRecorder:
    def __init__(self, project: str, group: str | None = None, name: str | None = None,
                 run_dir: Path | None = None):
        try:
            import wandb
        except ImportError:
            raise ImportError(
                f"The 'wandb' recorder needs Weights & Biases: {install_hint('wandb')}."
            ) from None
        self._wandb = wandb
        self.project, self.group, self.name, self.run_dir = project, group, name, run_dir
        self._run = None

    def init(self, config: Any) -> None:
        self._run = self._wandb.init(
            project=self.project, group=self.group, name=self.name, config=config,
            dir=str(self.run_dir) if self.run_dir is not None else None, reinit="finish_previous",
        )

    def write(self, metrics: dict[str, float], step: int) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None
