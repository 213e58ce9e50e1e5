"""PPO on MinAtar by MinAtar's rules at the published budget, many fresh seeds in one program.

Each game's shipped config (``configs/ppo_minatar_<game>.yaml``: sticky actions 0.1 in training
and evaluation, 10M env steps, 128 greedy evaluation episodes per agent) trains ``--seeds``
agents side by side (``training.num_seeds``) in one process, one game after another (a TPU is
held by one process at a time). Every finished game appends one JSON line to ``--out``:
settings, seeds, machine, wall and compile time, each agent's final greedy return, the
evaluation's standard error and the learning curve (mean, min and max over agents).

``--render FILE`` prints the table: per game the interquartile mean over seeds of the final
greedy return with its 95% bootstrap interval (:mod:`benchmarks.rl_stats`), beside
gymnax-blines' published PPO figure at the same budget.

    python benchmarks/minatar_published.py --seeds 8 --first-seed 66001            # a TPU/GPU
    python benchmarks/minatar_published.py --games breakout --seeds 2 --iterations 4  # a smoke run
    python benchmarks/minatar_published.py --render benchmarks/results/minatar/published.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import children  # noqa: E402
from rl_stats import iqm, iqm_interval  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GAMES = ("breakout", "asterix", "freeway", "space_invaders", "seaquest")

#: gymnax-blines' PPO at 10M env steps (the gymnax README's MinAtar table; its evaluation has
#: no sticky actions). Seaquest has no published PPO figure there.
PUBLISHED = {"asterix": 15.0, "breakout": 28.0, "freeway": 58.0, "space_invaders": 131.0}
PUBLISHED_SOURCE = "gymnax-blines PPO, 10M env steps (gymnax README)"


def run_game(game: str, args, run_dir: str) -> dict:
    """Train one game's config for ``args.seeds`` agents in a child process; read its run folder."""
    overrides = [f"seed={args.first_seed}", f"training.num_seeds={args.seeds}", f"hydra.run.dir={run_dir}"]
    if args.iterations:
        overrides += [f"training.num_iterations={args.iterations}",
                      f"training.eval_interval={max(1, args.iterations // 2)}"]
    if args.eval_episodes:
        overrides.append(f"training.eval_episodes={args.eval_episodes}")
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "train.py"), f"--config-name=ppo_minatar_{game}", *overrides]
    start = time.perf_counter()
    code, stdout, stderr = children.run(cmd, timeout=args.game_timeout or None, cwd=ROOT)
    wall = time.perf_counter() - start
    curve = read_curve(run_dir)
    if code != 0:  # a timeout keeps the evaluations it logged
        error = f"did not finish in {args.game_timeout:.0f} s" if code is None else (stderr or stdout)[-2000:]
        return {"game": game, "error": error, "wall_s": wall, "curve": curve}
    with open(os.path.join(run_dir, "run.json")) as f:
        run = json.load(f)
    with open(os.path.join(run_dir, "config.yaml")) as f:
        config_text = f.read()
    finals = run["final_eval_per_agent"]["eval/episode_return"]
    episodes = args.eval_episodes or _config_value(config_text, "eval_episodes")
    within_std = run["final_eval"].get("eval/episode_return_std")
    return {
        "game": game, "env": run["env"], "seed": args.first_seed, "agents": args.seeds,
        "final_returns": finals, "eval_episodes": episodes,
        "eval_standard_error": within_std / math.sqrt(episodes) if within_std is not None else None,
        "env_steps_per_agent": curve[-1]["env_steps"] if curve else None,
        "curve": curve, "wall_s": wall, "compile_s": run.get("compile_seconds"),
        "backend": run.get("backend"), "devices": run.get("devices"), "git_commit": run.get("git_commit"),
        "config": config_text,
    }


def read_curve(run_dir: str) -> list[dict]:
    """The periodic evaluations a run folder has logged so far (mean, min and max over agents)."""
    curve, path = [], os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return curve
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if "eval/episode_return" in m:
                curve.append({"env_steps": m["env_steps"], "wall_time": m["wall_time"],
                              "mean": m["eval/episode_return"], "min": m["eval/episode_return/min"],
                              "max": m["eval/episode_return/max"]})
    return curve


def _config_value(text: str, key: str) -> int:
    for line in text.splitlines():
        if line.strip().startswith(f"{key}:"):
            return int(line.split(":", 1)[1].split("#")[0])
    raise KeyError(key)


def render(path: str) -> str:
    """The markdown table of the last row of each game in ``path``."""
    rows = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "final_returns" in r:
                rows[r["game"]] = r
    lines = ["| game | seeds | env steps / seed | IQM final greedy return [95% CI] | min - max | "
             "eval s.e. | published PPO | where, wall s (compile s) |", "|---|---:|---:|---|---|---:|---:|---|"]
    for game in GAMES:
        if game not in rows:
            continue
        r = rows[game]
        x = np.asarray(r["final_returns"], dtype=float)
        point, lo, hi = iqm_interval([x])
        pub = PUBLISHED.get(game)
        lines.append(
            f"| {r['env']} | {r['agents']} | {r['env_steps_per_agent'] / 1e6:.1f}M | {point:.1f} [{lo:.1f}, {hi:.1f}] | "
            f"{x.min():.1f} - {x.max():.1f} | {r['eval_standard_error']:.2f} | {pub if pub is not None else '-'} | "
            f"{r['machine']}, {r['wall_s']:.0f} ({r['compile_s']:.0f}) |")
    if rows:
        first = rows[next(iter(rows))]
        lines.append(f"\nThe agents' keys are split from seed {first['seed']}, never used for tuning; "
                     f"published: {PUBLISHED_SOURCE}.")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--games", nargs="+", choices=GAMES, default=["breakout", "asterix", "freeway", "space_invaders"])
    p.add_argument("--seeds", type=int, default=8, help="agents per game, trained in one program")
    p.add_argument("--first-seed", type=int, default=66001, help="the run's seed: the agents' keys are split from it")
    p.add_argument("--iterations", type=int, default=0, help="override the budget (0: the config's 10M env steps)")
    p.add_argument("--eval-episodes", type=int, default=0, help="override the evaluation episodes (0: the config's)")
    p.add_argument("--game-timeout", type=float, default=0,
                   help="stop a game's run after this many seconds, keeping its evaluations so far (0: none)")
    p.add_argument("--budget-s", type=float, default=0, help="start no game after this many seconds (0: no limit)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "minatar", "published.jsonl"))
    p.add_argument("--runs", default=None, help="folder for the run folders (default: beside --out)")
    p.add_argument("--machine", default=platform.node(), help="the machine's name in the results")
    p.add_argument("--render", metavar="FILE", help="print the table of FILE and exit")
    args = p.parse_args()
    if args.render:
        print(render(args.render))
        return
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")
    runs = args.runs or os.path.join(os.path.dirname(os.path.abspath(args.out)), "minatar_runs")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    start = time.perf_counter()
    for game in args.games:
        if args.budget_s and time.perf_counter() - start > args.budget_s:
            print(f"{game}: not started (past --budget-s {args.budget_s:.0f})", flush=True)
            continue
        row = run_game(game, args, os.path.join(runs, game))
        row.update(machine=args.machine, load=os.getloadavg(), cpus=os.cpu_count(),
                   time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        if "error" in row:
            last = row["curve"][-1] if row["curve"] else None
            print(f"{game}: FAILED after {row['wall_s']:.0f} s: {row['error'][-500:]}"
                  + (f" (last evaluation: {last['mean']:.1f} at {last['env_steps']:,} env steps)" if last else ""), flush=True)
        else:
            x = np.asarray(row["final_returns"])
            print(f"{game}: IQM {iqm(x):.1f} over {len(x)} seeds (min {x.min():.1f}, max {x.max():.1f}); "
                  f"s.e. {row['eval_standard_error']:.2f}; {row['wall_s']:.0f} s, compile {row['compile_s']:.0f} s", flush=True)
    if os.path.exists(args.out):
        print(render(args.out))


if __name__ == "__main__":
    main()
