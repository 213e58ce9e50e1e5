"""Backend-specific fast paths, chosen in one place: each used where it is measured to pay.

The rest of evorl calls this module for random keys (:func:`fast_key`, :func:`raw_key`,
:func:`permutation`), for the convolution of its image torsos (:class:`Conv`) and for the
garbage collector around a run (:func:`imports_frozen`). Each has a *plain* path, what
single-file JAX code writes (``jax.random`` with JAX's own PRNG, ``lax.conv_general_dilated``,
the collector as it is), which is the reference the *fast* path is tested against:

========  ==========================================  ==============  =======================
path      fast                                        fast on         tested
========  ==========================================  ==============  =======================
random    Threefry written round by round             cpu             same bits as JAX's
          (:mod:`~evorl.hardware.threefry`), the      (gpu/tpu:       (``tests/test_prng.py``,
          shuffles by a one-operand sort              plain)          a whole PPO run too)
conv      a matrix product over patches               cpu             equal to ``lax.conv``
          (:mod:`~evorl.hardware.im2col`)             (gpu/tpu:       within float tolerance
                                                      plain)          (``tests/test_hardware.py``)
gc        ``gc.freeze()`` of the import-time heap     every backend   the heap left as found
          during a run                                (host side)     (``test_deferred_imports``)
gather    shuffles by a sort on the inverse           tpu             bit for bit equal to
          permutation, ``x[..., a]`` by a mask        (cpu/gpu:       the gather
          (:mod:`~evorl.hardware.sort_gather`)        plain)          (``tests/test_hardware.py``)
========  ==========================================  ==============  =======================

Why, measured on the CPU backend (the runs: ``git show dc471e3:benchmarks/README.md``, "Speed-ups
kept" and "The default job from a cold start"; ``benchmarks/README.md``, "The scripts", has the
commands):

* **random**: JAX lowers its Threefry hash on the CPU as a ``fori_loop`` over the five round
  groups, an XLA while loop of ~20 small kernels per group for every split, fold-in and draw;
  the fused generator is one elementwise kernel per call. 20,000 steps of 4 gymnax CartPoles
  with random actions: 5.60 us per step plain, 2.48 us fast; in the PPO CartPole iteration env
  stepping 3-4x and the shuffles 3.3x faster (XLA's CPU sort of 512 keys alone: 12.6 us,
  with a payload: 62.8 us). On a GPU or TPU JAX's Threefry is already one fused kernel and
  the sort is not XLA's CPU sort, so the plain path is used there until measured otherwise
  (``benchmarks/device_check.sh``).
* **conv**: XLA's CPU convolutions and their gradients are slow for small images; the
  MinAtar PPO run (16-channel 3x3 on 10x10) was 7.2x faster with im2col in the single-file
  reference (``ppo_throughput.py --task breakout-cnn``). On a GPU, XLA's convolutions
  (cuDNN) are the fast path.
* **gather**: a TPU runs XLA's gather one element at a time. PPO on CartPole with 1024 seeds
  in one program spent ~80% of its device time in the minibatch shuffles' gathers and the
  action log-probabilities' (``jax.profiler``, ``benchmarks/tpu_scale.py --profile``). On a
  CPU the gather is the cheaper op, so the plain path stays there.
* **gc**: tracing and compiling allocate millions of Python objects; each full collection
  walked the whole import-time heap (the default job: 0.55 s of its 0.68 s of collections,
  0.29 s frozen). This is host-side work on every backend.

Measured with this module on a shared 2-core CPU:
the PPO CartPole iteration 16.96 ms plain, 8.04 ms fast (x2.09;
``benchmarks/hardware_paths.py``); whole MinAtar PPO runs 4.9-7.1x faster on the fast path
(``benchmarks/device_check.sh --quick``), brax ant 1.9x. The same runs on a GPU: not yet
measured (``benchmarks/device_check.sh``); until then the GPU/TPU choice is JAX's own paths.

The parameters are the same on both conv paths (a ``[k^2 C, F]`` kernel and a bias per
layer, so a checkpoint written on one loads on the other): the plain path reshapes the
kernel to HWIO (:func:`~evorl.hardware.im2col.hwio_kernel`).

**Overrides** (tests, benchmarks): the environment variable ``EVORL_FAST_PATHS`` (``auto``,
the default: by backend as above; ``all``; ``none``; or a comma-separated list of the paths
to make fast, e.g. ``random,gc``), read when a program is traced, and the context manager
:func:`use_fast_paths`, which takes precedence. Programs take the choice when they are
traced, so build and compile inside the block.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evorl.hardware import im2col, sort_gather, threefry

#: The paths, and the backends (``jax.default_backend()``) on which each is fast by default.
FAST_ON: dict[str, tuple[str, ...]] = {
    "random": ("cpu",),
    "conv": ("cpu",),
    "gc": ("cpu", "gpu", "cuda", "rocm", "tpu"),
    "gather": ("tpu",),
}
ENV_VAR = "EVORL_FAST_PATHS"
#: :func:`use_fast_paths`' settings: process-wide, not per thread (workflows trace some
#: programs in helper threads, e.g. the evaluator compiles beside the chunk).
_override: dict[str, bool] = {}


def _from_env(path: str) -> bool | None:
    value = os.environ.get(ENV_VAR, "auto").strip().lower()
    if value in ("", "auto"):
        return None
    if value in ("all", "fast"):
        return True
    if value in ("none", "plain"):
        return False
    names = {name.strip() for name in value.split(",") if name.strip()}
    if unknown := names - set(FAST_ON):
        raise ValueError(f"{ENV_VAR}={value!r}: unknown path(s) {', '.join(sorted(unknown))} "
                         f"(auto, all, none, or a list of {', '.join(FAST_ON)})")
    return path in names


def is_fast(path: str) -> bool:
    """Whether ``path`` (``"random"``, ``"conv"``, ``"gc"``, ``"gather"``) takes its fast path now: the
    :func:`use_fast_paths` setting, else ``EVORL_FAST_PATHS``, else by backend (:data:`FAST_ON`).
    The fused keys also need ``jax_threefry_partitionable`` (JAX's default; without it JAX's
    bits differ)."""
    enabled = _override.get(path)
    if enabled is None:
        enabled = _from_env(path)
    if enabled is None:
        enabled = jax.default_backend() in FAST_ON[path]
    if path == "random":
        enabled = enabled and bool(jax.config.jax_threefry_partitionable)
    return bool(enabled)


@contextlib.contextmanager
def use_fast_paths(enabled: bool | None = None, **paths: bool | None) -> Iterator[None]:
    """Within the block, every path (``enabled``) or the named ones (``random=``, ``conv=``,
    ``gc=``) take their fast (True) or plain (False) path; None leaves a path to the
    default."""
    if unknown := set(paths) - set(FAST_ON):
        raise TypeError(f"use_fast_paths: unknown path(s) {', '.join(sorted(unknown))}")
    settings = {path: paths.get(path, enabled) for path in FAST_ON}
    previous = dict(_override)
    _override.update({path: bool(v) for path, v in settings.items() if v is not None})
    try:
        yield
    finally:
        _override.clear()
        _override.update(previous)


# ---- random ------------------------------------------------------------------------------

def fast_key(key: jax.Array) -> jax.Array:
    """The key a compiled step draws from: on the fast path ``key`` wrapped as a
    :data:`~evorl.hardware.threefry.FAST_THREEFRY` key (the same bits), else ``key`` itself.
    States and checkpoints keep raw ``uint32[2]`` keys (:func:`raw_key`)."""
    return threefry.wrap(key) if is_fast("random") else key


def raw_key(key: jax.Array) -> jax.Array:
    """The ``uint32[..., 2]`` data of a typed key; anything else is returned as it is."""
    return threefry.raw(key)


def permutation(key: jax.Array, n: int) -> jax.Array:
    """``jax.random.permutation(key, n)``: the same integers on both paths."""
    return threefry.permutation(key, n) if is_fast("random") else jax.random.permutation(key, n)


# ---- gather ------------------------------------------------------------------------------

def take_permuted(tree: Any, perm: jax.Array, axis: int = 0) -> Any:
    """Every leaf of ``tree`` reordered along ``axis`` by the permutation ``perm``:
    ``jnp.take(x, perm, axis)``; the fast path sorts instead of gathering (same values)."""
    if is_fast("gather"):
        return sort_gather.permute_by_sort(tree, perm, axis)
    return jax.tree.map(lambda x: jnp.take(x, perm, axis=axis), tree)


def take_along_last(x: jax.Array, index: jax.Array) -> jax.Array:
    """``x[..., index]`` per row (``x [..., K]``, integer ``index [...]``): on the fast path
    a masked sum instead of a gather (same values and gradients)."""
    if is_fast("gather"):
        return sort_gather.pick_by_mask(x, index)
    return jnp.take_along_axis(x, index[..., None].astype(jnp.int32), axis=-1)[..., 0]


# ---- conv --------------------------------------------------------------------------------

class Conv(nn.Module):
    """A VALID ``kernel_size x kernel_size`` convolution with ``stride``: ``[N, H, W, C] ->
    [N, H', W', features]``. Parameters ``kernel [kernel_size^2 C, features]`` (the
    :func:`~evorl.hardware.im2col.conv_patches` order) and ``bias [features]``, declared as
    ``nn.Dense`` declares them (the same initial values). Fast path: ``nn.Dense``'s product
    over the patches; plain: ``lax.conv_general_dilated`` with the kernel as HWIO."""

    features: int
    kernel_size: int = 3
    stride: int = 1
    kernel_init: Callable = nn.initializers.orthogonal(np.sqrt(2))

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k, s = self.kernel_size, self.stride
        kernel = self.param("kernel", self.kernel_init, (k * k * x.shape[-1], self.features), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
        x, kernel, bias = nn.dtypes.promote_dtype(x, kernel, bias)
        if is_fast("conv"):
            y = lax.dot_general(im2col.conv_patches(x, k, s), kernel, (((3,), (0,)), ((), ())))
        else:
            y = lax.conv_general_dilated(x, im2col.hwio_kernel(kernel, k, s), (s, s), "VALID",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return y + jnp.reshape(bias, (1, 1, 1, -1))


# ---- gc ----------------------------------------------------------------------------------

@contextlib.contextmanager
def imports_frozen() -> Iterator[None]:
    """On the fast path, the objects that exist when the block starts (the imported
    libraries) are left out of the cyclic garbage collector's passes (``gc.freeze``) until it
    ends (``gc.unfreeze``). A process that already froze its heap keeps its own setting."""
    if gc.get_freeze_count() or not is_fast("gc"):
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
