"""Implementations of the ``evorl-eval`` and ``evorl-plot`` commands (``scripts/`` wraps them)."""
