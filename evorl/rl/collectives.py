"""Collectives that are no-ops without a device axis, and the shared gradient step.

(The host side of several processes, ``initialize``, ``PeerLost``, ``is_main_process`` and
``host_copy``, is :mod:`evorl.engine.processes`.)

Every function takes ``axis_name``: ``None`` on one device (the collective is the
identity), or the name of the mapped device axis inside ``jax.shard_map``. One code path
therefore serves one device and many. :func:`population_cond` does the same for the
population's axis (the ``vmap`` over agents).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import optax
from jax import lax


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
