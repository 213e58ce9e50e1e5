"""The command's exit without the interpreter's teardown: exit handlers run, output is flushed,
the status is kept, and a live non-daemon thread is waited for."""

import subprocess
import sys

import pytest

SCRIPT = """
import atexit, logging, sys, threading, time
from evorl.app.cli import exit_without_teardown
out = sys.argv[1]
logging.basicConfig(filename=out + ".log", level=logging.INFO)
logging.info("logged before the exit")  # written when logging's exit handler closes the file
atexit.register(lambda: open(out + ".atexit", "w").write("ran"))
if sys.argv[2] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.5), open(out + ".thread", "w").write("done"))).start()
print("unflushed", end="")
sys.stderr.write("err")
exit_without_teardown(3)
print("not reached")
"""


@pytest.mark.parametrize("case", ["alone", "thread"])
def test_exit_runs_handlers_flushes_and_keeps_status(tmp_path, case):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out), case], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "unflushed" and proc.stderr.endswith("err")
    assert (tmp_path / "run.atexit").read_text() == "ran"
    assert "logged before the exit" in (tmp_path / "run.log").read_text()
    if case == "thread":  # the normal exit, which waits for the thread
        assert (tmp_path / "run.thread").read_text() == "done"
