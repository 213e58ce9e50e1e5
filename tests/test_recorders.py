"""Recorders: file contents (JSONL, CSV, TensorBoard), console styles, the chain, W&B offline,
and that optional backends are never imported unless asked for."""

import io
import json
import struct
import subprocess
import sys

import pytest

from evorl.engine.recording import ConsoleRecorder, ProgressRecorder, RecorderChain
from evorl.app.recorders import (
    CsvRecorder,
    JsonlRecorder,
    LoggingConfig,
    make_recorders,
    read_jsonl,
    truncate_records,
)

METRICS = [
    {"iteration": 1, "env_steps": 512, "train/episode_return": 20.5, "eval/episode_return": float("nan")},
    {"iteration": 2, "env_steps": 1024, "train/episode_return": 31.0, "eval/episode_return": 42.0},
]


def write_all(recorder, config=None):
    recorder.init(config)
    for m in METRICS:
        recorder.write(m, m["env_steps"])
    recorder.close()


def test_jsonl_records_every_logging_point(tmp_path):
    write_all(JsonlRecorder(tmp_path / "m.jsonl"))
    records = read_jsonl(tmp_path / "m.jsonl")
    assert [r["step"] for r in records] == [512, 1024]
    assert records[0]["eval/episode_return"] is None  # NaN is not JSON
    assert records[1]["train/episode_return"] == 31.0
    assert records[0]["wall_time"] <= records[1]["wall_time"]


def test_jsonl_continues_wall_time_and_truncates_on_resume(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"step": 512, "wall_time": 10.0}) + "\n" + json.dumps({"step": 1024, "wall_time": 20.0})
                    + "\n" + '{"step": 15')  # a torn line from a killed process
    truncate_records(path, 512)
    assert read_jsonl(path) == [{"step": 512, "wall_time": 10.0}]
    other = tmp_path / "lineage.jsonl"
    other.write_text(path.read_text())
    recorder = JsonlRecorder(other)  # not the metrics file: its records stay the uninterrupted run's
    recorder.init(None)
    recorder.write({"iteration": 2}, 1024)
    recorder.close()
    assert "resumed" not in read_jsonl(other)[1]
    recorder = JsonlRecorder(path, mark_resume=True)
    recorder.init(None)
    recorder.write({"iteration": 2}, 1024)
    recorder.write({"iteration": 3}, 1536)
    recorder.close()
    records = read_jsonl(path)
    assert [r["step"] for r in records] == [512, 1024, 1536] and records[1]["wall_time"] >= 10.0
    # the first record after the resume says so (a plot breaks its wall-time line there), only it
    assert [r.get("resumed") for r in records] == [None, True, None]


def test_csv_table(tmp_path):
    write_all(CsvRecorder(tmp_path / "m.csv"))
    lines = (tmp_path / "m.csv").read_text().splitlines()
    assert lines[0] == "step,iteration,env_steps,train/episode_return,eval/episode_return"
    assert lines[2] == "1024,2,1024,31.0,42.0"
    truncate_records(tmp_path / "m.csv", 512)
    assert len((tmp_path / "m.csv").read_text().splitlines()) == 2


def read_tensorboard_scalars(log_dir):
    """Parses TFRecord event files with tensorboardX's own protobuf: {tag: [(step, value)]}."""
    from tensorboardX.proto import event_pb2

    scalars = {}
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_scalars(tmp_path):
    from evorl.app.recorders.tensorboard import TensorBoardRecorder

    write_all(TensorBoardRecorder(tmp_path / "tb"), config={"seed": 1})
    scalars = read_tensorboard_scalars(tmp_path / "tb")
    assert scalars["train/episode_return"] == [(512, 20.5), (1024, 31.0)]
    assert scalars["eval/episode_return"] == [(1024, 42.0)]  # NaN skipped


def test_console_lines_when_not_a_terminal():
    stream = io.StringIO()
    write_all(ProgressRecorder(total_steps=1024, stream=stream, prefix="[PPO] "))
    lines = stream.getvalue().splitlines()
    assert lines == ["[PPO] iter=1 env_steps=512 train_return=20.50 eval_return=nan",
                     "[PPO] iter=2 env_steps=1024 train_return=31.00 eval_return=42.00"]


def test_progress_bar_style_shows_the_bar_and_lines():
    stream = io.StringIO()
    write_all(ProgressRecorder(total_steps=1024, stream=stream, prefix="[PPO] ", style="bar"))
    out = stream.getvalue()
    assert "[PPO] iter=2 env_steps=1024" in out and "1024/1024" in out and "eval=42.00" in out


def test_progress_bar_eta_from_the_first_logging_point():
    from evorl.engine.recording import eta_text

    assert eta_text(7200 + 61, 1.0) == "2:01:01" and eta_text(100, None) == "-:--:--" and eta_text(0, 5.0) == "0:00:00"
    stream = io.StringIO()
    bar = ProgressRecorder(total_steps=10_000, stream=stream, prefix="[PPO] ", style="bar")
    bar.init({})
    bar.write({"iteration": 1, "env_steps": 1000, "steps_per_s": 500.0}, 1000)  # the first point: its steps/s
    assert bar._progress.tasks[0].fields["eta"] == "0:00:18"
    assert bar.speed({}, 3000, bar._first[0] + 4.0) == 500.0  # then measured: 2000 steps in 4 s
    bar.close()


def test_chain_and_factory(tmp_path):
    calls = []

    class Spy(ConsoleRecorder):
        def write(self, metrics, step):
            calls.append(step)

    chain = RecorderChain([Spy(), Spy()])
    write_all(chain)
    assert calls == [512, 512, 1024, 1024]
    names = lambda c: [type(r).__name__ for r in c.recorders]  # noqa: E731
    assert names(make_recorders(LoggingConfig(), tmp_path)) == ["ProgressRecorder", "JsonlRecorder", "CsvRecorder"]
    assert names(make_recorders(LoggingConfig(recorders=()), None)) == []
    assert "TensorBoardRecorder" in names(make_recorders(LoggingConfig(recorders=("tensorboard",)), tmp_path))


def test_unknown_recorder_is_a_config_error():
    from evorl.config import ConfigError, parse_section

    with pytest.raises(ConfigError, match="Unknown recorder 'tensorbord'.*valid: console, jsonl, csv, tensorboard, wandb"):
        parse_section(LoggingConfig, {"recorders": ["tensorbord"]}, "logging")


def test_optional_backends_are_not_imported_unless_asked():
    code = ("import sys, evorl.app.experiment, evorl.app.cli, evorl.app.recorders; from evorl.workflows import PPOWorkflow; "
            "print(sorted(m for m in ('wandb', 'tensorboardX', 'matplotlib', 'orbax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from evorl.app.recorders.wandb import WandbRecorder

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    write_all(WandbRecorder(project="evorl-test", run_dir=tmp_path), config={"seed": 1})
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_a_missing_recorder_package_is_reported_before_compiling(tiny_cfg, tmp_path, monkeypatch):
    import re

    from evorl.config import ConfigError, install_hint
    from evorl.app.experiment import run_experiment
    from evorl.engine.on_policy_workflow import OnPolicyWorkflow

    def init(self, key):
        raise AssertionError("compiled before the check")

    monkeypatch.setattr(OnPolicyWorkflow, "init", init)
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # as if not installed
    tiny_cfg["logging"]["recorders"] = ["console", "tensorboard"]
    with pytest.raises(ConfigError, match=r"^logging.recorders names 'tensorboard', which needs tensorboardX: "
                                          + re.escape(install_hint("tensorboard")) + r"\.$"):
        run_experiment(tiny_cfg, output_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_console_line_says_a_populations_steps_per_s_are_all_agents():
    from evorl.engine.recording import ConsoleRecorder

    line = ConsoleRecorder(prefix="[PPO] ").line
    single = {"iteration": 2, "env_steps": 100, "steps_per_s": 50.0, "eval/episode_return": 9.0}
    assert line(single) == "[PPO] iter=2 env_steps=100 train_steps/s=50 eval_return=9.00"
    population = {**single, "eval/episode_return/std": 1.0}
    assert line(population) == "[PPO] iter=2 env_steps=100 train_steps/s=50 (all agents) eval_return=9.00±1.00"
