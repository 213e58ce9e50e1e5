"""Moved: the collectives and the gradient step to :mod:`evorl.rl.collectives`, the host side
of several processes to :mod:`evorl.engine.processes`; this path keeps working."""

from evorl.engine.processes import PeerLost, host_copy, initialize, is_main_process, peer_lost  # noqa: F401
from evorl.rl.collectives import (  # noqa: F401
    agent_gradient_update,
    all_gather,
    axis_index,
    pmax,
    pmean,
    pmin,
    population_cond,
    psum,
    vary,
    vary_like,
)
