"""Observation and action spaces: the static shapes and bounds networks are built from."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class Box:
    """A real-valued array space with elementwise bounds ``low <= x <= high``; ``dtype`` is
    the dtype of the observations an env returns (float32, or uint8 for image frames)."""

    low: np.ndarray
    high: np.ndarray
    dtype: type = np.float32
    shape: tuple[int, ...] = field(init=False)

    def __post_init__(self):
        low = np.asarray(self.low, dtype=np.float32)
        high = np.broadcast_to(np.asarray(self.high, dtype=np.float32), low.shape)
        if np.any(low > high):
            raise ValueError(f"Box: low must be <= high, got low={low}, high={high}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", np.array(high))
        object.__setattr__(self, "shape", tuple(low.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).type)

    @property
    def is_bounded(self) -> bool:
        return bool(np.all(np.isfinite(self.low)) and np.all(np.isfinite(self.high)))

    def __repr__(self) -> str:
        return f"Box(shape={self.shape}, low={self.low.min()}, high={self.high.max()})"


@dataclass(frozen=True)
class Discrete:
    """The integers ``0, ..., n - 1``."""

    n: int

    def __post_init__(self):
        if int(self.n) < 1:
            raise ValueError(f"Discrete: n must be >= 1, got {self.n}")

    @property
    def shape(self) -> tuple[int, ...]:
        return ()


Space = Box | Discrete
