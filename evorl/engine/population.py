"""Many agents in one program: ``training.num_seeds`` seeds x hyperparameter variants.

Agent ``i`` of a population trains variant ``i // num_seeds`` with seed ``i % num_seeds``;
every leaf of the training state carries this leading ``[num_agents]`` axis. Seeds share
their PRNG keys across variants (common random numbers: variants are compared on the same
environment and initialisation noise). This module holds the bookkeeping: which agent
trains which variant, and the population's aggregated metrics. How the population runs (vmap,
devices) is :mod:`evorl.engine.execution`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def apply_variant(agent_cfg: Any, training: Any, variant: dict[str, float]) -> tuple[Any, Any]:
    """The agent and training sections with the variant's ``{"agent.key": value}`` set."""
    return _with_section_values(agent_cfg, "agent", variant), _with_section_values(training, "training", variant)


def with_variant(config: Any, variant: dict[str, float]) -> Any:
    """The experiment ``config`` with the variant's ``{"section.key": value}`` set, in any
    section (``agent``, ``training``, an algorithm's own such as ``es``)."""
    sections = {key.split(".", 1)[0] for key in variant}
    return dataclasses.replace(config, **{name: _with_section_values(getattr(config, name), name, variant)
                                          for name in sections})


def _with_section_values(section: Any, name: str, variant: dict[str, float]) -> Any:
    values = {key.split(".", 1)[1]: v for key, v in variant.items() if key.split(".", 1)[0] == name}
    return dataclasses.replace(section, **values) if values else section


def population_inputs(key: jax.Array, per_variant: list[tuple], num_seeds: int) -> tuple:
    """The per-agent inputs of a population's initialisation: ``(keys [N], *data [N, ...])``.
    Agent ``v * num_seeds + s`` trains variant ``v`` (``per_variant[v]``, a tuple of numbers
    or pytrees of them: an RL workflow's ``(hparams, learning_rate)``) with the ``s``-th key
    split from ``key``, shared by all variants."""
    seed_keys = jax.random.split(key, num_seeds)
    keys = jnp.concatenate([seed_keys] * len(per_variant))
    per_agent = [data for data in per_variant for _ in range(num_seeds)]
    stacked = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, jnp.float32) for x in xs]), *per_agent)
    return (keys, *stacked)


def variant_label(variant: dict[str, float]) -> str:
    return ",".join(f"{k.split('.', 1)[1]}={v:g}" for k, v in variant.items())


def aggregate_metrics(per_agent: dict[str, np.ndarray], variants: list[dict], num_seeds: int,
                      may_be_nan: tuple[str, ...] = (), include: np.ndarray | None = None) -> dict[str, float]:
    """Scalar metrics of a population: each metric's mean over all agents (the usual key);
    for episode returns also the spread across agents (``key/std``, ``key/min``,
    ``key/max``) and, with several variants, each variant's mean over its seeds
    (``key[clip_epsilon=0.1]``). The NaN entries of the ``may_be_nan`` metrics mean "nothing
    measured" (no episode ended) and are left out; any other non-finite entry is kept, so
    the aggregate shows it. Agents with ``include [N]`` false (frozen) are left out of all;
    a statistic over no agent is NaN."""
    out: dict[str, float] = {}
    shape = (len(variants), num_seeds)
    included = np.ones(shape, bool) if include is None else np.reshape(include, shape)
    for key, values in per_agent.items():
        values = np.asarray(values, np.float64).reshape(shape)
        keep = included & ~np.isnan(values) if key in may_be_nan else included
        out[key] = _stat(np.mean, values, keep)
        if not key.endswith("episode_return"):
            continue
        for name, fn in (("std", np.std), ("min", np.min), ("max", np.max)):
            out[f"{key}/{name}"] = _stat(fn, values, keep)
        if len(variants) > 1:
            for variant, row, keep_row in zip(variants, values, keep):
                out[f"{key}[{variant_label(variant)}]"] = _stat(np.mean, row, keep_row)
    return out


def _stat(fn, values: np.ndarray, keep: np.ndarray) -> float:
    kept = values[keep]
    return float(fn(kept)) if kept.size else float("nan")
