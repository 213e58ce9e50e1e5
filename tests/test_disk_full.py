"""A full disk is one line naming the file (exit status 4), run.json says "failed" with the
reason when it can be written and is left intact when it cannot, and the earlier checkpoints
stay good. The disk is made full by injected ``OSError(ENOSPC)``s."""

import errno
import json
import os
import pathlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import TINY

from evorl.app.cli import EXIT_NO_SPACE, exit_on_config_error
from evorl.app.experiment import load_run, run_experiment
from evorl.app.recorders.files import JsonlRecorder
from evorl.app.run_folder import checkpoint_dir

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}


def disk_full():
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FullAfter:
    """A file whose ``write`` fails with ENOSPC (as ``write()`` does: no file name) after ``lines`` lines."""

    def __init__(self, file, lines):
        self.file, self.lines = file, lines

    def write(self, text):
        if self.lines == 0:
            raise disk_full()
        self.lines -= 1
        return self.file.write(text)

    def __getattr__(self, name):
        return getattr(self.file, name)


@pytest.fixture
def metrics_full_after_3(monkeypatch):
    init = JsonlRecorder.init

    def init_full(self, config):
        init(self, config)
        self._file = FullAfter(self._file, 3)

    monkeypatch.setattr(JsonlRecorder, "init", init_full)


def run_cli(cfg, run_dir, capsys):
    with pytest.raises(SystemExit) as info, exit_on_config_error():
        run_experiment(cfg, output_dir=run_dir)
    return info.value.code, capsys.readouterr().err


def test_full_disk_writing_metrics_is_one_line_and_run_json_says_failed(metrics_full_after_3, tiny_cfg, tmp_path,
                                                                       capsys):
    code, err = run_cli(tiny_cfg, tmp_path, capsys)
    assert code == EXIT_NO_SPACE
    assert err.startswith(f"evorl: no space left on device writing {tmp_path / 'metrics.jsonl'}. Free some space")
    assert err.count("\n") == 1 and "resume=" in err
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["status"] == "failed" and info["reason"].startswith("NoSpaceLeft: no space left on device writing")
    assert sorted(p.name for p in checkpoint_dir(tmp_path).iterdir()) == ["2"]
    assert load_run(tmp_path)[2] == 2  # the earlier checkpoint is intact
    assert not list(tmp_path.glob("*.tmp"))


def test_when_run_json_cannot_be_written_either_it_keeps_its_content(metrics_full_after_3, tiny_cfg, tmp_path,
                                                                    capsys, monkeypatch):
    write_text = pathlib.Path.write_text

    def full_for_run_json(self, text, *args, **kwargs):
        if self.name == "run.json.tmp" and "failed" in text:
            write_text(self, "", *args, **kwargs)  # the file is created, its content does not fit
            raise disk_full()
        return write_text(self, text, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", full_for_run_json)
    code, err = run_cli(tiny_cfg, tmp_path, capsys)
    assert code == EXIT_NO_SPACE
    assert err.startswith(f"evorl: no space left on device writing {tmp_path / 'metrics.jsonl'}; run.json could "
                          f"not record the failure either (it still says 'running')."), err
    assert err.count("\n") == 1
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "running"  # intact, not 0 bytes
    assert not (tmp_path / "run.json.tmp").exists()


ORBAX_FULL_AT_4 = textwrap.dedent("""
    import errno, os, sys
    import orbax.checkpoint._src.path.atomicity as atomicity
    from conftest import TINY
    from evorl.app.cli import exit_on_config_error
    from evorl.app.experiment import run_experiment

    finalize = atomicity.AtomicRenameTemporaryPath.finalize

    async def full_at_4(self, *args, **kwargs):  # in orbax's background thread
        if self.get_final().name == "4":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return await finalize(self, *args, **kwargs)

    atomicity.AtomicRenameTemporaryPath.finalize = full_at_4
    with exit_on_config_error():
        run_experiment(TINY, output_dir=sys.argv[1])
""")


@pytest.mark.slow  # ~35 s on 2 cores at load 8-10 (2026-12-03)
def test_full_disk_in_orbax_background_save_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-c", ORBAX_FULL_AT_4, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, env=ENV)
    assert proc.returncode == EXIT_NO_SPACE, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "Warning" not in line and line.strip()]
    assert errors == [f"evorl: no space left on device writing {checkpoint_dir(tmp_path) / '4'}. Free some space "
                      f"there; a run it stopped continues from its newest complete checkpoint with "
                      f"resume={tmp_path}."], proc.stderr
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["status"] == "failed" and "checkpoints/4" in info["reason"]
    assert sorted(p.name for p in checkpoint_dir(tmp_path).iterdir()) == ["2"]  # the partial save is deleted
    resumed = run_experiment({**TINY, "resume": str(tmp_path)})
    assert int(resumed.state.iteration) == 6


def test_closed_event_loop_tracebacks_from_orbax_threads_are_not_printed(tmp_path, monkeypatch):
    """After a failed save or restore, TensorStore's threads hand results to orbax's closed
    asyncio loop; each ``RuntimeError: Event loop is closed`` reached ``sys.unraisablehook``
    and printed a traceback (7 to 330 lines before the one-line error). Others still print."""
    import types

    from evorl.app.checkpoint import CheckpointConfig, Checkpointer

    printed = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: printed.append(str(unraisable.exc_value)))
    checkpointer = Checkpointer(tmp_path, CheckpointConfig(), 1, 2, {})
    try:
        for error in (RuntimeError("Event loop is closed"), RuntimeError("something else")):
            sys.unraisablehook(types.SimpleNamespace(exc_type=type(error), exc_value=error, exc_traceback=None,
                                                     err_msg=None, object=None))
    finally:
        checkpointer.close()
    assert printed == ["something else"]


RESUME = textwrap.dedent("""
    import sys
    from conftest import TINY
    from evorl.app.cli import exit_on_config_error
    from evorl.app.experiment import run_experiment

    with exit_on_config_error():
        run_experiment({**TINY, "resume": sys.argv[1]})
""")


@pytest.mark.slow  # the command as a process
def test_a_truncated_checkpoint_manifest_is_one_line(tiny_cfg, tmp_path):
    run_experiment(tiny_cfg, output_dir=tmp_path)
    (checkpoint_dir(tmp_path) / "6" / "state" / "manifest.ocdbt").write_bytes(b"\0" * 20)
    proc = subprocess.run([sys.executable, "-c", RESUME, str(tmp_path)], capture_output=True, text=True,
                          timeout=300, env=ENV)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "Warning" not in line and line.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"evorl: checkpoint error: Checkpoint "
                                                     f"{checkpoint_dir(tmp_path) / '6'} cannot be read"), proc.stderr
    assert "move" in errors[0] and "to resume from 4" in errors[0]
