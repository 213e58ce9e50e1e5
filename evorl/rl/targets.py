"""Every return target of evorl, importable from one place; each lives in the module of the
algorithms that use it, the equation in its docstring:

* on-policy (:mod:`evorl.rl.gae`): :func:`compute_gae` (PPO, A2C), :func:`normalize_advantages`,
  :func:`explained_variance`;
* V-trace (:mod:`evorl.rl.vtrace`): :func:`compute_vtrace` and :func:`compute_pg_advantage` (IMPALA);
* off-policy (:mod:`evorl.rl.q_targets`): :func:`n_step_transitions` (the n-step reward sums and
  bootstrap discounts a replay buffer stores, :class:`Transition`), and the bootstrapped
  Q-targets of DQN (:func:`double_q_targets`), TD3/DDPG (:func:`clipped_double_q_targets`) and
  SAC (:func:`soft_q_targets`).
"""

from evorl.rl.gae import check_time_major, compute_gae, explained_variance, normalize_advantages
from evorl.rl.q_targets import (
    Transition, clipped_double_q_targets, double_q_targets, n_step_transitions, soft_q_targets,
)
from evorl.rl.vtrace import compute_pg_advantage, compute_vtrace

__all__ = [
    "check_time_major", "compute_gae", "explained_variance", "normalize_advantages",
    "Transition", "clipped_double_q_targets", "double_q_targets", "n_step_transitions", "soft_q_targets",
    "compute_pg_advantage", "compute_vtrace",
]
