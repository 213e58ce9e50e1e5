"""Collectives that are no-ops without a device axis, and the shared gradient step.

Every function takes ``axis_name``: ``None`` on one device (the collective is the
identity), or the name of the mapped device axis inside ``jax.shard_map``. One code path
therefore serves one device and many. :func:`population_cond` does the same for the
population's axis (the ``vmap`` over agents).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from jax import lax

from evorl.peer_watch import JAX_GRACE_SECONDS, peer_lost_message, process_name, start_watch


def pmean(x: Any, axis_name: str | None = None) -> Any:
    """Mean of ``x`` over the device axis (identity when ``axis_name`` is None)."""
    return x if axis_name is None else lax.pmean(x, axis_name)


def psum(x: Any, axis_name: str | None = None) -> Any:
    """Sum of ``x`` over the device axis (identity when ``axis_name`` is None)."""
    return x if axis_name is None else lax.psum(x, axis_name)


def pmax(x: Any, axis_name: str | None = None) -> Any:
    """Maximum of ``x`` over the device axis (identity when ``axis_name`` is None)."""
    return x if axis_name is None else lax.pmax(x, axis_name)


def pmin(x: Any, axis_name: str | None = None) -> Any:
    """Minimum of ``x`` over the device axis (identity when ``axis_name`` is None)."""
    return x if axis_name is None else lax.pmin(x, axis_name)


def all_gather(x: jax.Array, axis_name: str | None = None) -> jax.Array:
    """Every device's ``x [n, ...]`` concatenated in device order ``[D * n, ...]`` (identity
    when ``axis_name`` is None). Computed as a ``psum`` of each device's block placed in zeros,
    which is exact and which JAX knows to be the same on every device."""
    if axis_name is None:
        return x
    n = x.shape[0]
    blocks = jax.numpy.zeros((lax.axis_size(axis_name) * n,) + x.shape[1:], x.dtype)
    return lax.psum(lax.dynamic_update_slice_in_dim(blocks, x, lax.axis_index(axis_name) * n, 0), axis_name)


def vary(tree: Any, axis_name: str | None = None) -> Any:
    """Every leaf of ``tree`` marked as varying over the device axis (those the same on every
    device, e.g. a loop carry's initial value that per-device values will replace); identity
    when ``axis_name`` is None."""
    if axis_name is None:
        return tree

    def varying(x):
        return x if axis_name in jax.typeof(x).manual_axis_type.varying else lax.pcast(x, axis_name, to="varying")

    return jax.tree.map(varying, tree)


def vary_like(tree: Any, like: Any) -> Any:
    """``tree`` with each leaf marked varying over the device axes its counterpart in ``like``
    (a tree of the same structure) varies over. A loop's new carry computed partly from
    constants, e.g. the ``terminated`` flags of an env that never terminates (gymnax
    Pendulum), is the same on every device, so JAX types it invariant while the carry that went
    in varies; outside ``jax.shard_map`` nothing varies and ``tree`` is returned as it is."""

    def cast(x, ref):
        missing = jax.typeof(ref).manual_axis_type.varying - jax.typeof(x).manual_axis_type.varying
        return lax.pcast(x, tuple(sorted(missing)), to="varying") if missing else x

    return jax.tree.map(cast, tree, like)


def population_cond(pred: jax.Array, true_fn: Callable, false_fn: Callable, *operands, axis_name: str | None = None):
    """``lax.cond(pred, true_fn, false_fn, *operands)`` for each agent of a population vmapped
    over ``axis_name`` (the executor's population axis; None: one agent, a plain ``lax.cond``).

    Under ``vmap`` a cond on a per-agent predicate becomes a select that computes both branches
    for every agent: a population would pay for the gradient steps of an off-policy agent
    before its learning starts. Here the branch is taken when the predicate holds for **any**
    agent (``pmax`` over the population axis: one value for all, so the cond stays a branch),
    and each agent then keeps ``true_fn``'s outputs where its own ``pred`` holds and
    ``false_fn``'s elsewhere: the same values as the select, computed only when one is needed
    (a predicate shared by all agents, such as the learning start, costs nothing more)."""
    if axis_name is None:
        return lax.cond(pred, true_fn, false_fn, *operands)

    def per_agent(*args):
        return jax.tree.map(lambda t, f: jax.numpy.where(pred, t, f), true_fn(*args), false_fn(*args))

    some = lax.pmax(pred.astype(jax.numpy.int32), axis_name) > 0
    return lax.cond(some, per_agent, false_fn, *operands)


def axis_index(axis_name: str | None = None) -> jax.Array | int:
    """This device's index on the axis (0 when ``axis_name`` is None)."""
    return 0 if axis_name is None else lax.axis_index(axis_name)


def initialize(cfg) -> bool:
    """Starts ``jax.distributed`` for a :class:`~evorl.config.DistributedConfig` that asks for
    several processes (once per process, before any JAX computation), and the watch of the
    other processes' heartbeats (:mod:`evorl.peer_watch`). Returns whether this
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
    # JAX's own watch aborts with a C++ stack trace: ours (peer_watch) acts first
    kwargs["heartbeat_timeout_seconds"] = cfg.heartbeat_timeout_seconds + JAX_GRACE_SECONDS
    jax.distributed.initialize(**kwargs)
    _initialized["done"] = True
    from jax._src.distributed import global_state  # the coordination client (no public handle)

    start_watch(global_state.client, jax.process_index(), jax.process_count(), cfg.heartbeat_timeout_seconds)
    return True


_initialized = {"done": False}


def host_copy(x: Any) -> np.ndarray:
    """A NumPy copy of the whole array on the host. An array split across processes (e.g.
    their environments) is gathered first, so every process gets the same, complete array."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.array(x)


class PeerLost(RuntimeError):
    """Another process of a multi-process run stopped responding (it died, or its host did), so
    the collectives cannot go on. JAX cannot shut down cleanly after this (its shutdown barrier
    waits for the lost process, then aborts): leave the process with ``os._exit``, as
    ``evorl-train`` does."""


#: Parts of the messages of errors of the collectives (gloo on CPUs, NCCL on GPUs) and of the
#: coordination service, and the signs among them that a peer is gone, the most telling first.
COLLECTIVE_ERRORS = ("Gloo", "NCCL", "coordination service", "heartbeat")
PEER_LOST_SIGNS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "heartbeat timeout",
                   "Socket closed")


def peer_lost(error: BaseException | None, run_dir: Any = None) -> PeerLost | None:
    """The :class:`PeerLost` that ``error`` means, or None: in a multi-process run, an error of a
    collective (JAX raises them as ``JaxRuntimeError`` or ``ValueError``) that names a lost
    connection or missed heartbeats; or an error raised because of one (orbax's checkpoint
    thread raises a ``TimeoutError`` from the coordination service's error), so the chain of
    causes is read too. Its message names the ``resume=`` of ``run_dir``, the run's folder."""
    if error is None or jax.process_count() == 1:
        return None
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        chain.append(str(error))
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    text = next((t for t in chain if any(name in t for name in COLLECTIVE_ERRORS)
                 and any(s in t for s in PEER_LOST_SIGNS)), None)
    if text is None:
        return None
    sign = next(s for s in PEER_LOST_SIGNS if s in text)
    count, index = jax.process_count(), jax.process_index()
    who = process_name(1 - index) if count == 2 else f"one of the other {count - 1} processes (of {count})"
    return PeerLost(peer_lost_message(who, sign, run_dir))


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
    ``(loss_or_(loss, aux), agent_state, opt_state)``. When ``aux`` is a dict of metrics, it
    gains ``grad_norm``: the global norm :math:`\\|g\\|_2` of the averaged gradient before the
    optimiser clips it (the number that tells a clipped step from a free one).
    """

    def loss_of_params(params, agent_state, *args):
        return loss_fn(agent_state.replace(params=params), *args)

    grad_fn = jax.value_and_grad(loss_of_params, has_aux=has_aux)

    def update(opt_state, agent_state, *args):
        value, grads = grad_fn(agent_state.params, agent_state, *args)
        grads = pmean(grads, axis_name)
        if has_aux and isinstance(value[1], dict):
            value = (value[0], {**value[1], "grad_norm": optax.tree.norm(grads)})
        updates, opt_state = optimizer.update(grads, opt_state, agent_state.params)
        params = optax.apply_updates(agent_state.params, updates)
        return value, agent_state.replace(params=params), opt_state

    return update
