"""Moved to :mod:`evorl.app.scripts`; these paths stay for ``evorl-eval`` and ``evorl-plot``
entry points installed before the move."""
