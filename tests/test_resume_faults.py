"""Run folders that are damaged, stale or resumed wrongly (issue "Faults and bad input, round
two"): each is refused or repaired with one clear message, and a refusal changes nothing."""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import TINY

from evorl.app.checkpoint import CheckpointError
from evorl.config import ConfigError
from evorl.app.experiment import run_experiment
from evorl.app.run_folder import read_jsonl


def tiny(num_iterations):
    return {**TINY, "training": {**TINY["training"], "num_iterations": num_iterations}}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run of two iterations (a checkpoint at iteration 2)."""
    return run_experiment(tiny(2), output_dir=tmp_path_factory.mktemp("finished") / "run").run_dir


@pytest.fixture
def run_copy(finished, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(finished, run_dir)
    return run_dir


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)


@pytest.mark.slow
def test_resume_takes_a_file_of_the_run_folder_as_the_folder(run_copy):
    resumed = run_experiment({**tiny(4), "resume": str(run_copy / "run.json")})
    assert resumed.run_dir == run_copy and int(resumed.state.iteration) == 4


def test_a_config_yaml_that_is_not_utf8_is_a_config_error_naming_it(run_copy):
    """What resume= (and evorl-eval) read; it names where the config is kept too."""
    from evorl.app.run_folder import load_run_config

    (run_copy / "config.yaml").write_bytes(b"seed: 3\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"config.yaml is not UTF-8 text \(byte 0xe9 at line 2, column 6\).*"
                                          r"checkpoints/2/meta/metadata"):
        load_run_config(run_copy)


@pytest.mark.parametrize("garbled", [pytest.param(b'{"status": "\xff"}', marks=pytest.mark.slow), b"not json",
                                     pytest.param(b"[1, 2]", marks=pytest.mark.slow)])  # each a resumed run
def test_a_garbled_run_json_is_set_aside_in_one_line_and_the_resume_goes_on(run_copy, capfd, garbled):
    (run_copy / "run.json").write_bytes(garbled)
    resumed = run_experiment({**tiny(4), "resume": str(run_copy)})
    assert int(resumed.state.iteration) == 4
    [line] = [line for line in capfd.readouterr().err.splitlines() if line.startswith("evorl:")]
    assert f"{run_copy / 'run.json'} cannot be read" in line and "run.json.unreadable" in line, line
    assert (run_copy / "run.json.unreadable").read_bytes() == garbled
    info = json.loads((run_copy / "run.json").read_text())
    assert info["status"] == "finished" and info["resumes"][0]["from_iteration"] == 2
    run_experiment({**tiny(4), "resume": str(run_copy)})  # and the next resume too (nothing left to train)
    assert len(json.loads((run_copy / "run.json").read_text())["resumes"]) == 2


def test_a_stale_running_status_reads_as_interrupted(run_copy, capfd):
    """run.json says 'running', its process is dead and the folder's lock is free."""
    from evorl.app.run_folder import read_run_info

    pid = dead_pid()
    info = json.loads((run_copy / "run.json").read_text())
    (run_copy / "run.json").write_text(json.dumps({**info, "status": "running", "pid": pid, "end_time": None}))
    (run_copy / "run.lock").write_text(json.dumps({"pid": pid, "host": "thishost", "start_time": "then"}))
    info = read_run_info(run_copy)  # inspecting it
    assert info["status"] == "interrupted" and info["reason"] == f"process {pid} no longer running"
    assert json.loads((run_copy / "run.json").read_text())["status"] == "interrupted"  # and updated

    (run_copy / "run.json").write_text(json.dumps({**info, "status": "running", "reason": None}))
    run_experiment({**tiny(4), "resume": str(run_copy)})  # resuming it
    [line] = [line for line in capfd.readouterr().err.splitlines() if line.startswith("evorl:")]
    assert f"process {pid}" in line and "interrupted" in line, line
    info = json.loads((run_copy / "run.json").read_text())
    assert info["status"] == "finished" and "reason" not in info
    assert info["resumes"][0]["previous_status"] == "interrupted"
    assert info["resumes"][0]["previous_reason"] == f"process {pid} no longer running"


def test_a_live_run_is_not_stale(run_copy):
    from evorl.app.run_folder import RunFolderLock, read_run_info

    info = json.loads((run_copy / "run.json").read_text())
    (run_copy / "run.json").write_text(json.dumps({**info, "status": "running"}))
    with RunFolderLock(run_copy):
        assert read_run_info(run_copy)["status"] == "running"


def test_a_resumed_run_that_finishes_keeps_no_old_reason(run_copy):
    info = json.loads((run_copy / "run.json").read_text())
    failed = {**info, "status": "failed", "reason": "TrainingDiverged: training diverged by iteration 2"}
    (run_copy / "run.json").write_text(json.dumps(failed))
    run_experiment({**tiny(4), "resume": str(run_copy)})
    info = json.loads((run_copy / "run.json").read_text())
    assert info["status"] == "finished" and "reason" not in info
    assert info["resumes"][0]["previous_reason"] == failed["reason"]


def test_resuming_with_fewer_iterations_than_the_checkpoint_is_refused_and_changes_nothing(run_copy):
    before = snapshot(run_copy)
    with pytest.raises(ConfigError, match=r"training.num_iterations=1 .* iteration 2.*nothing"):
        run_experiment({**tiny(1), "resume": str(run_copy)})
    assert snapshot(run_copy) == before


def test_an_edited_checkpoint_iteration_is_refused_and_deletes_no_metrics(run_copy):
    resumed = run_experiment({**tiny(4), "resume": str(run_copy)})  # checkpoints 2 and 4
    assert [r["iteration"] for r in read_jsonl(run_copy / "metrics.jsonl")] == [1, 2, 3, 4]
    meta_file = run_copy / "checkpoints" / "4" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "iteration": 3}))
    before = snapshot(run_copy)
    with pytest.raises(CheckpointError, match=r"checkpoints/4 cannot be read \(its metadata says iteration 3"):
        run_experiment({**tiny(6), "resume": str(run_copy)})
    assert snapshot(run_copy) == before
    assert int(resumed.state.iteration) == 4


def test_a_fresh_run_reuses_a_folder_without_checkpoints(run_copy):
    """What the 'no checkpoint yet' error advises: the old metrics are not kept with the new ones."""
    shutil.rmtree(run_copy / "checkpoints")
    with pytest.raises(CheckpointError, match="has no checkpoint yet"):
        run_experiment({**tiny(2), "resume": str(run_copy)})
    run_experiment(tiny(2), output_dir=run_copy)
    assert [r["iteration"] for r in read_jsonl(run_copy / "metrics.jsonl")] == [1, 2]


def test_a_lost_peer_names_the_run_folder_to_resume(monkeypatch, tmp_path):
    import jax

    from evorl.engine.processes import peer_lost

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    error = RuntimeError("Gloo all-reduce failed: Connection reset by peer")
    assert f"resume={tmp_path} " in str(peer_lost(error, tmp_path))
    assert "<run folder>" not in str(peer_lost(error, tmp_path))
