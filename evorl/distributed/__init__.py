"""Collectives that are no-ops without a device axis, and the shared gradient step.

Every function takes ``axis_name``: ``None`` on one device (the collective is the
identity), or the name of the mapped device axis inside ``jax.shard_map``. One code path
therefore serves one device and many.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from jax import lax


def pmean(x: Any, axis_name: str | None = None) -> Any:
    """Mean of ``x`` over the device axis (identity when ``axis_name`` is None)."""
    return x if axis_name is None else lax.pmean(x, axis_name)


def psum(x: Any, axis_name: str | None = None) -> Any:
    """Sum of ``x`` over the device axis (identity when ``axis_name`` is None)."""
    return x if axis_name is None else lax.psum(x, axis_name)


def pmax(x: Any, axis_name: str | None = None) -> Any:
    return x if axis_name is None else lax.pmax(x, axis_name)


def axis_index(axis_name: str | None = None) -> jax.Array | int:
    """This device's index on the axis (0 when ``axis_name`` is None)."""
    return 0 if axis_name is None else lax.axis_index(axis_name)


def initialize(cfg) -> bool:
    """Starts ``jax.distributed`` for a :class:`~evorl.config.DistributedConfig` that asks for
    several processes (once per process, before any JAX computation). Returns whether this
    process is part of a multi-process run. On the CPU, collectives use gloo."""
    if not cfg.multi_process:
        return jax.process_count() > 1
    if _initialized["done"]:
        return True
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs = dict(
        heartbeat_timeout_seconds=cfg.heartbeat_timeout_seconds,
        initialization_timeout=cfg.initialization_timeout_seconds,
    )
    if not cfg.auto:
        kwargs.update(coordinator_address=cfg.coordinator_address, num_processes=cfg.num_processes,
                      process_id=cfg.process_id)
    jax.distributed.initialize(**kwargs)
    _initialized["done"] = True
    return True


_initialized = {"done": False}


def host_copy(x: Any) -> np.ndarray:
    """A NumPy copy of the whole array on the host. An array split across processes (e.g.
    their environments) is gathered first, so every process gets the same, complete array."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.array(x)


def is_main_process() -> bool:
    """Process 0 writes logs and checkpoints; the others only compute."""
    return jax.process_index() == 0


def agent_gradient_update(
    loss_fn: Callable[..., Any],
    optimizer: optax.GradientTransformation,
    axis_name: str | None = None,
    has_aux: bool = False,
) -> Callable[..., Any]:
    """Builds one optimiser step on ``agent_state.params`` for ``loss_fn``.

    ``loss_fn(agent_state, *args)`` returns a scalar loss (or ``(loss, aux)`` with
    ``has_aux``). The returned ``update(opt_state, agent_state, *args)`` computes the
    gradient with respect to ``agent_state.params`` only, averages it over ``axis_name``
    (so every device applies the same step to the same replicated parameters) and returns
    ``(loss_or_(loss, aux), agent_state, opt_state)``.
    """

    def loss_of_params(params, agent_state, *args):
        return loss_fn(agent_state.replace(params=params), *args)

    grad_fn = jax.value_and_grad(loss_of_params, has_aux=has_aux)

    def update(opt_state, agent_state, *args):
        value, grads = grad_fn(agent_state.params, agent_state, *args)
        grads = pmean(grads, axis_name)
        updates, opt_state = optimizer.update(grads, opt_state, agent_state.params)
        params = optax.apply_updates(agent_state.params, updates)
        return value, agent_state.replace(params=params), opt_state

    return update
