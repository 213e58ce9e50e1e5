"""Structured observations (a dict or named tuple of arrays) seen as one array.

Backends such as MuJoCo Playground (``{"state", "privileged_state"}``) and Jumanji (Snake's
``grid``, ``step_count``, ``action_mask``) observe a pytree of arrays; our networks take one
array. The config key ``env.obs_fields`` chooses the fields, by dotted path (``walls``,
``agent_position.row``), and the agent sees

* one field: that field as float32, its shape kept (an image stays ``[H, W, C]``);
* several fields: each flattened to float32 and concatenated in the given order ``[D]``.

A plain array observation has the single field ``""`` and is used as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evorl.config import ConfigError
from evorl.envs.spaces import Box

#: ``(low, high)`` of a field, given its dotted path and shape.
Bounds = Callable[[str, tuple[int, ...]], tuple[np.ndarray, np.ndarray]]


def unbounded(path: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    return np.full(shape, -np.inf, np.float32), np.full(shape, np.inf, np.float32)


def leaves_by_path(tree: Any) -> dict[str, Any]:
    """``{dotted path: leaf}`` in the pytree's own order (dict keys, named-tuple fields)."""
    pairs, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(path, simple=True, separator="."): leaf for path, leaf in pairs}


def chosen_fields(example_obs: Any, obs_fields: Sequence[str] | None, default: Sequence[str] | None,
                  what: str) -> tuple[str, ...]:
    """The fields the agent sees: ``obs_fields`` checked against the observation's fields, or
    ``default`` (None: every field). An unknown field is a ConfigError naming the valid ones."""
    available = list(leaves_by_path(example_obs))
    if obs_fields is not None and available == [""]:
        raise ConfigError(f"{what} observes one array, not fields: leave env.obs_fields unset "
                          f"(got {list(obs_fields)}).")
    if obs_fields is not None:
        fields = tuple(obs_fields)
    else:
        fields = tuple(available if default is None else default)
    unknown = [f for f in fields if f not in available]
    if unknown or not fields:
        bad = f"no observation field {unknown[0]!r}" if unknown else "an empty env.obs_fields"
        raise ConfigError(f"{what} has {bad} (env.obs_fields={list(fields)}); its fields: {', '.join(available)}.")
    return fields


def fields_space(example_obs: Any, fields: tuple[str, ...], bounds: Bounds = unbounded) -> Box:
    """The float32 :class:`Box` of :func:`observe_fields` (``example_obs`` may hold
    ``jax.ShapeDtypeStruct`` leaves)."""
    leaves = leaves_by_path(example_obs)
    lows, highs = zip(*(bounds(f, tuple(leaves[f].shape)) for f in fields))
    if len(fields) == 1:
        return Box(lows[0], highs[0])
    return Box(np.concatenate([np.ravel(x) for x in lows]), np.concatenate([np.ravel(x) for x in highs]))


def observe_fields(obs: Any, fields: tuple[str, ...]) -> jax.Array:
    """The chosen fields of one observation as float32: one field with its shape, several
    flattened and concatenated ``[D]``."""
    leaves = leaves_by_path(obs)
    if len(fields) == 1:
        return jnp.asarray(leaves[fields[0]], jnp.float32)
    return jnp.concatenate([jnp.ravel(jnp.asarray(leaves[f], jnp.float32)) for f in fields])
