"""Paired A/B of this working tree against an earlier commit: PPO throughput and the default job.

Checks out ``--base`` in a temporary ``git worktree`` and alternates the two trees, base first,
for ``--rounds`` rounds. Each run is a fresh process that imports the tree's own ``evorl``
(``sys.path[0]``, ahead of the editable install) and runs that tree's own script:

- ``ppo_throughput``: ``benchmarks/ppo_throughput.py --framework-only --seed S`` (CartPole-v1,
  4 envs x 128 steps, 976 iterations = 499,712 env steps; compile and env steps/s of the
  training chunk);
- ``default job``: ``scripts/train.py`` as the README's first command runs it (PPO CartPole,
  ``configs/config.yaml``), wall seconds of the whole process, and its logged metrics.

Printed: each run, the per-round ratios (this tree / base) and their medians, and whether
the default job's logged metrics (every key of ``metrics.jsonl`` that is not a time or a rate)
are identical on both sides.

    python benchmarks/ab_commit.py --base d33ba9c [--rounds 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent
#: Metric keys that measure time, not learning (left out of the identity check).
TIMING = ("steps_per_s", "compile", "seconds", "time", "wall")


def run_in(tree: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    prelude = f"import sys; sys.path.insert(0, {str(tree)!r}); "
    return subprocess.run([sys.executable, "-c", prelude + code], cwd=cwd, capture_output=True, text=True,
                          check=True, timeout=1800)


def throughput(tree: Path, seed: int) -> dict:
    script = tree / "benchmarks" / "ppo_throughput.py"
    code = (f"import runpy; sys.argv = ['ppo_throughput.py', '--framework-only', '--seed', '{seed}']; "
            f"runpy.run_path({str(script)!r}, run_name='__main__')")
    return json.loads(run_in(tree, code, tree).stdout.strip().splitlines()[-1])


def default_job(tree: Path, run_dir: Path) -> dict:
    code = (f"sys.argv = ['train.py', 'hydra.run.dir={run_dir}']; "
            f"from evorl.cli import train_command; train_command()")  # the path trees before and after the layer folders share
    start = time.perf_counter()
    run_in(tree, code, tree)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    metrics = [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in rows]
    return {"wall_s": wall, "metrics": metrics}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare against (any git revision)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="evorl-ab-"))
    base = scratch / "base"
    subprocess.run(["git", "-C", str(TREE), "worktree", "add", "--detach", str(base), args.base], check=True,
                   capture_output=True)
    sides = {"base": base, "tree": TREE}
    runs = {name: [] for name in sides}
    try:
        for round_ in range(args.rounds):
            for name, tree in sides.items():
                t = throughput(tree, args.seed)
                job = default_job(tree, scratch / f"run_{name}_{round_}")
                runs[name].append({**t, **job})
                print(f"round {round_} {name}: ppo_throughput {t['steps_per_s']:,.0f} env steps/s, compile "
                      f"{t['compile_s']:.2f} s, eval {t['eval_return']:.1f}; default job {job['wall_s']:.2f} s",
                      flush=True)
    finally:
        subprocess.run(["git", "-C", str(TREE), "worktree", "remove", "--force", str(base)], capture_output=True)
    for key, label in (("steps_per_s", "ppo_throughput env steps/s"), ("compile_s", "ppo_throughput compile s"),
                       ("wall_s", "default job wall s")):
        ratios = [b[key] / a[key] for a, b in zip(runs["base"], runs["tree"])]
        print(f"{label}: base {statistics.median(r[key] for r in runs['base']):,.2f}, "
              f"tree {statistics.median(r[key] for r in runs['tree']):,.2f}; tree / base per round "
              f"{', '.join(f'{r:.3f}' for r in ratios)} (median {statistics.median(ratios):.3f})")
    same = all(a["metrics"] == b["metrics"] for a, b in zip(runs["base"], runs["tree"]))
    print(f"default job's logged metrics identical on both sides in every round: {same}")


if __name__ == "__main__":
    main()
