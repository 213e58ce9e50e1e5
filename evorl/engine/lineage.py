"""A PBT step's record as JSON: what the host loop writes to ``pbt_lineage.jsonl`` (reading
and plotting it is :mod:`evorl.app.pbt_lineage`). Imports no JAX."""

from __future__ import annotations

from typing import Any

import numpy as np


def shortest(values: Any) -> list[float]:
    """Each value as the shortest decimal that reads back as the same number of its own dtype:
    a float32 ``1e-6`` is ``1e-06``, not the float64 ``9.999999974752427e-07`` it widens to."""
    return [float(str(v)) for v in np.asarray(values).ravel()]


def lineage_record(record: dict, keys: list[str]) -> dict:
    """The JSON record of one PBT step from the executor's arrays (``iteration``, ``source
    [N]``, ``fitness [N]``, ``before [N, H]``, ``after [N, H]``, ``diverged [N]``; ``keys``
    names the ``H``). ``diverged`` lists the agents frozen by divergence before the step, and
    their ``copied`` entries say so: each was replaced by a copy of a good agent."""
    source = [int(s) for s in np.asarray(record["source"])]
    before, after = np.asarray(record["before"]), np.asarray(record["after"])
    diverged = set(np.flatnonzero(np.asarray(record.get("diverged", np.zeros(len(source), bool)))).tolist())
    return {
        "iteration": int(record["iteration"]),
        "fitness": shortest(record["fitness"]),
        "source": source,
        "copied": [{"agent": i, "from": s, **({"diverged": True} if i in diverged else {})}
                   for i, s in enumerate(source) if s != i],
        "diverged": sorted(diverged),
        "hyperparameters": {key: shortest(before[:, j]) for j, key in enumerate(keys)},
        "new_hyperparameters": {key: shortest(after[:, j]) for j, key in enumerate(keys)},
    }

