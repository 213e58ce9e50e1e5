"""Moved to :mod:`evorl.app.cli`; this path stays for ``evorl-train`` entry points installed
before the move."""

from evorl.app.cli import train_command, train_main  # noqa: F401
