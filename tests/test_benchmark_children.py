"""The measuring scripts' children die with their group: a child left running would hold a TPU."""

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import children  # noqa: E402

GRANDCHILD = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
              "print(p.pid, flush=True); time.sleep(60)")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (ended, not yet reaped by its parent) counts as ended
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_a_timeout_kills_the_child_and_what_it_started_and_keeps_its_output():
    start = time.perf_counter()
    code, out, _ = children.run([sys.executable, "-c", GRANDCHILD], timeout=3)
    assert code is None and time.perf_counter() - start < 30
    grandchild = int(out.split()[0])  # printed before the timeout: kept
    for _ in range(50):
        if not alive(grandchild):
            break
        time.sleep(0.1)
    assert not alive(grandchild)


def test_terminating_the_parent_kills_its_running_children():
    parent = ("import sys; sys.path.insert(0, %r); import children; "
              "children.run([sys.executable, '-c', %r])") % (str(Path(children.__file__).parent), GRANDCHILD)
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    grandchild = None
    try:
        time.sleep(3)
        assert proc.poll() is None
        proc.terminate()
        assert proc.wait(timeout=20) != 0
    finally:
        proc.kill()
    # the child's own child never reached our stdout (children.run captures it): find it by parentage
    leftovers = subprocess.run(["pgrep", "-f", "time.sleep\\(60\\)"], capture_output=True, text=True).stdout.split()
    for pid in map(int, leftovers):
        for _ in range(50):
            if not alive(pid):
                break
            time.sleep(0.1)
        grandchild = pid if alive(pid) else grandchild
    assert grandchild is None, f"process {grandchild} outlived its terminated parent"
