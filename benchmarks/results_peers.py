"""The results page's table of published peers: each published figure for a shipped config's
task (``published`` records) beside evorl's own figure for that config at the same budget.

evorl's figure is the final greedy return of every seed of the config's measurement; where the
config trains longer than the peer and its periodic evaluations were recorded, it is each
seed's evaluation at the peer's budget instead. Budgets within :data:`BUDGET_TOLERANCE` of each
other count as equal. The verdict compares the interquartile mean over seeds with the peer's
figure: ">= peer" where it is at least the figure; where it is below, whether the figure lies
inside the IQM's 95% bootstrap interval (a gap the seeds cannot tell from noise) or above it.

A ``comparison`` record that names ``configs`` and a ``budget_env_steps`` is a peer's own code
run here beside evorl at that budget (JaxMARL's IPPO); its row takes both figures from the
record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import rl_stats
from results_data import Measurement

#: Two budgets within this share of the peer's count as equal (rollout shapes rarely divide
#: a round number of env steps: 499,712 for 500k).
BUDGET_TOLERANCE = 0.05


@dataclass
class AtBudget:
    """evorl's returns per seed at a peer's budget, and how that budget compares."""

    returns: list[float]
    env_steps: int  # where ``returns`` were measured (the largest where seeds differ)
    equal: str  # "yes", "yes: ...", "no: ..." or "peer's budget not stated"


def at_budget(m: Measurement, budget: int | None) -> AtBudget:
    if budget is None:
        return AtBudget(m.final, m.budget, "peer's budget not stated")
    if abs(m.budget - budget) <= BUDGET_TOLERANCE * budget:
        return AtBudget(m.final, m.budget, "yes")
    if m.budget > budget and m.curves:
        near = [[(abs(steps - budget), steps, r) for steps, r in m.curves[seed]
                 if abs(steps - budget) <= BUDGET_TOLERANCE * budget] for seed in m.seeds]
        if all(near):
            closest = [min(points) for points in near]
            steps = max(steps for _, steps, _ in closest)
            return AtBudget([r for _, _, r in closest], steps,
                            f"yes: evorl's periodic evaluation at {steps:,} of its {m.budget:,} env steps")
    fewer = "fewer" if m.budget < budget else "more"
    return AtBudget(m.final, m.budget, f"no: evorl's figure is at {m.budget:,} env steps ({fewer})")


#: Below the figure, with the figure inside evorl's 95% interval.
WITHIN_CI = "below, peer inside the 95% CI"


def published_verdict(returns: list[float], value: float) -> str:
    """A published figure (higher is better) against the IQM of ``returns`` and its 95% interval."""
    point, _, hi = rl_stats.iqm_interval([np.asarray(returns, dtype=float)])
    if point >= value:
        return ">= peer"
    return WITHIN_CI if hi >= value else "**below peer**"


def evorl_text(m: Measurement, at: AtBudget, seeds: str) -> str:
    x = np.asarray(at.returns, dtype=float)
    point, lo, hi = rl_stats.iqm_interval([x])
    what = "final greedy return" if at.env_steps == m.budget else "greedy return"
    who = seeds if m.seeds_label else f"{len(x)} seeds ({seeds})"
    return (f"IQM **{point:.4g}** [{lo:.4g}, {hi:.4g}] over {who}, {what} at {at.env_steps:,} env steps; "
            f"min {x.min():.4g}, max {x.max():.4g}")


def side_value(side: dict) -> float:
    """One side's figure: the IQM of its per-seed values, or its single value."""
    return rl_stats.iqm(np.asarray(side["value"], dtype=float))


def side_text(side: dict) -> str:
    values = side["value"] if isinstance(side["value"], list) else [side["value"]]
    if len(values) == 1:
        return f"{side['side']}: **{values[0]:g}**"
    return f"{side['side']}: IQM **{side_value(side):.4g}** over {len(values)} seeds ({', '.join(f'{v:g}' for v in values)})"


def compared_row(name: str, c: dict, cite: Callable[[str], str]) -> dict:
    ours, theirs = side_value(c["ours"]), side_value(c["peer"])
    better = ours >= theirs if c["higher_is_better"] else ours <= theirs
    return {"config": name, "env": c["env"], "budget": f"{c['budget_env_steps']:,}",
            "evorl": f"{side_text(c['ours'])}; {c['metric']}", "peer": side_text(c["peer"]),
            "source": f"run here beside evorl ({c['seeds']}) {cite(c['source'])}",
            "equal": f"yes: {c['settings']}", "verdict": ">= peer" if better else "**below peer**"}


def peer_rows(published: list[dict], measured: dict[str, Measurement], shipped: list[str],
              cite: Callable[[str], str], seeds_text: Callable[[Measurement], str],
              comparisons: list[dict] = ()) -> list[dict]:
    """One row per published figure and shipped config it names, and per comparison naming a
    config at a budget, in the configs' page order."""
    rows = []
    for name in shipped:
        rows += [compared_row(name, c, cite) for c in comparisons
                 if name in c.get("configs", ()) and c.get("budget_env_steps") is not None]
        for p in published:
            if name not in p["configs"]:
                continue
            budget, value = p.get("budget_env_steps"), p.get("value")
            row = {"config": name, "env": p["env"], "budget": "not stated" if budget is None else f"{budget:,}",
                   "peer": p["figure"], "source": f"{p['peer']} {cite(p['source'])}"}
            m = measured.get(name)
            if m is None:
                rows.append({**row, "evorl": "not measured", "equal": "", "verdict": "no evorl figure"})
                continue
            at = at_budget(m, budget)
            verdict = "no peer value" if value is None else published_verdict(at.returns, value)
            rows.append({**row, "evorl": evorl_text(m, at, seeds_text(m)), "equal": at.equal, "verdict": verdict})
    return rows


def peer_lines(rows: list[dict]) -> list[str]:
    lines = ["| config | env | peer's budget, env steps | evorl [95% CI] | peer | peer's source | equal budget | verdict |",
             "|---|---|---:|---|---|---|---|---|"]
    lines += [f"| `{r['config']}` | {r['env']} | {r['budget']} | {r['evorl']} | {r['peer']} | {r['source']} "
              f"| {r['equal']} | {r['verdict']} |" for r in rows]
    equal = [r for r in rows if r["equal"].startswith("yes")]
    at_least = sum(r["verdict"] == ">= peer" for r in equal)
    within = sum(r["verdict"] == WITHIN_CI for r in equal)
    summary = (f"{len(rows)} rows: {len(equal)} at an equal budget, evorl at or above the peer on {at_least} of them"
               f" and below it with the peer inside its 95% CI on {within}; "
               f"{sum(r['evorl'] == 'not measured' for r in rows)} without an evorl figure.")
    return lines + ["", summary, ""]
