"""Moved to :mod:`evorl.app.scripts.evaluate`."""

from evorl.app.scripts.evaluate import main  # noqa: F401
