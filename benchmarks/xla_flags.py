"""XLA CPU flags against the PPO throughput job: which ones make small-network RL faster here.

Each flag set runs ``ppo_throughput.py``'s evorl job and the single-function reference
(``ppo_reference.py``) in fresh processes with ``XLA_FLAGS`` set, the sets interleaved over
``--repeats`` rounds so that drift in the machine's speed hits every set alike. Prints the
median env steps/s and compile seconds of each side per set, and the ratio to no flags. A
flag that pays for both sides is a candidate for the library's own compiler options
(``jax.jit(..., compiler_options=...)``), set only where this table shows it helps.

    python benchmarks/xla_flags.py [--repeats 2] [--steps 250000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLAG_SETS = [
    "",
    "--xla_cpu_use_xnnpack=true",
    "--xla_cpu_use_onednn=true",
    "--xla_cpu_multi_thread_eigen=false",
    "--xla_cpu_enable_concurrency_optimized_scheduler=true",
    "--xla_cpu_use_fusion_emitters=false",
]


def run(args: list[str], flags: str) -> dict | None:
    env = {**os.environ, "XLA_FLAGS": flags}
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return None  # the flag does not exist in this jaxlib, or breaks the program
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=250_000, help="reference env steps per run")
    args = parser.parse_args()
    sides = {"evorl": [str(HERE / "ppo_throughput.py"), "--framework-only"],
             "reference": [str(HERE / "ppo_reference.py"), "--json", "--total-env-steps", str(args.steps)]}
    results: dict[tuple[str, str], list[dict]] = {}
    for _ in range(args.repeats):
        for flags in FLAG_SETS:
            for side, cmd in sides.items():
                r = run(cmd, flags)
                results.setdefault((flags, side), []).append(r)
                figure = "failed" if r is None else f"{r['steps_per_s']:,.0f} steps/s, compile {r['compile_s']:.1f} s"
                print(f"{flags or '(none)':55s} {side:9s} {figure}", flush=True)
    print("\n| flags | evorl steps/s | x none | reference steps/s | x none | evorl compile s | reference compile s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    med = {k: (statistics.median(r["steps_per_s"] for r in v if r) if all(v) else None,
               statistics.median(r["compile_s"] for r in v if r) if all(v) else None) for k, v in results.items()}
    for flags in FLAG_SETS:
        (e, ec), (f, fc) = med[(flags, "evorl")], med[(flags, "reference")]
        if e is None or f is None:
            print(f"| `{flags}` | failed | | | | | |")
            continue
        e0, f0 = med[("", "evorl")][0], med[("", "reference")][0]
        print(f"| `{flags or '(none)'}` | {e:,.0f} | {e / e0:.2f} | {f:,.0f} | {f / f0:.2f} | {ec:.1f} | {fc:.1f} |")


if __name__ == "__main__":
    main()
