"""Renders the results page from the data: ``benchmarks/results/*.jsonl`` -> ``docs/results.md``
and its figures under ``docs/results/``.

    python benchmarks/render_results.py [--results benchmarks/results] [--out docs/results.md]
        [--figures docs/results]

The page: the protocol; per family of configs a table (target, seeds passed, first reach of
the target as a share of the budget, the IQM of the normalised final score with its 95%
stratified bootstrap interval, the final evaluation's standard error beside the collapse
rule's band, a published peer's figure), every shipped config in it, measured or not and why;
the published peers beside evorl's figure at the same budget; learning curves of every seed of
the runs recorded with every evaluation; the aggregate over configs (IQM with its interval,
performance profiles: ``docs/results/aggregate.png``); and the comparisons beside peer
libraries. Rendering is deterministic (fixed bootstrap seed, PNGs without a timestamp), so
``tests/test_results_page.py`` can check that the committed page is what the data renders to.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rl_stats  # noqa: E402
from results_data import (  # noqa: E402
    FAMILIES, Measurement, from_summaries, load_minatar, load_records, measurement_per_config, shipped_configs,
    unmeasured_reason,
)
from results_peers import peer_lines, peer_rows  # noqa: E402
from run import COLLAPSE_FRACTION, MARGIN_FRACTION, REQUIRED_SEED_FRACTION  # noqa: E402

TAUS = np.linspace(0.0, 2.0, 81)
AGGREGATE_FIGURE = "aggregate.png"


def slug(title: str) -> str:
    return title.lower().replace(" ", "_").replace("-", "_")


def seeds_text(seeds: list[int]) -> str:
    """``100-104`` for a run of consecutive seeds, else ``5701, 5703``."""
    if len(seeds) > 1 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)


def measurement_seeds(m: Measurement) -> str:
    return m.seeds_label or seeds_text(m.seeds)


def value_range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}-{hi:.3g}"


def stderr_text(m: Measurement) -> str:
    """The final evaluation's standard error over the seeds (range) and its episodes."""
    recorded = [(se, n) for se, n in zip(m.final_stderr or [], m.eval_episodes or []) if se is not None and n]
    if not recorded:
        return "not recorded"
    episodes = sorted({n for _, n in recorded})
    text = f"{value_range([se for se, _ in recorded])} ({'/'.join(str(n) for n in episodes)} episodes)"
    missing = len(m.final) - len(recorded)
    return text + (f"; not recorded on {missing}" if missing else "")


def band_text(m: Measurement) -> str:
    """The collapse rule's band over the seeds (range), and on how many seeds it is wider
    than the final evaluation's standard error."""
    band = m.collapse_band()
    if band is None:
        return "no random return recorded" if m.random_return is None else "no best return recorded"
    known = [b for b in band if b is not None]
    if not known:
        return "none: no seed scored above the random policy"
    text = value_range(known)
    pairs = [(b, se) for b, se in zip(band, m.final_stderr or []) if b is not None and se is not None]
    return text + (f"; wider than the s.e. on {sum(b > se for b, se in pairs)}/{len(pairs)}" if pairs else "")


def first_reach_text(m: Measurement) -> str:
    """The first evaluation at the target as a share of the budget: median (range) over the
    seeds, with the seeds that never reached it."""
    if m.first_reach_range is not None:
        lo, hi = (x / m.budget for x in m.first_reach_range)
        return f"{lo:.0%}-{hi:.0%} (range reported)"
    fractions = m.first_reach_fractions
    if fractions is None:
        return "not recorded"
    reached = [f for f in fractions if f is not None]
    never = len(fractions) - len(reached)
    if not reached:
        return "never"
    text = f"{statistics.median(reached):.0%} ({min(reached):.0%}-{max(reached):.0%})"
    return text + (f"; never on {never}" if never else "")


def score_text(m: Measurement) -> str:
    scores = m.final_scores
    if scores is None:
        return "no random return recorded"
    point, lo, hi = rl_stats.iqm_interval([np.asarray(scores)])
    return f"{point:.2f} [{lo:.2f}, {hi:.2f}]"


class Sources:
    """Numbered sources, in order of first use."""

    def __init__(self):
        self.items: list[str] = []

    def cite(self, text: str) -> str:
        if text not in self.items:
            self.items.append(text)
        return f"[{self.items.index(text) + 1}]"


def source_text(m: Measurement) -> str:
    if m.source == "minatar_published.py data":
        commit = m.commit or "unknown"
        return (f"`benchmarks/minatar_published.py` data in `benchmarks/results/minatar/published.jsonl`, commit "
                f"{commit[:7]}{'+dirty' if commit.endswith('dirty') else ''}, {m.machine['name']} (JAX on {m.machine['jax_backend']})")
    if m.source == "run.py data":
        machine = m.machine or {}
        return (f"`benchmarks/run.py` data in `benchmarks/results/`, commit {(m.commit or 'unknown')[:7]}, "
                f"{machine.get('cpu_count')} CPUs ({machine.get('processor')}), JAX {machine.get('jax')} on {machine.get('jax_backend')}")
    return m.source + (f"; measured at commit {m.commit}" if m.commit else "")


def load_text(m: Measurement) -> str:
    """The 1-minute load over the seeds' runs (run.py data only)."""
    if not m.loads:
        return ""
    lo, hi = min(m.loads), max(m.loads)
    return f", load {lo:.1f}" if lo == hi else f", load {lo:.1f}-{hi:.1f}"


def family_table(title: str, configs, measured: dict[str, Measurement], published: list[dict], sources: Sources,
                 earlier: dict[str, Measurement]) -> list[str]:
    lines = [f"### {title}", "",
             "| config | env | target | seeds | passed | first reach, % of budget | IQM of score [95% CI] "
             "| final eval s.e. (episodes) | collapse band | published peer |",
             "|---|---|---:|---|:-:|---|---|---|---|---|"]
    for c in configs:
        peers = "; ".join(f"{p['peer']}: {p['figure']} {sources.cite(p['source'])}"
                          for p in published if c.name in p["configs"])
        m = measured.get(c.name)
        if m is None:
            target = "none stated" if c.target is None else f"{c.target:g}"
            lines.append(f"| `{c.name}` | | {target} | | not measured: {unmeasured_reason(c)} | | | | | {peers} |")
            continue
        verdict = (f"{m.passed_text} pass" if m.passes else f"{m.passed_text} **miss**") if m.judged else "not judged"
        who = f" ({m.score_of})" if m.score_of else ""
        target = "none stated" if m.target is None else f"{m.target:g}{who}"
        lines.append(
            f"| `{c.name}` | {m.env} | {target} | {measurement_seeds(m)} {sources.cite(source_text(m))}{load_text(m)} "
            f"| {verdict} | {first_reach_text(m)} | {score_text(m)} | {stderr_text(m)} | {band_text(m)} | {peers} |")
    notes = [f"* `{c.name}`: {measured[c.name].note}." for c in configs if c.name in measured and measured[c.name].note]
    for c in configs:
        e = earlier.get(c.name)
        if e is not None and measured[c.name].source == "run.py data":
            notes.append(f"* `{c.name}`, measured before on seeds {seeds_text(e.seeds)} {sources.cite(source_text(e))}: "
                         f"{e.passed_text}, final {', '.join(f'{x:g}' for x in e.final)}.")
    unmeasured = [c for c in configs if c.name not in measured]
    if unmeasured:
        notes.append("* Not measured on held-out seeds; each header's target line says:")
        notes += [f"    * `{c.name}`: {header_text(c.target_line)}" for c in unmeasured]
    return lines + ([""] + notes if notes else []) + [""]


def header_text(line: str | None) -> str:
    """A header's target line as the page quotes it (a line cut mid-sentence says so)."""
    if line is None:
        return "no target line"
    return line if line.count("(") == line.count(")") else line + " ... (continued in the config's header)"


def aggregate_tasks(measured: dict[str, Measurement], names: list[str]) -> list[np.ndarray]:
    return [np.asarray(measured[n].final_scores) for n in names if n in measured and measured[n].final_scores]


def aggregate_lines(measured: dict[str, Measurement], families: dict[str, list]) -> tuple[list[str], dict]:
    rows, estimates = [], {}
    groups = [(title, [c.name for c in configs]) for title, configs in families.items()]
    groups.append(("All configs", [n for _, names in groups for n in names]))
    for title, names in groups:
        tasks = aggregate_tasks(measured, names)
        if not tasks:
            continue
        estimates[title] = rl_stats.iqm_interval(tasks)
        point, lo, hi = estimates[title]
        rows.append(f"| {title} | {len(tasks)} | {sum(t.size for t in tasks)} | {point:.3f} [{lo:.3f}, {hi:.3f}] |")
    lines = ["| family | configs | runs | IQM of the normalised final score [95% CI] |", "|---|---:|---:|---|", *rows, ""]
    return lines, estimates


def comparison_lines(comparisons: list[dict], sources: Sources) -> list[str]:
    def value(v):
        if isinstance(v, list):
            return ", ".join(f"{x:,}" if isinstance(x, (int, float)) else str(x) for x in v)
        return f"{v:,}" if isinstance(v, (int, float)) else str(v)

    def side(s):
        extra = "; ".join(f"{k.replace('_', ' ')} {value(v)}" for k, v in sorted(s.items()) if k not in ("side", "value"))
        return f"{s['side']}: **{value(s['value'])}**" + (f" ({extra})" if extra else "")

    lines = ["| comparison | env | metric | evorl | peer | evorl / peer | settings (both sides) | env count | data per update | seeds | machine, load | command |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in comparisons:
        ratio = "" if c["ratio"] is None else value(c["ratio"])
        lines.append(
            f"| {c['what']} {sources.cite(c['source'])} | {c['env']} | {c['metric']} | {side(c['ours'])} | {side(c['peer'])} "
            f"| {ratio} | {c['settings']} | {c['env_count']} | {c['data_per_update']} | {c['seeds']} "
            f"| {c['machine']}; load {c['load']}{'; commit ' + c['measured_commit'] if c.get('measured_commit') else ''} "
            f"| `{c['command']}` |")
    return lines + [""]


def methods_lines() -> list[str]:
    return [
        "Every shipped config is trained at its own length on seeds nobody tuned on (the held-out",
        "seeds 100-104, or fresh seeds where the row says so) and judged against the target its",
        "header states. The score is normalised between a random policy and the target,",
        "`s = (R - R_random) / (R_target - R_random)` (`R_random`: the untrained policy with",
        "sampled actions). A seed **passes** when its final greedy return reaches the target, it",
        f"did not collapse (final score at least {COLLAPSE_FRACTION} x its best over the evaluations) and",
        f"its periodic evaluation first reached the target within {MARGIN_FRACTION:.0%} of the budget; a config",
        f"passes when at least {REQUIRED_SEED_FRACTION:.0%} of its seeds pass. Aggregates follow Agarwal et al.",
        "(2021): the interquartile mean (IQM) of the normalised final scores with a 95% stratified",
        f"bootstrap percentile interval ({rl_stats.DEFAULT_REPS} resamples, seed {rl_stats.DEFAULT_SEED}; the strata are the configs),",
        "and performance profiles, the fraction of runs whose score exceeds tau. `benchmarks/run.py`",
        "appends every evaluation of every seed to `benchmarks/results/<set>.jsonl`; measurements",
        "made before it did are transcribed with their source (`benchmarks/results/*_transcribed.jsonl`).",
        "This page is rendered from those files by `python benchmarks/render_results.py`.",
        "",
        "Each row also gives the final evaluation's standard error (the episodes' standard deviation over",
        "the square root of their count; per seed, range over the seeds) and the collapse rule's band in",
        f"return units, `(1 - {COLLAPSE_FRACTION}) x (R_best - R_random)`: how far a seed's final return may fall",
        "below its best before the run counts as collapsed. A band wider than the standard error means the",
        "rule judges more than the evaluation's noise.",
        "",
    ]


def summary_line(configs, measured: dict[str, Measurement]) -> str:
    """How many shipped configs were measured, judged, passed, and why the rest were not."""
    with_data = [measured[c.name] for c in configs if c.name in measured]
    judged = [m for m in with_data if m.judged]
    reasons: dict[str, int] = {}
    for c in configs:
        if c.name not in measured:
            reasons[unmeasured_reason(c)] = reasons.get(unmeasured_reason(c), 0) + 1
    not_judged = len(with_data) - len(judged)
    return (f"{len(configs)} shipped configs and presets: {len(with_data)} measured on untuned seeds, "
            f"{len(judged)} of them judged by the margin rule and {sum(m.passes for m in judged)} pass"
            + (f", {not_judged} not judged (the notes below say why)" if not_judged else "")
            + f"; {sum(reasons.values())} not measured: "
            + ", ".join(f"{n} {why}" for why, n in sorted(reasons.items(), key=lambda x: -x[1])) + ".")


def render_markdown(records: list[dict], figures: dict[str, str], minatar_rows: list[dict] = ()) -> str:
    measured = measurement_per_config(records, minatar_rows)
    configs = shipped_configs()
    families = {title: [c for c in configs if c.family == title] for title, _, _ in FAMILIES}
    published = [r for r in records if r["kind"] == "published"]
    comparisons = [r for r in records if r["kind"] == "comparison"]
    sources = Sources()
    lines = ["# Results", "", "<!-- Rendered by `python benchmarks/render_results.py` from `benchmarks/results/*.jsonl`: edit the data, not this page. -->", "",
             "## Protocol", "", *methods_lines(),
             "## Held-out pass rate per config", "",
             summary_line(configs, measured) + " \"seeds\" names the seeds and the source "
             "(numbered below); a target with a note in brackets scores that policy.", ""]
    for title, family in families.items():
        lines += family_table(title, family, measured, published, sources, from_summaries(records))
    lines += ["## Beside published peers at the same budget", "",
              "Each published figure for a shipped config's task beside evorl's own figure for that config: the "
              "interquartile mean over seeds with its 95% bootstrap interval, taken at the peer's budget where "
              "evorl's periodic evaluations were recorded there. The two figures' evaluations differ where the "
              "peer's text says so (training episodes, sampled actions).", "",
              *peer_lines(peer_rows(published, measured, [c.name for c in configs], sources.cite, measurement_seeds,
                                  comparisons))]
    lines += ["## Learning curves", "",
              "Every periodic greedy evaluation of every seed, for the runs recorded by `benchmarks/run.py` "
              "(the dashed line is the target).", ""]
    for title in families:
        if title in figures:
            lines += [f"### {title}", "", f"![{title} learning curves]({figures[title]})", ""]
    missing = [t for t in families if t not in figures]
    if missing:
        lines += ["No per-evaluation data recorded yet for: " + ", ".join(missing) + " (their rows above are transcribed finals).", ""]
    agg_lines, _ = aggregate_lines(measured, families)
    lines += ["## Aggregate over configs", "",
              "The normalised final score of every seed of every measured config with a recorded random return; "
              "left, the IQM with its 95% stratified bootstrap interval; right, the performance profile with its "
              "pointwise interval. Scores above 1 beat the target; a capped return (CartPole's 500 against a target of 475) sits a little above 1.", "",
              *agg_lines, f"![aggregate]({figures['aggregate']})", "",
              "## Beside peer libraries", "",
              "Each row states both sides' settings; a speed ratio is read only within its row "
              "(the machines were shared, at the load given).", "",
              *comparison_lines(comparisons, sources),
              "## Sources", ""]
    lines += [f"{i}. {text}" for i, text in enumerate(sources.items, 1)]
    return "\n".join(lines) + "\n"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "evorl", "figure.dpi": 100, "font.size": 9})
    return plt


def _save(fig, path: Path) -> None:
    fig.savefig(path, metadata={"Software": None})  # no version string: the same bytes every time
    import matplotlib.pyplot as plt

    plt.close(fig)


def plot_curves(measurements: list[Measurement], path: Path) -> None:
    """One panel per config: every seed's greedy return at each periodic evaluation."""
    plt = _pyplot()
    cols = min(3, len(measurements))
    rows = -(-len(measurements) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    for ax, m in zip(axes.ravel(), measurements):
        for seed in m.seeds:
            steps, returns = zip(*m.curves[seed]) if m.curves[seed] else ((), ())
            ax.plot(steps, returns, lw=1.2, marker=".", ms=3, label=f"seed {seed}")
        ax.axhline(m.target, color="black", ls="--", lw=1)
        ax.set(title=f"{m.name} ({m.env})", xlabel="env steps", ylabel="greedy return")
        ax.title.set_fontsize(8)
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(measurements):]:
        ax.axis("off")
    fig.tight_layout()
    _save(fig, path)


def plot_aggregate(measured: dict[str, Measurement], families: dict[str, list], path: Path) -> None:
    """Left: IQM with its 95% interval per family and over all configs. Right: the performance
    profile of all runs with its pointwise interval, and per family."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    _, estimates = aggregate_lines(measured, families)
    names = list(estimates)
    for i, name in enumerate(names):
        point, lo, hi = estimates[name]
        left.errorbar([point], [i], xerr=[[point - lo], [hi - point]], fmt="s", color="black" if name == "All configs" else f"C{i}", capsize=4)
    left.set(yticks=range(len(names)), yticklabels=names, xlabel="IQM of the normalised final score (95% CI)")
    left.axvline(1.0, color="tab:red", lw=1)
    left.invert_yaxis()
    all_tasks = aggregate_tasks(measured, [c.name for cs in families.values() for c in cs])
    point, lo, hi = rl_stats.profile_interval(all_tasks, TAUS)
    right.plot(TAUS, point, color="black", lw=2, label="all configs")
    right.fill_between(TAUS, lo, hi, color="black", alpha=0.15)
    for i, name in enumerate(names):
        tasks = aggregate_tasks(measured, [c.name for c in families.get(name, [])])
        if tasks:
            right.plot(TAUS, rl_stats.performance_profile(np.concatenate(tasks), TAUS), lw=1, color=f"C{i}", label=name)
    right.axvline(1.0, color="tab:red", lw=1)
    right.set(xlabel="normalised score tau (0: random, 1: target)", ylabel="fraction of runs with score > tau", ylim=(0, 1.02))
    right.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, path)


def render(results_dir: Path, out: Path, figures_dir: Path) -> list[Path]:
    """Writes the page and its figures; returns the figure paths written."""
    records = load_records(results_dir)
    minatar_rows = load_minatar(results_dir)
    measured = measurement_per_config(records, minatar_rows)
    configs = shipped_configs()
    families = {title: [c for c in configs if c.family == title] for title, _, _ in FAMILIES}
    figures_dir.mkdir(parents=True, exist_ok=True)
    link = Path(os.path.relpath(figures_dir, out.parent)).as_posix()
    written, figures = [], {}
    for title, family in families.items():
        curves = [measured[c.name] for c in family if c.name in measured and measured[c.name].curves]
        if curves:
            name = f"curves_{slug(title)}.png"
            plot_curves(curves, figures_dir / name)
            written.append(figures_dir / name)
            figures[title] = f"{link}/{name}"
    plot_aggregate(measured, families, figures_dir / AGGREGATE_FIGURE)
    written.append(figures_dir / AGGREGATE_FIGURE)
    figures["aggregate"] = f"{link}/{AGGREGATE_FIGURE}"
    out.write_text(render_markdown(records, figures, minatar_rows))
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "results"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "results.md"))
    parser.add_argument("--figures", default=str(ROOT / "docs" / "results"))
    args = parser.parse_args(argv)
    written = render(Path(args.results), Path(args.out), Path(args.figures))
    print(f"wrote {args.out} and {len(written)} figures under {args.figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
