"""One writer per run folder: a second run into a live run folder (new or resumed) is refused
naming the process that holds it; a lock left by a process that has ended is taken over."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import TINY

from evorl.app.experiment import run_experiment
from evorl.app.run_folder import LOCK_FILE, RunFolderInUse

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}

#: A run into argv[1] that starts when the file argv[2] appears, exiting as evorl-train does.
RACER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from conftest import TINY
    from evorl.app.cli import exit_on_config_error
    from evorl.app.experiment import run_experiment

    while not Path(sys.argv[2]).exists():
        time.sleep(0.01)
    with exit_on_config_error():
        run_experiment(TINY, output_dir=sys.argv[1])
""")

#: Holds the lock of the run folder argv[1] until killed.
HOLDER = textwrap.dedent("""
    import sys, time
    from evorl.app.run_folder import RunFolderLock

    with RunFolderLock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(600)
""")


@pytest.mark.slow  # ~56 s on 2 cores at load 8-10 (2026-12-03)
def test_two_runs_racing_into_one_folder_one_runs_the_other_is_refused(tmp_path):
    run_dir, go = tmp_path / "run", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(run_dir), str(go)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV) for _ in range(2)]
    time.sleep(1.0)  # both import while waiting
    go.touch()
    results = [(p, *p.communicate(timeout=300)) for p in procs]
    [(winner, _, _)] = [r for r in results if r[0].returncode == 0]
    [(loser, _, err)] = [r for r in results if r[0].returncode != 0]
    assert loser.returncode == 2, err
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("evorl:")]
    assert line.startswith(f"evorl: {run_dir} is in use by process {winner.pid} on "), err
    assert "Wait for it to end or stop it, or choose another folder." in line
    assert json.loads((run_dir / "run.json").read_text())["pid"] == winner.pid
    records = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["iteration"] for r in records] == [1, 2, 3, 4, 5, 6]  # one writer, not interleaved
    assert not (run_dir / LOCK_FILE).exists()  # released at the end


def test_a_lock_left_by_an_ended_process_is_taken_over(tiny_cfg, tmp_path, capfd):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(ended.stdout)
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": dead_pid, "host": "thishost", "start_time": "then"}))
    tiny_cfg["training"]["num_iterations"] = 2
    run_experiment(tiny_cfg, output_dir=tmp_path)
    err = capfd.readouterr().err
    assert f"taking over the lock of process {dead_pid} on thishost (started then), which has ended" in err
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "finished"
    assert not (tmp_path / LOCK_FILE).exists()


@pytest.mark.slow  # ~36 s on 2 cores at load 8-10 (2026-12-03)
def test_resume_into_a_live_run_is_refused_and_changes_nothing(tiny_cfg, tmp_path):
    tiny_cfg["training"]["num_iterations"] = 2
    run_experiment(tiny_cfg, output_dir=tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env=ENV)
    try:
        assert holder.stdout.readline() == "locked\n"
        before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
        with pytest.raises(RunFolderInUse, match=f"{tmp_path} is in use by process {holder.pid} on "):
            run_experiment({**tiny_cfg, "resume": str(tmp_path)})
        assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == holder.pid  # the holder's lock stays
    finally:
        holder.kill()
        holder.wait()
    resumed = run_experiment({**tiny_cfg, "resume": str(tmp_path)})  # its holder died: the lock is free
    assert int(resumed.state.iteration) == 2
