"""Wall time and peak memory of the README's test command (``python -m pytest``: the default
set, two workers), appended as one JSON line to ``results/tooling/test_suite_footprint.jsonl``.

Each pytest process (the controller and each xdist worker) writes its peak resident memory
at the end of the session (``tests/conftest.py``, under ``EVORL_TEST_FOOTPRINT_DIR``); the
line records them with the wall time, the pytest summary, the machine's cores and its load
average (1 min: before, then sampled every 10 s while it runs, mean and max; other jobs on
the machine slow the suite down, so compare lines at similar load), and the commit.

    python benchmarks/test_suite_footprint.py [-- extra pytest arguments, e.g. -m slow]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "tooling" / "test_suite_footprint.jsonl"


def commit() -> str | None:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None


def summary_counts(output: str) -> dict[str, int]:
    """``{"passed": 1003, "skipped": 12, ...}`` from pytest's last summary line."""
    lines = [line for line in output.splitlines() if re.search(r"\b(passed|failed|error)", line)]
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", lines[-1])} if lines else {}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pytest_args", nargs="*", help="extra arguments for pytest (after --)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the JSONL file the line is appended to")
    args = parser.parse_args(argv)
    command = [sys.executable, "-m", "pytest", *args.pytest_args]
    with tempfile.TemporaryDirectory() as peaks:
        load_before, loads, finished = os.getloadavg()[0], [], threading.Event()

        def sample_load():
            while not finished.wait(10.0):
                loads.append(os.getloadavg()[0])

        sampler = threading.Thread(target=sample_load, daemon=True)
        sampler.start()
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "EVORL_TEST_FOOTPRINT_DIR": peaks},
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
        finished.set()
        sampler.join()
        processes = {p.stem: json.loads(p.read_text())["peak_rss_mb"] for p in sorted(Path(peaks).glob("*.json"))}
        # per worker, the files that raised its peak, largest rise first (tests/conftest.py)
        raised = {}
        for p in sorted(Path(peaks).glob("*.files.jsonl")):
            rows = [json.loads(x) for x in p.read_text().splitlines()]
            rows.sort(key=lambda r: r["peak_after_mb"] - r["peak_before_mb"], reverse=True)
            raised[p.name.split(".")[0]] = rows[:5]
    print(done.stdout[-3000:], done.stderr[-2000:], sep="\n")
    workers = {k: v for k, v in processes.items() if k != "controller"}
    record = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "command": "python -m pytest" + "".join(f" {a}" for a in args.pytest_args),
        "exit_status": done.returncode,
        "wall_s": round(wall, 1),
        "tests": summary_counts(done.stdout),
        "peak_rss_mb": processes,
        "max_worker_peak_rss_mb": max(workers.values(), default=None),
        "files_raising_peak": raised,
        "cores": os.cpu_count(),
        "load_1min_before": round(load_before, 2),
        "load_1min_mean": round(sum(loads) / len(loads), 2) if loads else None,
        "load_1min_max": round(max(loads), 2) if loads else None,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record))
    return record


if __name__ == "__main__":
    main()
