"""Many agents in one program: ``training.num_seeds`` seeds x hyperparameter variants.

Agent ``i`` of a population trains variant ``i // num_seeds`` with seed ``i % num_seeds``;
every leaf of the training state carries this leading ``[num_agents]`` axis. Seeds share
their PRNG keys across variants (common random numbers: variants are compared on the same
environment and initialisation noise). This module holds the host-side bookkeeping.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from evorl.config import ConfigError


def apply_variant(agent_cfg: Any, training: Any, variant: dict[str, float]) -> tuple[Any, Any]:
    """The agent and training sections with the variant's ``{"agent.key": value}`` set."""
    agent_values = {k.split(".", 1)[1]: v for k, v in variant.items() if k.startswith("agent.")}
    training_values = {k.split(".", 1)[1]: v for k, v in variant.items() if k.startswith("training.")}
    return dataclasses.replace(agent_cfg, **agent_values), dataclasses.replace(training, **training_values)


def check_axes_are_data(axes, build_hparams) -> None:
    """Every swept key must change the hyperparameters the compiled program reads as data
    (``build_hparams(variant)``), else all agents would silently train the first value."""
    for name, values in axes:
        if name == "training.learning_rate" or len(set(values)) < 2:
            continue
        first, second = (build_hparams({name: v}) for v in values[:2])
        if _tree_equal(first, second):
            raise ConfigError(
                f"'{name}' cannot take a list: it is not a hyperparameter the compiled program reads "
                f"as data (it shapes the networks or the program itself). Sweep it with separate runs "
                f"(e.g. a Hydra -m sweep) instead."
            )


def _tree_equal(a, b) -> bool:
    import jax

    if jax.tree.structure(a) != jax.tree.structure(b):
        return False
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def variant_label(variant: dict[str, float]) -> str:
    return ",".join(f"{k.split('.', 1)[1]}={v:g}" for k, v in variant.items())


def aggregate_metrics(per_agent: dict[str, np.ndarray], variants: list[dict], num_seeds: int) -> dict[str, float]:
    """Scalar metrics of a population: each metric's mean over all agents (the usual key);
    for episode returns also the spread across agents (``key/std``, ``key/min``,
    ``key/max``) and, with several variants, each variant's mean over its seeds
    (``key[clip_epsilon=0.1]``). NaN entries (no episode ended) are left out."""
    out: dict[str, float] = {}
    for key, values in per_agent.items():
        values = np.asarray(values, np.float64).reshape(len(variants), num_seeds)
        out[key] = _nan_stat(np.mean, values)
        if not key.endswith("episode_return"):
            continue
        for stat, fn in (("std", np.std), ("min", np.min), ("max", np.max)):
            out[f"{key}/{stat}"] = _nan_stat(fn, values)
        if len(variants) > 1:
            for variant, row in zip(variants, values):
                out[f"{key}[{variant_label(variant)}]"] = _nan_stat(np.mean, row)
    return out


def _nan_stat(fn, values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(fn(finite)) if finite.size else float("nan")
