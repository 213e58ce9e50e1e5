"""One config with overrides on a few seeds, every periodic evaluation printed: how a config
behaves over its budget, where ``benchmarks/run.py`` prints each seed's verdict only.

    python benchmarks/diagnose.py dqn_cartpole --seeds 300,301 --target 475 \\
        --set training.num_updates=20 --set training.eval_interval=250 [--group algo=dqn]

``--set KEY=VALUE`` values are read as YAML (``[256, 256]``, ``1e-3``, ``null``). Per seed one
line: the final greedy return, the env steps of the first evaluation at ``--target`` (out of
the run's), whether it collapsed and whether the seed passes ``run.py``'s rule (at the target at
the end, first by 70% of the budget, no collapse: final normalised score >= 0.9 x the best, the
untrained policy's mean return with sampled actions over the seeds' initial states as the score's
0, as run.py's), and every evaluation's return.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import COLLAPSE_FRACTION, MARGIN_FRACTION, FirstReached, load_config, random_return  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--seeds", required=True, help="comma-separated seeds")
    parser.add_argument("--target", type=float, required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP=CHOICE",
                        help="a group choice of the composed config (algo=dqn)")
    args = parser.parse_args(argv)
    overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    groups = dict(item.split("=", 1) for item in args.group)

    import jax

    from evorl.workflows import resolve_workflow_cls

    cfg = load_config(args.config, overrides, groups)
    first = FirstReached(args.target)
    workflow_cls = resolve_workflow_cls(cfg["workflow_cls"])
    workflow = workflow_cls.build_from_config(cfg, recorders=[first])
    total = workflow.config.training.num_iterations * workflow.env_steps_per_iteration
    seeds = tuple(int(s) for s in args.seeds.split(","))
    zero = random_return(cfg, workflow_cls, seeds)  # the score's 0, as run.py's
    for seed in seeds:
        state, start = workflow.init(jax.random.PRNGKey(seed)), time.perf_counter()
        first.start()
        state = workflow.learn(state)
        final = workflow.evaluate(state)["eval/episode_return"]
        reached = None if first.reached is None else first.reached[0]
        best = max([final, *first.evaluations])
        collapsed = best > zero and (final - zero) < COLLAPSE_FRACTION * (best - zero)
        passed = final >= args.target and not collapsed and reached is not None and reached <= MARGIN_FRACTION * total
        print(f"seed {seed}: final {final:.1f}, first at target {reached}/{total}, collapsed {collapsed} (best "
              f"{best:.1f}, random {zero:.1f}), passes {passed}, "
              f"{time.perf_counter() - start:.0f} s; evaluations {' '.join(f'{e:.0f}' for e in first.evaluations)}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
