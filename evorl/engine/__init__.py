"""The engine: how an iteration of :mod:`evorl.rl` runs (the fused executor, the
actor-learner, PBT, health checks, the evaluator) and the host loop that drives it. Imports
``evorl.rl`` and the foundation, never ``evorl.algorithms`` or ``evorl.app``."""
