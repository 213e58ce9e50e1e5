"""gymnax MinAtar observations built without scattering into boolean arrays.

gymnax draws the observation of Breakout, Freeway and SpaceInvaders by setting cells of a
boolean array at the objects' places (``obs.at[y, x, c].set(True)``). Under ``vmap``, with places
that differ across the batch, a TPU computes such a scatter wrongly once the batch is large
(jax-ml/jax#38005, open): on a TPU v5e, Freeway played in eight agents' evaluation shape
(``[8, 128]`` envs) loses set cells, while 16 envs match the CPU bit for bit
(``benchmarks/backend_agreement.py``), and PPO trained on those observations stopped at ~51
where the same agents, trained two to a program, reach 60.

Here each plane is an OR of one-hot comparisons, which no backend gets wrong: the same values as
gymnax's (``tests/test_minatar_obs.py`` checks bit for bit on the CPU, over states from play),
with no scatter. Asterix (an int32 canvas) and Seaquest (a float32 one) keep gymnax's. On a
2-core CPU a PPO Freeway iteration runs as fast either way (14.3k and 14.9k env steps/s with
gymnax's, 14.3k and 14.7k with these, alternating runs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def cells(shape: tuple[int, ...], *index: jax.Array) -> jax.Array:
    """A boolean array of ``shape``, True at each place ``(index[0][k], index[1][k], ...)``
    (each ``index[d]`` ``[K]``), as ``zeros(shape, bool).at[index].set(True)`` gives: a negative
    index counts from the end, one out of range sets nothing."""
    if not shape or len(index) != len(shape):
        raise ValueError(f"cells: {len(index)} index arrays for a shape of {len(shape)} axes")
    hits = jnp.asarray(True)
    for axis, (size, idx) in enumerate(zip(shape, index)):
        idx = jnp.asarray(idx, jnp.int32)
        idx = jnp.where(idx < 0, idx + size, idx)  # [K]
        one_hot = idx[:, None] == jnp.arange(size)  # [K, size]
        hits = hits & one_hot.reshape((idx.shape[0],) + (1,) * axis + (size,) + (1,) * (len(shape) - axis - 1))
    return jnp.any(hits, axis=0)  # hits: [K, *shape]


def breakout_obs(state: Any) -> jax.Array:
    """Breakout's ``[10, 10, 4]``: paddle, ball, the ball's last place, bricks."""
    moving = cells((10, 10, 3), jnp.stack([jnp.asarray(9), state.ball_y, state.last_y]),
                   jnp.stack([state.pos, state.ball_x, state.last_x]), jnp.arange(3))
    return jnp.concatenate([moving, state.brick_map.astype(bool)[..., None]], axis=-1).astype(jnp.float32)


def freeway_obs(state: Any) -> jax.Array:
    """Freeway's ``[10, 10, 7]``: the chicken (channel 0, column 4), the 8 cars (channel 1) and
    each car's trail behind it (channel ``1 + |speed|``, wrapping round the road's ends)."""
    x, y, speed = state.cars[:, 0], state.cars[:, 1], state.cars[:, 3]  # [8] each
    back_x = jnp.where(speed > 0, x - 1, x + 1)
    back_x = jnp.where(back_x < 0, 9, back_x)
    back_x = jnp.where(back_x > 9, 0, back_x)
    size = jnp.abs(speed)
    trail = jnp.where((size >= 1) & (size <= 5), size + 1, 0)  # gymnax's sum of indicators
    ys = jnp.concatenate([jnp.reshape(state.pos, (1,)), y, y])
    xs = jnp.concatenate([jnp.full((1,), 4), x, back_x])
    channels = jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.ones((8,), jnp.int32), trail])
    return cells((10, 10, 7), ys, xs, channels).astype(jnp.float32)


def space_invaders_obs(state: Any) -> jax.Array:
    """SpaceInvaders' ``[10, 10, 6]``: cannon, aliens, aliens moving left, aliens moving right,
    the cannon's bullets, the aliens' bullets."""
    aliens = state.alien_map.astype(bool)
    left = state.alien_dir < 0
    cannon = cells((10, 10), jnp.reshape(jnp.asarray(9), (1,)), jnp.reshape(state.pos, (1,)))
    planes = [cannon, aliens, aliens & left, aliens & ~left, state.f_bullet_map.astype(bool),
              state.e_bullet_map.astype(bool)]
    return jnp.stack(planes, axis=-1).astype(jnp.float32)


#: gymnax's class name -> the observation built here.
OBSERVATIONS: dict[str, Callable[[Any], jax.Array]] = {
    "MinBreakout": breakout_obs, "MinFreeway": freeway_obs, "MinSpaceInvaders": space_invaders_obs}


def _get_obs(observe: Callable[[Any], jax.Array], state: Any, params: Any = None, key: Any = None) -> jax.Array:
    return observe(state)


def without_bool_scatters(env: Any) -> Any:
    """``env`` (a gymnax environment) observing through :data:`OBSERVATIONS` when it is one of
    those MinAtar games (every observation gymnax's ``reset_env``/``step_env`` return goes through
    ``get_obs``); any other env as it is."""
    observe = OBSERVATIONS.get(type(env).__name__)
    if observe is not None and type(env).__module__.startswith("gymnax.environments.minatar"):
        env.get_obs = functools.partial(_get_obs, observe)
    return env
