"""Convolutions as matrix products over patches (im2col), and the kernel layout they share
with ``lax.conv_general_dilated``."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def conv_patches(x: jax.Array, kernel: int, stride: int) -> jax.Array:
    """The patches of a VALID ``kernel x kernel`` convolution with ``stride`` (im2col):
    ``[N, H, W, C] -> [N, H', W', kernel^2 C]``, ``H' = (H - kernel) / stride + 1``.

    A space-to-depth reshape by ``stride`` turns the strided convolution into a stride-1 one
    with a ``q x q`` kernel, ``q = kernel / stride``, whose patches are ``q^2`` shifted slices.
    A patch's features are ordered ``(qi, qj, di, dj, c)``: the input pixel
    ``(stride qi + di, stride qj + dj, c)`` of the window (for ``stride = 1``: ``(i, j, c)``,
    a flattened ``[3, 3, C]`` window); :func:`hwio_kernel` is the matching convolution kernel.
    Needs ``kernel % stride == 0`` and ``H, W`` such that the windows tile them exactly.
    """
    n, h, w, c = x.shape
    s, q = stride, kernel // stride
    if kernel % stride or (h - kernel) % s or (w - kernel) % s:
        raise ValueError(f"conv_patches: kernel {kernel}, stride {stride} do not tile a {h}x{w} input")
    hs, ws = h // s, w // s
    x = x[:, : hs * s, : ws * s].reshape(n, hs, s, ws, s, c).transpose(0, 1, 3, 2, 4, 5)  # [N, H/s, W/s, s, s, C]
    x = x.reshape(n, hs, ws, s * s * c)
    ho, wo = (h - kernel) // s + 1, (w - kernel) // s + 1
    return jnp.concatenate([x[:, i : i + ho, j : j + wo, :] for i in range(q) for j in range(q)], axis=-1)


def hwio_kernel(matrix: jax.Array, kernel: int, stride: int) -> jax.Array:
    """The ``[kernel^2 C, F]`` matrix that multiplies :func:`conv_patches` as the
    ``[kernel, kernel, C, F]`` (HWIO) kernel of the same strided convolution."""
    s, q = stride, kernel // stride
    c, f = matrix.shape[0] // (kernel * kernel), matrix.shape[1]
    return matrix.reshape(q, q, s, s, c, f).transpose(0, 2, 1, 3, 4, 5).reshape(kernel, kernel, c, f)
