"""Moved to :mod:`evorl.rl.targets` (every return target in one module); this path keeps working."""

from evorl.rl.targets import (  # noqa: F401
    check_time_major,
    compute_gae,
    compute_pg_advantage,
    compute_vtrace,
    explained_variance,
    normalize_advantages,
)
