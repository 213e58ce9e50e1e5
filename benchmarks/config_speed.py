"""Shipped configs timed as a user runs them, on whatever backend JAX finds.

Each ``NAME[:key=value,...]`` runs ``scripts/train.py --config-name=NAME`` with those overrides
in its own child process (one at a time: a TPU is held by one process), and appends one JSON
line to ``--out``: the config and overrides, the backend and device, compile seconds, wall
seconds of the whole process, the run's last logged ``steps_per_s`` (the env steps of every agent
per second of training, evaluation included) and its final greedy return. A population (ES,
PBT, CEM-RL) counts every member's env steps.

    python benchmarks/config_speed.py es_openes_cartpole pbt_ppo_cartpole:training.num_iterations=50
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import children  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse(spec: str) -> tuple[str, list[str]]:
    """``NAME[:k=v,k=v]`` -> (NAME, ["k=v", ...])."""
    name, _, rest = spec.partition(":")
    overrides = [o for o in rest.split(",") if o]
    for o in overrides:
        if "=" not in o:
            raise SystemExit(f"override {o!r} of {spec!r} is not key=value")
    return name, overrides


def run(spec: str, timeout: float) -> dict:
    name, overrides = parse(spec)
    run_dir = tempfile.mkdtemp(prefix=f"config_speed_{name}_")
    cmd = [sys.executable, os.path.join(ROOT, "scripts", "train.py"), f"--config-name={name}",
           *overrides, f"hydra.run.dir={run_dir}"]
    row = {"config": name, "overrides": overrides, "fast_paths": os.environ.get("EVORL_FAST_PATHS", "auto"),
           "machine": platform.node(), "cpus": os.cpu_count(),
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    start = time.perf_counter()
    code, stdout, stderr = children.run(cmd, timeout=timeout, cwd=ROOT)
    row["wall_s"] = time.perf_counter() - start
    row["load"] = os.getloadavg()
    if code is None:  # the console says which phase it was in
        return {**row, "error": f"did not finish in {timeout:.0f} s", "console_tail": (stdout + stderr)[-1500:]}
    if code != 0:
        return {**row, "error": (stderr or stdout)[-1500:]}
    with open(os.path.join(run_dir, "run.json")) as f:
        info = json.load(f)
    last = None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            last = json.loads(line)
    final = info.get("final_eval", {})
    return {**row, "backend": info.get("backend"), "devices": info.get("devices"), "git_commit": info.get("git_commit"),
            "compile_s": info.get("compile_seconds"), "env_steps": (last or {}).get("env_steps"),
            "steps_per_s": (last or {}).get("steps_per_s"),
            "final_return": final.get("eval/episode_return", final.get("eval/best_return")),
            "console_tail": stdout[-600:]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("configs", nargs="+", metavar="NAME[:key=value,...]")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "config_speed.jsonl"))
    p.add_argument("--timeout", type=float, default=300, help="seconds per config")
    args = p.parse_args()
    for spec in args.configs:
        parse(spec)  # refuse a malformed spec before anything runs
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    for spec in args.configs:
        row = run(spec, args.timeout)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        if "error" in row:
            print(f"{spec}: FAILED ({row['wall_s']:.0f} s): {row['error'][-400:]}", flush=True)
        else:
            print(f"{spec}: {row['steps_per_s'] or 0:,.0f} env steps/s, compile {row['compile_s'] or 0:.1f} s, "
                  f"wall {row['wall_s']:.0f} s, final return {row['final_return']}", flush=True)


if __name__ == "__main__":
    main()
