"""A replay buffer that lives in the training state, and n-step transitions to fill it.

:class:`ReplayBuffer` is a pytree of fixed-capacity arrays, an insert position and a fill
count, so it is carried, vmapped over a population and checkpointed like any other part of
the training state. Its slots are numbered ``0 .. capacity - 1`` and stored in rows of
``width`` (leaves ``[capacity / width, width, ...]``, slot ``g`` at row ``g // width``, column
``g % width``). A rollout of ``B`` environments adds ``T x B`` transitions ordered time-major,
so with ``width = B`` each row holds one step of every environment: the environments' axis is
the column axis, which several devices can split (each holding its environments' columns)
while the slots stay those of one device. Every function here is pure:

* :func:`init` allocates the arrays from one example transition;
* :func:`add` writes a batch ``[N, ...]`` (``N`` a multiple of the width) at the insert
  position, circularly (the oldest rows are overwritten once the buffer is full);
* :func:`sample` draws ``batch_size`` slots uniformly, with replacement, from the filled part.

With ``axis_name`` (inside ``jax.shard_map`` over devices that split the columns), ``add``
takes this device's columns of the batch and ``sample`` returns on every device the same
batch that one device holding the whole buffer would draw: each device reads the drawn slots
it holds and a ``psum`` assembles them (``batch_size`` transitions cross the devices).

A transition stores what a one-step or n-step Q-learning target needs (:class:`Transition`):
``reward`` is the discounted sum of the window's rewards and ``discount`` the factor of the
bootstrap value at ``next_obs``. :func:`n_step_transitions` computes them from a ``[T, B]``
rollout before insertion; an episode that ends inside the window closes it, a termination with
``discount = 0``, a truncation (time limit) with the bootstrap from its real final observation.

(flashbax 0.1.3 installs beside jax 0.10 and its buffers run; its flat buffer samples
``(s_t, s_{t+1})`` pairs along each environment's time axis, whose second item is the reset
observation where an episode ends, so the final observation and the n-step sums would be
stored anyway and half of each sample read for nothing. Its item buffer is this module's
buffer behind a dependency; the ~40 lines here keep ``sample`` a function of
``(buffer, key, batch_size)``.)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jax import lax

from evorl.rl.q_targets import Transition, n_step_transitions  # noqa: F401  (the n-step targets live there)


@struct.dataclass
class ReplayBuffer:
    data: Any  # the stored transitions, leaves [capacity / width, width, ...] (this device's columns)
    position: jax.Array  # [] int32: the slot where the next transition is written (a multiple of the width)
    size: jax.Array  # [] int32: how many slots hold a transition (<= capacity)

    @property
    def rows(self) -> int:
        return jax.tree.leaves(self.data)[0].shape[0]

    @property
    def width(self) -> int:
        """Columns per row held here (this device's share of them inside ``shard_map``)."""
        return jax.tree.leaves(self.data)[0].shape[1]

    @property
    def capacity(self) -> int:
        """Slots held here (the whole buffer's outside ``shard_map``)."""
        return self.rows * self.width


def init(example: Any, capacity: int, width: int = 1) -> ReplayBuffer:
    """An empty buffer of ``capacity`` slots, in rows of ``width``, for transitions shaped like
    ``example`` (a pytree of one transition's arrays, no batch axis)."""
    if capacity < 1:
        raise ValueError(f"replay buffer capacity must be >= 1, got {capacity}")
    if width < 1 or capacity % width:
        raise ValueError(f"replay buffer capacity {capacity} must be a multiple of its row width {width} "
                         f"(one transition per environment and step)")
    data = jax.tree.map(lambda x: jnp.zeros((capacity // width, width) + jnp.shape(x), jnp.asarray(x).dtype), example)
    return ReplayBuffer(data=data, position=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32))


def _devices(axis_name: str | None) -> int:
    return 1 if axis_name is None else lax.axis_size(axis_name)


def add(buffer: ReplayBuffer, batch: Any, axis_name: str | None = None) -> ReplayBuffer:
    """``buffer`` with the ``N`` transitions of ``batch`` (leaves ``[N, ...]``, ``N`` a multiple
    of the width, at most the capacity) written at slots ``position, position + 1, ...`` modulo
    the capacity: ``N / width`` whole rows. With ``axis_name``, ``batch`` holds this device's
    columns of each row (``N / width`` rows of ``width`` columns here) and the position and
    size count the whole buffer's slots."""
    width, rows = buffer.width, buffer.rows
    num_new = jax.tree.leaves(batch)[0].shape[0]
    if num_new > rows * width:
        raise ValueError(f"replay.add: a batch of {num_new} transitions does not fit a buffer of {rows * width}")
    if num_new % width:
        raise ValueError(f"replay.add: a batch of {num_new} transitions is not whole rows of {width} (one "
                         f"transition per environment)")
    total_width = width * _devices(axis_name)
    new_rows = (buffer.position // total_width + jnp.arange(num_new // width)) % rows  # [N / width]
    data = jax.tree.map(lambda stored, new: stored.at[new_rows].set(
        new.reshape((num_new // width, width) + new.shape[1:]).astype(stored.dtype)), buffer.data, batch)
    capacity, added = rows * total_width, num_new * _devices(axis_name)
    return ReplayBuffer(data=data, position=(buffer.position + added) % capacity,
                        size=jnp.minimum(buffer.size + added, capacity))


def sample(buffer: ReplayBuffer, key: jax.Array, batch_size: int, axis_name: str | None = None) -> Any:
    """``batch_size`` transitions (leaves ``[batch_size, ...]``) drawn uniformly with
    replacement from the filled slots ``[0, size)``. An empty buffer returns slot 0's zeros.
    With ``axis_name``: the same draw on every device, each device contributing the slots in
    its columns (the others' entries are zeros in its sum)."""
    slots = jax.random.randint(key, (batch_size,), 0, jnp.maximum(buffer.size, 1))  # [batch_size]
    width = buffer.width
    rows, columns = jnp.divmod(slots, width * _devices(axis_name))  # in the whole buffer
    if axis_name is None:
        return jax.tree.map(lambda stored: stored[rows, columns], buffer.data)
    held = columns // width == lax.axis_index(axis_name)  # [batch_size]

    def gather(stored):
        mine = stored[rows, columns % width]
        mine = jnp.where(held.reshape((-1,) + (1,) * (mine.ndim - 1)), mine, jnp.zeros((), mine.dtype))
        if mine.dtype == jnp.bool_:  # psum has no booleans: one device holds each slot, so the sum is exact
            return lax.psum(mine.astype(jnp.int32), axis_name).astype(jnp.bool_)
        return lax.psum(mine, axis_name)

    return jax.tree.map(gather, buffer.data)
