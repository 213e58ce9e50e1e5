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
    agent_values = {k.split(".", 1)[1]: v for k, v in variant.items() if k.startswith("agent.")}
    training_values = {k.split(".", 1)[1]: v for k, v in variant.items() if k.startswith("training.")}
    return dataclasses.replace(agent_cfg, **agent_values), dataclasses.replace(training, **training_values)


def population_inputs(key: jax.Array, per_variant: list[tuple[Any, float]], num_seeds: int):
    """The per-agent ``(keys [N], hparams [N, ...], learning_rates [N])`` of a population:
    agent ``v * num_seeds + s`` trains variant ``v`` (``per_variant[v] = (hparams, lr)``)
    with the ``s``-th key split from ``key``, shared by all variants."""
    seed_keys = jax.random.split(key, num_seeds)
    keys = jnp.concatenate([seed_keys] * len(per_variant))
    per_agent = [data for data in per_variant for _ in range(num_seeds)]
    hparams = jax.tree.map(lambda *xs: jnp.stack([jnp.asarray(x, jnp.float32) for x in xs]),
                           *[h for h, _ in per_agent])
    learning_rates = jnp.asarray([lr for _, lr in per_agent], jnp.float32)
    return keys, hparams, learning_rates


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
