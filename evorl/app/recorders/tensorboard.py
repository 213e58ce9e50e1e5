"""TensorBoard event files through tensorboardX (the optional extra ``tensorboard``,
``pip install -e ".[tensorboard]"``, which also installs ``tensorboard`` to view them; imported
only when this module is)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from evorl.config.errors import install_hint

try:
    from tensorboardX import SummaryWriter
except ImportError:
    raise ImportError(f"The 'tensorboard' recorder needs tensorboardX: {install_hint('tensorboard')}.") from None


class TensorBoardRecorder:
    """One scalar per metric, at x = env steps; the resolved config as a text summary."""

    def __init__(self, log_dir: Path | str):
        self.log_dir = Path(log_dir)
        self._writer: SummaryWriter | None = None

    def init(self, config: Any) -> None:
        self._writer = SummaryWriter(logdir=str(self.log_dir))
        if config is not None:
            self._writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)

    def write(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
