"""Moved to :mod:`evorl.rl.rollout`; this path keeps working."""

from evorl.rl.rollout import (  # noqa: F401
    EpisodeStats,
    Trajectory,
    feed_forward_only,
    reset_policy_state,
    rollout,
    rollout_with_policy_state,
    rows_finite,
)
