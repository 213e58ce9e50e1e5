"""``evorl-plot RUN_DIR... [-o learning_curve.png]``: learning curves of one or many runs.

Each argument is a run folder or a folder holding run folders (a Hydra sweep folder);
runs that differ only in their seed are drawn as one curve: the interquartile mean over
seeds (the mean below 4 seeds) with a 95% bootstrap confidence band. Each curve is labelled
by what sets its runs apart: algorithm and env (``-m algo=ppo,a2c env=cartpole,acrobot``),
then the keys a sweep varied. One group (e.g. one run) also shows its training return beside
the evaluation return. The PNG's default name is the one a run folder's own plot has.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def find_runs(paths: list[str]) -> list[Path]:
    """Run folders (those holding ``metrics.jsonl``) at or below ``paths``, in order."""
    from evorl.app.run_folder import METRICS_JSONL

    runs: list[Path] = []
    for path in map(Path, paths):
        found = [path] if (path / METRICS_JSONL).is_file() else sorted(p.parent for p in path.rglob(METRICS_JSONL))
        if not found:
            raise FileNotFoundError(f"{path} holds no run folder (no {METRICS_JSONL} at or below it).")
        runs += [r for r in found if r not in runs]
    return runs


def main(argv: list[str] | None = None) -> None:
    from evorl.app.cli_help import plain
    from evorl.app.run_folder import CURVE_PNG

    parser = argparse.ArgumentParser(prog="evorl-plot", description=plain(__doc__),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run folders, or folders holding them (e.g. multirun/...)")
    parser.add_argument("-o", "--out", default=CURVE_PNG, help=f"PNG to write (default: {CURVE_PNG})")
    parser.add_argument("--metric", action="append", dest="metrics",
                        help="metric of metrics.jsonl to plot, may be repeated (default: eval/episode_return, "
                             "and train/episode_return for a single group)")
    args = parser.parse_args(argv)
    from evorl.app.plotting import plot_runs

    try:
        runs = find_runs(args.runs)
        plot = plot_runs(runs, args.out, metrics=args.metrics)
    except (FileNotFoundError, ValueError) as e:
        print(f"evorl-plot: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"{plot.path} ({len(runs)} run{'s' if len(runs) != 1 else ''})")


if __name__ == "__main__":
    main()
