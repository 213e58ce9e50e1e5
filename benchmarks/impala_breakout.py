"""IMPALA on MinAtar Breakout (``configs/impala_breakout.yaml``, ~3M env steps by default).

Prints the learning curve (one line per evaluation), then the evaluation return reached, the
wall time (with and without compilation) and the throughput.

Usage: python benchmarks/impala_breakout.py [--iterations N] [--config impala_breakout]
"""

import argparse
import time

from _common import load_config, train


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="impala_breakout")
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    overrides = {} if args.iterations is None else {"num_iterations": args.iterations}
    cfg = load_config(args.config, **overrides)
    start = time.perf_counter()
    workflow, _, rows = train(cfg, args.seed)
    wall = time.perf_counter() - start
    for row in rows:
        ratio = row.get("train/max_importance_ratio", float("nan"))
        print(f"env_steps={int(row['env_steps']):>9,} train_return={row['train/episode_return']:6.2f} "
              f"eval_return={row['eval/episode_return']:6.2f} max_importance_ratio={ratio:.2f}")
    best = max(row["eval/episode_return"] for row in rows)
    steps = rows[-1]["env_steps"]
    print(f"{workflow.name()} {cfg['env']['env_name']}: {int(steps):,} env steps, final eval return "
          f"{rows[-1]['eval/episode_return']:.2f} (best {best:.2f}, train return {rows[-1]['train/episode_return']:.2f}); "
          f"wall time {wall:.0f} s incl. compile {workflow.compile_seconds:.1f} s "
          f"({steps / (wall - workflow.compile_seconds):,.0f} env steps/s incl. evaluation)")


if __name__ == "__main__":
    main()
