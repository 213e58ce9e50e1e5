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
* ``published``: a peer's published figure for a config's task, with its source, and where
  the figure states them its budget (``budget_env_steps``) and its value (``value``).

Beside them, ``minatar/published.jsonl`` holds the MinAtar runs of
``benchmarks/minatar_published.py`` (many agents of one config in one program, one line a
game); :func:`from_minatar` reads them into measurements of the same shape.
"""

from __future__ import annotations

import json
import math
import re
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
    #: Per seed: the final evaluation's standard error (std over its episodes / sqrt(episodes))
    #: and its episode count; None where the source did not record them.
    final_stderr: list[float | None] | None = None
    eval_episodes: list[int | None] | None = None
    #: How the seeds are named where they are not a list of PRNGKey seeds.
    seeds_label: str | None = None

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

    def collapse_band(self) -> list[float | None] | None:
        """Per seed, in return units, how far the final return may fall below the seed's best
        before run.py's rule calls the run collapsed: final score < ``COLLAPSE_FRACTION`` x best
        score is ``R_best - R_final > (1 - COLLAPSE_FRACTION) (R_best - R_random)``. None
        without a random return or a best per seed; None for a seed whose best scores <= 0
        (the rule does not apply to it)."""
        if self.random_return is None or self.best is None or self.target == self.random_return:
            return None
        return [(1 - COLLAPSE_FRACTION) * (b - self.random_return) if score > 0 else None
                for b, score in zip(self.best, self.scores(self.best))]

    @property
    def judged(self) -> bool:
        """Whether the record holds what run.py's rule needs (or the verdict as reported)."""
        return self.passed_text != ""

    @property
    def passed_text(self) -> str:
        """``"4/5"``: computed for run.py data, as reported for a transcribed record."""
        if self.passed_reported is not None:
            return self.passed_reported
        passed = self.seed_passed()
        return "" if passed is None else f"{sum(passed)}/{len(passed)}"

    @property
    def passes(self) -> bool:
        """At least ``REQUIRED_SEED_FRACTION`` of the seeds passed (False when not judged)."""
        if not self.judged:
            return False
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
        m.final_stderr = (m.final_stderr or []) + [final_stderr(final)]
        m.eval_episodes = (m.eval_episodes or []) + [final.get("eval_episodes")]
        if final["random_return"] is not None:
            randoms.setdefault(name, []).append(final["random_return"])
    for name, values in randoms.items():
        measurements[name].random_return = statistics.fmean(values)
    return measurements


def final_stderr(record: dict) -> float | None:
    """An evaluation record's standard error: as recorded, else its episodes' std over the
    square root of their count; None where either is missing."""
    if record.get("return_stderr") is not None:
        return record["return_stderr"]
    std, episodes = record.get("return_std"), record.get("eval_episodes")
    return None if std is None or not episodes else std / math.sqrt(episodes)


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


MINATAR_FILE = Path("minatar") / "published.jsonl"


def load_minatar(results_dir: Path) -> list[dict]:
    """The lines of ``results_dir/minatar/published.jsonl`` (none if the file is absent)."""
    path = Path(results_dir) / MINATAR_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def from_minatar(rows: list[dict]) -> dict[str, Measurement]:
    """Per config, the last finished run of its game (``benchmarks/minatar_published.py``'s
    lines). Its agents' keys are split from one seed. It is judged by run.py's rule (on raw
    returns, as that script judges: a random policy scores ~0 on MinAtar) only where every
    agent's periodic evaluations were recorded and the config states a target."""
    from minatar_published import algo, config_name, own_terms, verdicts

    last = {config_name(algo(r), r["game"]): r for r in rows if "final_returns" in r and own_terms(r)}
    out = {}
    for name, r in last.items():
        header = config_target(target_file(name))
        stated = None if header is None else header.value
        # a row records the target its config stated when it ran; a target stated later (read
        # from this very run's agents) is shown but never judges the run it was read from
        ran_with = r["target"] if "target" in r else stated
        target = stated if stated is not None else ran_with
        finals = [float(x) for x in r["final_returns"]]
        budget = r.get("budget_env_steps") or r["env_steps_per_agent"]
        m = Measurement(
            name=name, env=f"gymnax/{r['env']}", algorithm=algo(r).upper(), seeds=list(range(len(finals))), budget=budget,
            final=finals, target=target, source="minatar_published.py data", commit=r.get("git_commit") or r.get("commit"),
            machine={"name": r.get("machine"), "jax_backend": r.get("backend")},
            final_stderr=[r.get("eval_standard_error")] * len(finals), eval_episodes=[r.get("eval_episodes")] * len(finals),
            seeds_label=f"{len(finals)} agents, keys split from seed {r['seed']}")
        per_agent = bool(r["curve"]) and "per_agent" in r["curve"][0]
        judged = ran_with is not None and per_agent
        if judged:
            v = verdicts({**r, "target": ran_with, "budget_env_steps": budget})
            m.best = [x["best"] for x in v]
            m.first_reach = [None if x["first_reach"] is None else round(x["first_reach"] * budget) for x in v]
            m.passed_reported = f"{sum(x['passed'] for x in v)}/{len(v)}"
        why = ("" if judged else "not judged: the config's header states no target; " if target is None else
               "not judged: its periodic evaluations were recorded as the mean, min and max over the agents, not per "
               "agent, so neither first reach nor collapse can be read per agent; " if not per_agent else
               "not judged: its target was stated after this run, from these agents, so a run on fresh seeds "
               "judges it; ")
        m.note = why + ("its s.e. is one figure for the run: the agents' mean standard deviation over the "
                        "square root of the episodes")
        out[name] = m
    return out


def measurement_per_config(records: list[dict], minatar_rows: list[dict] = ()) -> dict[str, Measurement]:
    """Per config: its run.py data if any (the newest), else its MinAtar run, else its
    transcribed measurement."""
    return {**from_summaries(records), **from_minatar(list(minatar_rows)), **from_evaluations(records)}


#: Why a shipped config has no measurement, read from its header's target line: (category, pattern).
UNMEASURED_REASONS = (
    ("no return target", re.compile(r"no return target")),
    ("GPU/TPU scale (hours on the CPU)", re.compile(r"GPU|TPU|hours on this CPU|generation is minutes")),
    ("target not met yet on the CPU", re.compile(r"not met yet")),
    ("measured off the held-out set (its header gives the figure)",
     re.compile(r"not checked by a set|checked (?:at its own length )?by `benchmarks/run\.py (?!configs`)|measured on seeds")),
    ("superseded by a tuned config", re.compile(r"tuned config is")),
)


def unmeasured_reason(config: ShippedConfig) -> str:
    """The category of why ``config`` was not measured on held-out seeds (its header's target
    line says it in full)."""
    line = config.target_line or ""
    return next((why for why, pattern in UNMEASURED_REASONS if pattern.search(line)), "other (its header says why)")
