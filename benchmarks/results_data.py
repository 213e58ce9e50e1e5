"""The records under ``benchmarks/results/*.jsonl``, read into one measurement per config.

Four kinds of record, one JSON object a line (``"kind"``):

* ``evaluation``: one greedy evaluation of one seed, as ``benchmarks/run.py`` appends them
  (the periodic ones and the final one, ``"final": true``). A config's measurement is the
  newest run (``recorded_at``) of each of its seeds; its verdict is computed here with
  run.py's rule.
* ``summary``: a measurement transcribed from the lab notebook the benchmarks README used to
  be (per seed: final and best return, first reach; the verdict as it was reported), with its
  source section and commit.
* ``comparison``: evorl beside a peer library, both sides' settings, machine and load.
* ``published``: a peer's published figure for a config's task, with its source.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import COLLAPSE_FRACTION, MARGIN_FRACTION, REQUIRED_SEED_FRACTION  # noqa: E402
from suites import COMPOSED, SUITES, config_target, target_file  # noqa: E402

KINDS = ("evaluation", "summary", "comparison", "published")

#: Families in page order: (title, config-name prefixes, composed ``algo=`` choices).
FAMILIES = (
    ("On-policy", ("ppo_", "a2c_", "impala_", "reinforce_"), ("ppo", "a2c", "impala", "reinforce")),
    ("Off-policy", ("dqn_", "sac_", "td3_", "ddpg_"), ("dqn", "sac", "td3", "ddpg")),
    ("Evolution strategies", ("es_", "nsga2_"), ()),
    ("Population-based training", ("pbt_",), ()),
    ("Evolution-guided RL", ("cemrl_", "erl_"), ()),
    ("Multi-agent", ("ippo_", "mappo_", "matd3_", "maddpg_"), ()),
)


def family_of(name: str) -> str:
    """The family title of a config name (``ppo_cartpole``, ``config algo=sac env=pendulum``)."""
    config, *choices = name.split(" ")
    groups = dict(c.split("=", 1) for c in choices)
    for title, prefixes, algos in FAMILIES:
        if config == COMPOSED and groups.get("algo", "ppo") in algos:
            return title
        if config != COMPOSED and config.startswith(prefixes):
            return title
    raise ValueError(f"{name}: no family for this config; add its prefix to results_data.FAMILIES")


def load_records(results_dir: Path) -> list[dict]:
    """Every record of ``results_dir/*.jsonl``, files in name order, lines in file order."""
    records = []
    for path in sorted(Path(results_dir).glob("*.jsonl")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if record.get("kind") not in KINDS:
                raise ValueError(f"{path}:{number}: kind {record.get('kind')!r} is not one of {KINDS}")
            records.append(record)
    return records


@dataclass
class Measurement:
    """One config measured on one set of seeds."""

    name: str
    env: str
    algorithm: str
    seeds: list[int]
    budget: int
    final: list[float]
    target: float
    best: list[float] | None = None
    first_reach: list[int | None] | None = None  # env steps per seed, None: never
    first_reach_range: list[int] | None = None  # [lo, hi] env steps where only a range was reported
    random_return: float | None = None
    passed_reported: str | None = None  # "4/5" as the source reported it (transcribed records)
    source: str = ""
    commit: str | None = None
    note: str | None = None
    score_of: str | None = None
    #: Per seed: [(env steps, return)] of every evaluation (run.py data only).
    curves: dict[int, list[tuple[int, float]]] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)
    machine: dict | None = None

    def scores(self, returns: list[float]) -> list[float] | None:
        """``returns`` normalised (0: random policy, 1: target); None without a random return."""
        if self.random_return is None or self.target == self.random_return:
            return None
        return [(r - self.random_return) / (self.target - self.random_return) for r in returns]

    @property
    def final_scores(self) -> list[float] | None:
        return self.scores(self.final)

    def seed_passed(self) -> list[bool] | None:
        """Per seed, run.py's rule (final >= target, no collapse, first reach within the
        margin); None where the record lacks what the rule needs."""
        if self.best is None or self.first_reach is None:
            return None
        final, best = self.scores(self.final), self.scores(self.best)
        collapsed = ([False] * len(self.final) if final is None else
                     [b > 0 and f < COLLAPSE_FRACTION * b for f, b in zip(final, best)])
        late = [x is None or x > MARGIN_FRACTION * self.budget for x in self.first_reach]
        return [r >= self.target and not c and not lt for r, c, lt in zip(self.final, collapsed, late)]

    @property
    def passed_text(self) -> str:
        """``"4/5"``: computed for run.py data, as reported for a transcribed record."""
        if self.passed_reported is not None:
            return self.passed_reported
        passed = self.seed_passed()
        return "" if passed is None else f"{sum(passed)}/{len(passed)}"

    @property
    def passes(self) -> bool:
        """At least ``REQUIRED_SEED_FRACTION`` of the seeds passed."""
        passed, total = (int(x) for x in self.passed_text.split("/"))
        return passed >= REQUIRED_SEED_FRACTION * total - 1e-9

    @property
    def first_reach_fractions(self) -> list[float | None] | None:
        if self.first_reach is None:
            return None
        return [None if x is None else x / self.budget for x in self.first_reach]


def from_evaluations(records: list[dict]) -> dict[str, Measurement]:
    """Per config, from the ``configs`` set's evaluation records (the held-out protocol; other
    sets train on other seeds): the commit of its newest run, and at that commit the newest run
    (``recorded_at``) of each seed. The random return is the mean of the seeds' runs' random
    returns (run.py measures it over the seeds of one invocation)."""
    evaluations = [r for r in records if r["kind"] == "evaluation" and r.get("suite") == "configs"]
    newest_commit = {}
    for r in sorted(evaluations, key=lambda r: r["recorded_at"]):
        newest_commit[r["name"]] = r["commit"]
    evaluations = [r for r in evaluations if r["commit"] == newest_commit[r["name"]]]
    newest: dict[tuple[str, int], str] = {}
    for r in evaluations:
        key = (r["name"], r["seed"])
        newest[key] = max(newest.get(key, ""), r["recorded_at"])
    measurements: dict[str, Measurement] = {}
    randoms: dict[str, list[float]] = {}
    for name, seed in sorted(newest):
        evals = [r for r in evaluations if (r["name"], r["seed"]) == (name, seed) and r["recorded_at"] == newest[name, seed]]
        periodic = [e for e in evals if not e["final"]]
        finals = [e for e in evals if e["final"]]
        if len(finals) != 1:
            raise ValueError(f"{name} seed {seed}: {len(finals)} final evaluations in its newest run")
        final, target = finals[0], finals[0]["target"]
        m = measurements.setdefault(name, Measurement(
            name=name, env=final["env"], algorithm=final["algorithm"], seeds=[], budget=final["budget_env_steps"],
            final=[], best=[], first_reach=[], target=target, source="run.py data", commit=final["commit"],
            machine=final["machine"]))
        m.seeds.append(seed)
        m.final.append(final["return_mean"])
        m.best.append(max(e["return_mean"] for e in evals))
        m.first_reach.append(next((e["env_steps"] for e in periodic if e["return_mean"] >= target), None))
        m.curves[seed] = [(e["env_steps"], e["return_mean"]) for e in periodic]
        m.loads.append(final["machine"]["load_1min"])
        if final["random_return"] is not None:
            randoms.setdefault(name, []).append(final["random_return"])
    for name, values in randoms.items():
        measurements[name].random_return = statistics.fmean(values)
    return measurements


def from_summaries(records: list[dict]) -> dict[str, Measurement]:
    """The transcribed measurements, per config (the last record of a name wins)."""
    out = {}
    for r in records:
        if r["kind"] != "summary":
            continue
        out[r["name"]] = Measurement(
            name=r["name"], env=r["env"], algorithm=r["algorithm"], seeds=r["seeds"], budget=r["budget_env_steps"],
            final=r["final"], best=r["best"], first_reach=r["first_reach_env_steps"],
            first_reach_range=r["first_reach_range"], target=r["target"], random_return=r["random_return"],
            passed_reported=r["passed_reported"], source=r["source"], commit=r.get("measured_commit"),
            note=r.get("note"), score_of=r.get("score_of"))
    return out


@dataclass
class ShippedConfig:
    name: str  # run.py's entry name: a file in configs/, or "config algo=... env=..."
    family: str
    target_line: str | None  # the header's "# Target: ..." text
    target: float | None  # the value it states, None: "not measured" or no line


def shipped_configs() -> list[ShippedConfig]:
    """Every file in ``configs/`` (but the composed ``config.yaml``) and every composed preset
    the ``configs`` set runs, with its header's target line."""
    names = [p.stem for p in sorted((ROOT / "configs").glob("*.yaml")) if p.stem != COMPOSED]
    names += [b.name for b in SUITES["configs"] if b.config == COMPOSED]
    out = []
    for name in names:
        config, *choices = name.split(" ")
        target = config_target(target_file(config, dict(c.split("=", 1) for c in choices)))
        line = None if target is None else target.line.split("Target:", 1)[1].strip()
        out.append(ShippedConfig(name, family_of(name), line, None if target is None else target.value))
    return sorted(out, key=lambda c: ([f[0] for f in FAMILIES].index(c.family), c.name))


def measurement_per_config(records: list[dict]) -> dict[str, Measurement]:
    """Per config: its run.py data if any (the newest), else its transcribed measurement."""
    return {**from_summaries(records), **from_evaluations(records)}
