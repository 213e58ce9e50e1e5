"""Threefry-2x32 keys whose hash compiles to one fused kernel: the same bits as ``jax.random``.

JAX's default PRNG is Threefry-2x32 (Salmon et al., 2011): a key ``(k0, k1)`` and a 64-bit
counter ``(x0, x1)`` give two 32-bit words after 20 rounds of

    x0 <- x0 + x1;   x1 <- rotl(x1, r) ^ x0          (r cycles through [13, 15, 26, 6] and
                                                      [17, 29, 16, 24])

with the key schedule ``ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)`` injected after every four
rounds (``x0 += ks[(s + 1) % 3]``, ``x1 += ks[(s + 2) % 3] + s + 1`` after group ``s``).
On the CPU backend JAX lowers this hash as a ``fori_loop`` over the five groups (to keep
compile times down): every call is an XLA while loop of about twenty small kernels per group.

:data:`FAST_THREEFRY` is the same generator, written out round by round as plain array
operations, which XLA fuses into one elementwise kernel per call. ``seed``, ``split``,
``fold_in`` and ``random_bits`` follow JAX's ``threefry2x32`` implementation (with
``jax_threefry_partitionable``, JAX's default), so every ``jax.random`` function gives
**bit-identical** results for a key wrapped with :func:`wrap` and for the raw key
(``tests/test_prng.py`` checks splits, fold-ins, bits of every width, uniforms, normals,
categorical draws and permutations, and a whole PPO run). :func:`permutation` is
``jax.random.permutation`` with a one-operand sort.

Whether evorl uses these is decided by :mod:`evorl.hardware` (per backend, with the
measurements); nothing outside it calls this module.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import random as jex_random

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def threefry2x32_hash(k0: jax.Array, k1: jax.Array, x0: jax.Array, x1: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The Threefry-2x32 block function with 20 rounds, unrolled (module docstring); all
    arguments ``uint32``, ``x0`` and ``x1`` of one shape, ``k0`` and ``k1`` broadcastable."""
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0 = x0 + ks[0]
    x1 = x1 + ks[1]
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = (lax.shift_left(x1, np.uint32(r)) | lax.shift_right_logical(x1, np.uint32(32 - r))) ^ x0
        x0 = x0 + ks[(group + 1) % 3]
        x1 = x1 + ks[(group + 2) % 3] + np.uint32(group + 1)
    return x0, x1


def _counters(shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """The row-major index of every element of ``shape`` as a 64-bit counter ``(hi, lo)``."""
    size = math.prod(shape)
    if size >= 2**32:
        raise NotImplementedError(f"evorl.prng: {size} random words in one call (at most 2**32 - 1)")
    lo = lax.iota(np.uint32, size).reshape(shape)
    return jnp.zeros(shape, np.uint32), lo


def _split(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    hi, lo = _counters(tuple(shape))
    b0, b1 = threefry2x32_hash(key[0], key[1], hi, lo)
    return jnp.stack([b0, b1], axis=b0.ndim)  # [*shape, 2]


def _fold_in(key: jax.Array, data: jax.Array) -> jax.Array:
    seed = _seed(jnp.asarray(data, np.uint32))  # [2]
    b0, b1 = threefry2x32_hash(key[0], key[1], seed[:1], seed[1:])
    return jnp.concatenate([b0, b1])


def _random_bits(key: jax.Array, bit_width: int, shape: tuple[int, ...]) -> jax.Array:
    if bit_width not in (8, 16, 32, 64):
        raise TypeError(f"evorl.prng: random bits of width {bit_width} (8, 16, 32 or 64)")
    hi, lo = _counters(tuple(shape))
    b0, b1 = threefry2x32_hash(key[0], key[1], hi, lo)
    dtype = np.dtype(f"uint{bit_width}")
    if bit_width == 64:
        return lax.shift_left(b0.astype(dtype), jnp.asarray(32, dtype)) | b1.astype(dtype)
    return (b0 ^ b1).astype(dtype)


_seed = jex_random.threefry_prng_impl.seed  # no hash in it: JAX's own

FAST_THREEFRY = jex_random.define_prng_impl(
    key_shape=(2,), seed=_seed, split=_split, random_bits=_random_bits, fold_in=_fold_in,
    name="threefry2x32_fused", tag="fyf",
)

def wrap(key: jax.Array) -> jax.Array:
    """``key`` (raw ``uint32[..., 2]`` or typed) as a typed key of :data:`FAST_THREEFRY` with
    the same bits; a typed key is returned as it is."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key, impl=FAST_THREEFRY)


def stable_argsort_u32(bits: jax.Array) -> jax.Array:
    """``lax.sort_key_val(bits, arange(n))[1]`` for ``uint32`` ``bits [n]``: the stable argsort.

    XLA's CPU sort is several times faster for one ``uint32`` operand than for a key and a
    payload (figures in :mod:`evorl.hardware`). With distinct keys the rank of ``bits[i]`` is
    its left insertion point in ``sort(bits)``, so ``perm[rank[i]] = i``. Equal keys (probability about n^2 / 2^33) take
    the key-payload sort, so the result is exact in every case.
    """
    n = bits.shape[0]
    ordered = jnp.sort(bits)  # [n]
    index = jnp.arange(n, dtype=jnp.int32)

    def distinct(_):
        rank = jnp.searchsorted(ordered, bits, side="left")  # [n]
        return jnp.zeros(n, jnp.int32).at[rank].set(index, unique_indices=True)

    def with_ties(_):
        return lax.sort_key_val(bits, index)[1]

    return lax.cond(jnp.any(ordered[1:] == ordered[:-1]), with_ties, distinct, None)


def permutation(key: jax.Array, n: int) -> jax.Array:
    """``jax.random.permutation(key, n)``, the same integers, with :func:`stable_argsort_u32`
    in place of the key-payload sort; raw or typed ``key``.

    JAX shuffles ``arange(n)`` by ``ceil(3 ln n / ln(2^32 - 1))`` rounds (one for n < 1625)
    of a stable sort on fresh random ``uint32`` keys; so does this.
    """
    key = wrap(key)
    x = jnp.arange(n, dtype=jnp.int32)
    rounds = int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        key, subkey = jax.random.split(key)
        x = x[stable_argsort_u32(jax.random.bits(subkey, (n,), jnp.uint32))]
    return x


def raw(key: jax.Array) -> jax.Array:
    """The ``uint32[..., 2]`` data of ``key``; anything else (a raw key, any other array or
    value) is returned as it is."""
    dtype = getattr(key, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key
