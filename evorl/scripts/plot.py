"""Moved to :mod:`evorl.app.scripts.plot`."""

from evorl.app.scripts.plot import main  # noqa: F401
