"""evorl's plain and fast paths (:mod:`evorl.hardware`) against the single-function PPO
reference (``ppo_reference.py``), on whatever backend JAX finds; run by ``device_check.sh``.

Cases (``--quick``: CPU-sized, the same shapes with fewer iterations and seeds):

* ``cartpole``: ``ppo_throughput.py``'s CartPole job, 4 envs x 128 steps, 1 seed;
* ``cartpole-seeds``: the same with 1024 seeds in one program (``training.num_seeds``
  against a ``vmap`` of the reference; ``--quick``: 32);
* ``minatar-cnn``: ``configs/ppo_minatar_breakout.yaml`` with ``agent.network=cnn`` (64 x 128,
  a 16-channel 3x3 conv torso); the reference with ``lax.conv`` (plain) and im2col (fast);
* ``ant``: ``configs/ppo_brax_ant.yaml`` (mjx, 64 x 32, 10 epochs x 32 minibatches); the
  reference in the same shape, on the same brax backend.

evorl runs each case on the plain path (``evorl.hardware.use_fast_paths(False)``, what
``EVORL_FAST_PATHS=none`` gives), the backend's own choice (``auto``, what a user gets) and every
fast path (``True``), in that order (``DEVICE_CHECK_PATHS="plain auto"`` picks some), in one
process per case; the reference in another (for the CNN: ``lax.conv``, then im2col). Env steps/s (every
seed's) are timed after compilation and, for evorl, a one-iteration warm-up
(``block_until_ready``); compile seconds beside them. Each result is printed and appended to
``--out`` as a JSON line as soon as it is measured, so a run cut short keeps what it had.

    python benchmarks/device_check.py [--quick] [--cases cartpole ...] [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import children  # noqa: E402

#: Per case: (iterations, seeds) on a device / with ``--quick``.
SIZES = {
    "cartpole": ((200, 1), (20, 1)),
    "cartpole-seeds": ((20, 1024), (5, 32)),
    "minatar-cnn": ((30, 1), (1, 1)),
    "ant": ((30, 1), (1, 1)),
}
ANT_CONFIG = "ppo_brax_ant.yaml"


def size(case: str, quick: bool) -> tuple[int, int]:
    return SIZES[case][1 if quick else 0]


def evorl_config(case: str, quick: bool) -> dict:

    from ppo_throughput import framework_config

    iterations, seeds = size(case, quick)
    if case == "ant":
        cfg = _ant_config()
        cfg.pop("defaults", None)
        cfg["training"].update(num_iterations=iterations, eval_interval=iterations, eval_episodes=1)
    else:
        task = "breakout-cnn" if case == "minatar-cnn" else "cartpole"
        cfg = framework_config(0, num_envs=64 if case == "minatar-cnn" else 4, num_seeds=seeds, task=task)
        cfg["training"].update(num_iterations=iterations, eval_interval=iterations)
    return cfg


def reference_config(case: str, quick: bool):
    from ppo_reference import TASKS, RefConfig

    iterations, _ = size(case, quick)
    if case == "ant":
        c = _ant_config()
        a, t = c["agent"], c["training"]
        cfg = RefConfig(env="brax:" + c["env"]["env_name"], num_envs=t["num_envs"], rollout_length=t["rollout_length"],
                        num_epochs=t["num_epochs"], num_minibatches=t["num_minibatches"],
                        learning_rate=t["learning_rate"], ent_coef=a["ent_coef"], clip_epsilon=a["clip_epsilon"],
                        gamma=t["gamma"], gae_lambda=t["gae_lambda"], hidden=tuple(a["actor_hidden_layer_sizes"]),
                        activation=a["activation"], normalize_obs=a["normalize_obs"],
                        episode_length=c["env"]["episode_length"])
    else:
        cfg = TASKS["breakout-cnn" if case == "minatar-cnn" else "cartpole"]
    return dataclasses.replace(cfg, total_env_steps=iterations * cfg.num_envs * cfg.rollout_length)


def run_evorl(case: str, quick: bool) -> dict:
    import jax

    from evorl import hardware
    from evorl.workflows import PPOWorkflow

    cfg = evorl_config(case, quick)
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    compile_s = workflow.executor.compile(state)
    iterations = cfg["training"]["num_iterations"]
    state, _ = workflow.run_iterations(state, 1)  # warm-up, not timed
    jax.block_until_ready(state)
    start = time.perf_counter()
    state, _ = workflow.run_iterations(state, iterations)
    jax.block_until_ready(state)
    run_s = time.perf_counter() - start
    steps = workflow.num_agents * iterations * workflow.env_steps_per_iteration  # every seed's
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": steps, "steps_per_s": steps / run_s,
            "fast": {p: hardware.is_fast(p) for p in hardware.FAST_ON}}


def run_reference(case: str, quick: bool, conv: str) -> dict:
    import jax

    import ppo_reference

    cfg = dataclasses.replace(reference_config(case, quick), conv=conv)
    if cfg.env.startswith("brax:"):  # the reference builds spring envs; the config's backend instead
        from brax import envs

        backend, get = _ant_config()["env"]["backend"], envs.get_environment
        envs.get_environment = lambda name, **kw: get(name, **{**kw, "backend": backend})
    seeds = size(case, quick)[1]
    train, key = ppo_reference.make_train(cfg), jax.random.PRNGKey(0)
    if seeds > 1:
        train, key = jax.vmap(train), jax.random.split(key, seeds)
    start = time.perf_counter()
    compiled = jax.jit(train).lower(key).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(compiled(key))
    run_s = time.perf_counter() - start
    steps = cfg.num_iterations * cfg.num_envs * cfg.rollout_length * seeds
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": steps, "steps_per_s": steps / run_s, "conv": conv}


def _ant_config() -> dict:
    from omegaconf import OmegaConf  # as evorl reads it (PyYAML reads 3e-4 as a string)

    return OmegaConf.to_container(OmegaConf.load(HERE.parent / "configs" / ANT_CONFIG))


def one(args) -> None:
    """In a fresh process: one case on one side, every path of that side; JSON lines out, the
    first naming the backend and device."""
    import jax

    print(json.dumps({"backend": jax.default_backend(), "device": str(jax.devices()[0].device_kind)}), flush=True)
    if args.side == "evorl":
        from evorl import hardware

        for path in os.environ.get("DEVICE_CHECK_PATHS", "plain auto fast").split():
            with hardware.use_fast_paths({"plain": False, "auto": None, "fast": True}[path]):
                print(json.dumps({"path": path, **run_evorl(args.case, args.quick)}), flush=True)
    else:
        for conv in (("xla", "im2col") if args.case == "minatar-cnn" else ("xla",)):
            path = "plain" if conv == "xla" else "im2col conv"
            print(json.dumps({"path": path, **run_reference(args.case, args.quick, conv)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CPU-sized: fewer iterations and seeds")
    parser.add_argument("--cases", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--out", default="device_check_results.jsonl", help="JSON lines, appended")
    parser.add_argument("--timeout", type=float, help="seconds per process (default 300, --quick 900)")
    parser.add_argument("--one", nargs=2, metavar=("CASE", "SIDE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        args.case, args.side = args.one
        one(args)
        return
    # This process never opens the backend: a TPU can be held by one process at a time, and the
    # children measure. Each child names its backend and device in its first line.
    backend, device = "?", "?"
    header = {"quick": args.quick, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "load": os.getloadavg()[0]}
    print(json.dumps(header), flush=True)
    rows, timeout = [], args.timeout or (900 if args.quick else 300)
    with open(args.out, "a") as out:
        out.write(json.dumps(header) + "\n")
        for case in args.cases:
            for side in ("reference", "evorl"):
                cmd = [sys.executable, __file__, "--one", case, side] + (["--quick"] if args.quick else [])
                code, stdout, stderr = children.run(cmd, timeout=timeout)  # killed with its group on a stop
                if code is None:  # keep what it measured before
                    error = f"timed out after {timeout:.0f} s"
                else:
                    error = code and stderr.strip().splitlines()[-3:]
                lines = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
                for line in [x for x in lines if "backend" in x]:
                    backend, device = line["backend"], line["device"]
                    out.write(json.dumps({"case": case, "side": side, **line}) + "\n")
                lines = [x for x in lines if "backend" not in x]
                if error:
                    lines.append({"path": "?", "error": error})
                for r in lines:
                    r = {"case": case, "side": side, "iterations_seeds": size(case, args.quick), **r}
                    rows.append(r)
                    out.write(json.dumps(r) + "\n")
                    out.flush()
                    print(f"{case:15s} {side:9s} {r['path']:12s} " + (
                        f"{r['steps_per_s']:>13,.0f} env steps/s  compile {r['compile_s']:6.1f} s"
                        if "error" not in r else f"FAILED: {r['error']}"), flush=True)
    print(f"\n| case | side | path | env steps/s | compile s | vs reference (plain) |  ({backend}, {device})")
    print("|---|---|---|---:|---:|---:|")
    for r in rows:
        if "error" in r:
            continue
        ref = next((x for x in rows if x["case"] == r["case"] and x["side"] == "reference" and "error" not in x
                    and x["path"] == "plain"), None)
        ratio = f"x{r['steps_per_s'] / ref['steps_per_s']:.2f}" if ref else "-"
        print(f"| {r['case']} | {r['side']} | {r['path']} | {r['steps_per_s']:,.0f} | {r['compile_s']:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
