"""The app's own refusals, which are not config rules (those live in :mod:`evorl.config`):
a run folder or saved policy on disk that cannot be used, and an argument of the Python API
or a script that does not fit the run it names. Both are :class:`~evorl.config.ConfigError`
subclasses, so they reach the user as every bad input does: one line, exit code 2."""

from __future__ import annotations

from evorl.config import ConfigError


class RunFolderError(ConfigError):
    """A run folder's or a saved policy's files that cannot be used: missing, unreadable, not
    UTF-8, not the mapping they should hold, or a folder that cannot be created or written."""


class ArgumentError(ConfigError):
    """An argument that does not fit the run it applies to (``load_policy``'s ``agent`` or
    ``step``, ``evorl-eval --actions``)."""
