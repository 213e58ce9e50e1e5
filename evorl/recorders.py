"""Recorders receive host-side metric dicts at logging points (never inside the hot loop)."""

from __future__ import annotations

import math
import sys
from typing import Any, Protocol


class Recorder(Protocol):
    def init(self, config: Any) -> None: ...

    def write(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


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

    def init(self, config: Any) -> None:
        pass

    def write(self, metrics: dict[str, float], step: int) -> None:
        parts = [
            f"{label}={_fmt(metrics[key])}" + (f"±{_fmt(metrics[key + '/std'])}" if key + "/std" in metrics else "")
            for key, label in self.COLUMNS.items() if key in metrics
        ]
        print(f"{self.prefix}{' '.join(parts)}", file=self.stream, flush=True)

    def close(self) -> None:
        pass
