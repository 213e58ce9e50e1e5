"""Parameter initialisers whose ``vmap`` is a loop.

:func:`orthogonal` is Flax's orthogonal initialiser (the same values) with one difference:
under ``jax.vmap`` (a critic ensemble, a population) it factorises one matrix after another
(``lax.map``) instead of one batched QR. jaxlib 0.10's CPU QR kernel splits a batch over
XLA's intra-op thread pool and blocks its own pool thread until the parts are done; when every
pool thread runs such a kernel at once (two devices of a 2-core CPU each initialising twin
256x256 critics), nothing is left to run the parts and the program hangs forever at 0% CPU.
One matrix at a time, the kernel never waits on the pool.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax
from jax import lax


def unbatched(initializer: Callable) -> Callable:
    """``initializer(key, shape, dtype)`` computed for one key at a time under ``vmap`` (the
    keys batched, ``lax.map`` over them); the values are those of the initialiser itself."""

    def init(key: jax.Array, shape, dtype=jax.numpy.float32) -> jax.Array:
        @jax.custom_batching.custom_vmap
        def one(key):
            return initializer(key, shape, dtype)

        @one.def_vmap
        def one_at_a_time(axis_size, in_batched, key):
            if not in_batched[0]:
                return one(key), False
            return lax.map(one, key), True

        return one(key)

    return init


def orthogonal(scale: float = 1.0) -> Callable:
    """Flax's ``nn.initializers.orthogonal(scale)``, one QR factorisation at a time under
    ``vmap`` (see the module docstring)."""
    return unbatched(nn.initializers.orthogonal(scale))
