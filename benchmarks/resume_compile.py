"""How long a resumed run compiles with a warm persistent compilation cache, and whether the
cache served its training program, appended as JSON lines to ``results/tooling/resume_compile.jsonl``.

Two resumes of ``ppo_cartpole`` (4 evaluation points of 2 iterations), each after a first run
that filled a fresh cache (``EVORL_COMPILATION_CACHE``):

* ``longer``: the run trains 4 iterations, then ``resume=<run> training.num_iterations=6``
  (the resume of the Experiments page);
* ``interrupted``: the run trains 6 iterations, its newest checkpoint is removed and run.json
  says ``interrupted`` (as a run stopped after iteration 4), then ``resume=<run>``.

Each line has both runs' "compiled in" seconds (tracing, lowering and compiling or reading
the cache) and the number of training programs (``jit__program-*``) in the cache after each:
one after the resume means the resume found the first run's program.

    python benchmarks/resume_compile.py [--checkout PATH]   # PATH: the evorl to measure (default: this one)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "tooling" / "resume_compile.jsonl"
TRAIN = ["--config-name=ppo_cartpole", "training.eval_interval=2", "logging.console=lines"]


def train(args: list[str], env: dict, cwd: Path) -> float:
    """Runs ``evorl-train args``; the seconds of its "compiled in" line."""
    proc = subprocess.run([sys.executable, "-c", "from evorl.app.cli import train_command; train_command()", *args],
                          env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return float(re.search(r"compiled in ([0-9.]+) s", proc.stdout).group(1))


def programs(cache: Path) -> int:
    return sum(1 for p in cache.iterdir() if p.name.startswith("jit__program-"))


def scenario(name: str, checkout: Path, work: Path) -> dict:
    cache, run = work / f"cache_{name}", work / f"run_{name}"
    env = {**os.environ, "PYTHONPATH": str(checkout), "EVORL_COMPILATION_CACHE": str(cache)}
    first_iterations = 4 if name == "longer" else 6
    first = train([*TRAIN, f"training.num_iterations={first_iterations}", f"hydra.run.dir={run}"], env, work)
    after_first = programs(cache)
    if name == "longer":
        resume_args = [f"resume={run}", "training.num_iterations=6", "logging.console=lines"]
    else:
        shutil.rmtree(run / "checkpoints" / "6")
        info = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**info, "status": "interrupted"}))
        resume_args = [f"resume={run}", "logging.console=lines"]
    resumed = train(resume_args, env, work)
    return {"scenario": name, "first_compile_s": first, "resume_compile_s": resumed,
            "programs_after_first": after_first, "programs_after_resume": programs(cache)}


def commit(checkout: Path) -> str | None:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    return out.stdout.strip() or None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the evorl checkout to measure")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("longer", "interrupted"):
            load = os.getloadavg()[0]
            record = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      "commit": commit(args.checkout), **scenario(name, args.checkout.resolve(), Path(tmp)),
                      "cores": os.cpu_count(), "load_1min_before": round(load, 2)}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
