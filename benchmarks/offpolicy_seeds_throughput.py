"""Aggregate throughput of N off-policy agents trained in one program (``training.num_seeds``),
the warm-up and the learning phases apart, optionally against an earlier commit.

SAC (or TD3) on gymnax Pendulum-v1 with the ``configs/algo/<algo>.yaml`` settings (one env,
one env step and one gradient step per iteration, batch 256, [256, 256] networks, a 1M
buffer, learning and random actions from 5,000 env steps). For each N and each side, a fresh
process builds the population, compiles it (timed), runs ``--warmup`` iterations before the
learning starts (timed: env steps and buffer writes only), fills the buffers up to the learning
start (not timed), runs ``--iterations`` learning iterations (timed) and prints the aggregate
env steps/s of each phase over all agents. With ``--base COMMIT`` the same measurement runs
on that commit's ``evorl`` (a temporary ``git worktree``), alternating base and tree, so a
before/after pair shares the machine's state. Then a table, with each N's aggregate against
one agent's, and the estimated wall time of the issue's run (``training.num_iterations=8000``:
5,000 warm-up and 3,000 learning iterations) from the two phases' rates.

Also printed, for one agent's gradient step: XLA's FLOP count (``cost_analysis``) and the
GFLOP/s the learning phase reached, which says how close to compute-bound it is.

    python benchmarks/offpolicy_seeds_throughput.py [--algo sac] [--seeds 1 8] [--iterations 300]
        [--warmup 2000] [--base 362fa13]
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
LEARNING_STARTS = 5000


def run(algo: str, num_seeds: int, warmup: int, iterations: int) -> dict:
    import jax
    from omegaconf import OmegaConf

    from evorl.workflows import resolve_workflow_cls

    cfg = OmegaConf.to_container(OmegaConf.load(TREE / "configs" / "algo" / f"{algo}.yaml"))
    cfg["env"] = {"env_name": "Pendulum-v1", "env_type": "gymnax"}
    cfg["training"].update(num_seeds=num_seeds, learning_starts=LEARNING_STARTS, warmup_steps=LEARNING_STARTS)
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    compile_s = workflow.compile(state)

    def timed(state, n):
        start = time.perf_counter()
        state, _ = workflow.run_iterations(state, n)
        jax.block_until_ready(state)
        return state, time.perf_counter() - start

    state, warmup_s = timed(state, warmup)
    state, _ = workflow.run_iterations(state, LEARNING_STARTS - warmup)  # every timed iteration below learns
    state, learning_s = timed(state, iterations)
    return {"algo": algo, "num_seeds": num_seeds, "compile_s": round(compile_s, 1),
            "warmup_steps_per_s": round(num_seeds * warmup / warmup_s, 1),
            "learning_steps_per_s": round(num_seeds * iterations / learning_s, 2)}


def gradient_step_flops(algo: str) -> float:
    """XLA's FLOP count of one agent's learning iteration (its one gradient step, the rollout
    step and the buffer write): ``cost_analysis`` of the learner update compiled alone."""
    import jax
    import jax.numpy as jnp
    from omegaconf import OmegaConf

    from evorl.rl.rollout import Trajectory
    from evorl.workflows import resolve_workflow_cls
    from evorl.rl.off_policy import make_learner_update

    cfg = OmegaConf.to_container(OmegaConf.load(TREE / "configs" / "algo" / f"{algo}.yaml"))
    cfg["env"] = {"env_name": "Pendulum-v1", "env_type": "gymnax"}
    cfg["training"].update(learning_starts=0, warmup_steps=0)
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    tc = workflow.config.training
    update = make_learner_update(workflow.agent, workflow.optimizer, tc)
    state = workflow.init(jax.random.PRNGKey(0))
    obs = jnp.zeros((tc.rollout_length, tc.num_envs) + workflow.env.obs_space.shape, jnp.float32)
    actions = jnp.zeros((tc.rollout_length, tc.num_envs, workflow.agent.action_dim), jnp.float32)
    flags = jnp.zeros((tc.rollout_length, tc.num_envs), bool)
    example = Trajectory(obs=obs, actions=actions, rewards=flags.astype(jnp.float32), terminated=flags,
                         truncated=flags, next_obs=obs, extras={})
    state = state.replace(buffer=state.buffer.replace(size=jnp.asarray(tc.buffer_size, jnp.int32)))
    analysis = jax.jit(update).lower(state, example, jax.random.PRNGKey(1)).compile().cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return float(analysis["flops"])


def in_tree(tree: Path, args: list[str]) -> dict:
    """This script's measurement run by a fresh process on ``tree``'s ``evorl``."""
    code = (f"import sys; sys.path.insert(0, {str(tree)!r}); sys.argv = {[__file__, *args]!r}; "
            f"import runpy; runpy.run_path({__file__!r}, run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, check=True,
                         timeout=3600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", default="sac", choices=("sac", "td3"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--warmup", type=int, default=2000, help="timed iterations before learning starts")
    parser.add_argument("--iterations", type=int, default=300, help="timed learning iterations")
    parser.add_argument("--base", help="an earlier commit to measure beside this tree")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # run one N in this process
    parser.add_argument("--flops", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run(args.algo, args.one, args.warmup, args.iterations)))
        return
    if args.flops:
        print(json.dumps({"flops": gradient_step_flops(args.algo)}))
        return
    sides = {"tree": TREE}
    scratch = None
    if args.base:
        scratch = Path(tempfile.mkdtemp(prefix="evorl-offpolicy-ab-"))
        subprocess.run(["git", "-C", str(TREE), "worktree", "add", "--detach", str(scratch / "base"), args.base],
                       check=True, capture_output=True)
        sides = {"base": scratch / "base", "tree": TREE}
    rows: dict[tuple[str, int], list[dict]] = {}
    try:
        for _ in range(args.rounds):
            for n in args.seeds:
                for name, tree in sides.items():
                    row = in_tree(tree, ["--algo", args.algo, "--one", str(n), "--warmup", str(args.warmup),
                                         "--iterations", str(args.iterations)])
                    rows.setdefault((name, n), []).append(row)
                    print(json.dumps({"side": name, **row}), flush=True)
    finally:
        if scratch is not None:
            subprocess.run(["git", "-C", str(TREE), "worktree", "remove", "--force", str(scratch / "base")],
                           capture_output=True)
    flops = in_tree(TREE, ["--algo", args.algo, "--flops"])["flops"]

    def median(name, n, key):
        return statistics.median(r[key] for r in rows[(name, n)])

    print(f"\n{args.algo.upper()} Pendulum-v1, aggregate env steps/s over all agents (median of {args.rounds})")
    print(f"{'side':>5} {'agents':>6} {'compile s':>9} {'warm-up':>9} {'learning':>9} {'learning x one agent':>21} "
          f"{'8000-iteration run, est. s':>27}")
    for name in sides:
        one = median(name, args.seeds[0], "learning_steps_per_s") / args.seeds[0]
        for n in args.seeds:
            warm, learn = median(name, n, "warmup_steps_per_s"), median(name, n, "learning_steps_per_s")
            estimate = n * (LEARNING_STARTS / warm + 3000 / learn)
            print(f"{name:>5} {n:>6} {median(name, n, 'compile_s'):>9.1f} {warm:>9,.0f} {learn:>9,.1f} "
                  f"{learn / one:>21.2f} {estimate:>27,.0f}")
    learn_one = median("tree", args.seeds[0], "learning_steps_per_s") / args.seeds[0]
    print(f"\none agent's learning iteration: {flops / 1e6:,.0f} MFLOP (XLA cost analysis); at "
          f"{learn_one:,.1f} iterations/s that is {flops * learn_one / 1e9:,.1f} GFLOP/s")
    for n in args.seeds[1:]:
        learn = median("tree", n, "learning_steps_per_s")
        print(f"{n} agents: {flops * learn / 1e9:,.1f} GFLOP/s")


if __name__ == "__main__":
    main()
