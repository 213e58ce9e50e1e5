"""Checkpoints: an interrupted and resumed run ends bit-identical to an uninterrupted one; a
kill during a save never costs the previous checkpoint; bad checkpoints fail clearly and
change nothing."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import TINY

from evorl.app.checkpoint import CheckpointError
from evorl.app.experiment import run_experiment
from evorl.app.recorders import read_jsonl


class Interrupted(Exception):
    pass


class InterruptAt:
    """A recorder that stops training right after logging ``iteration``."""

    def __init__(self, iteration):
        self.iteration = iteration

    def init(self, config):
        pass

    def write(self, metrics, step):
        if metrics["iteration"] == self.iteration:
            raise Interrupted

    def close(self):
        pass


def assert_states_identical(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(leaves_a, leaves_b):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()  # bit for bit


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    return run_experiment(TINY, output_dir=run_dir)


@pytest.mark.slow  # three runs; tests/test_signals.py keeps a resumed run in the default set
def test_interrupted_and_resumed_run_is_bit_identical(uninterrupted, tiny_cfg, tmp_path):
    with pytest.raises(Interrupted):
        run_experiment(tiny_cfg, output_dir=tmp_path, recorders=[InterruptAt(3)])
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["2"]
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "failed"

    resumed = run_experiment({**tiny_cfg, "resume": str(tmp_path)})
    assert int(resumed.state.iteration) == 6
    assert_states_identical(resumed.state, uninterrupted.state)
    assert resumed.final_metrics == uninterrupted.final_metrics
    # the record of iteration 3 logged before the interruption was replaced, not duplicated
    assert [r["iteration"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["status"] == "finished" and info["resumes"][0]["from_iteration"] == 2


def chunk_program(workflow, state) -> str:
    """The workflow's chunk program for ``state``, lowered (StableHLO without source locations:
    what the persistent compilation cache keys on)."""
    executor = workflow.executor
    chunk = executor._build_chunk(executor._jit_step)
    return chunk.lower(executor.place(state), np.int32(1), executor.alive, executor.zero_totals(state)).as_text()


def test_a_longer_resumed_run_anneals_over_its_length_with_the_same_program(uninterrupted, tiny_cfg, tmp_path):
    """``training.num_iterations`` (T of the learning rate's 1 - t / T) is data in the state, not
    a constant of the program: a run resumed with another length compiles the program it ran
    before (found in the persistent compilation cache) and anneals over its new length. The
    checkpoint does not hold T: a resume takes it from its own config."""
    shutil.copytree(uninterrupted.run_dir, tmp_path / "run")
    longer = run_experiment({**tiny_cfg, "training": {**tiny_cfg["training"], "num_iterations": 8},
                             "resume": str(tmp_path / "run")})
    state = longer.state
    assert int(state.iteration) == 8 and int(state.anneal_iterations) == 8
    rate = float(state.opt_state.hyperparams["learning_rate"])  # set by the last update, at t = 7
    assert rate == pytest.approx(float(state.learning_rate) * (1 - 7 / 8), rel=1e-6)
    assert chunk_program(longer.workflow, state) == chunk_program(uninterrupted.workflow, uninterrupted.state)
    saved = json.loads((tmp_path / "run" / "checkpoints" / "8" / "meta" / "metadata").read_text())
    assert saved["sha256"] and not any("anneal_iterations" in leaf for leaf in saved["sha256"])


def test_chunking_does_not_change_the_trajectory(uninterrupted, tiny_cfg):
    tiny_cfg["training"]["eval_interval"] = 3
    tiny_cfg["checkpoint"]["enabled"] = False
    assert_states_identical(run_experiment(tiny_cfg).state, uninterrupted.state)


KILLED_DURING_SAVE = textwrap.dedent("""
    import sys, time
    import orbax.checkpoint._src.path.atomicity as atomicity
    from conftest import TINY
    from evorl.app.experiment import run_experiment

    finalize = atomicity.AtomicRenameTemporaryPath.finalize

    async def hang_before_committing_4(self):
        if self.get_final().name == "4":  # every file of checkpoint 4 written, not yet renamed
            print("SAVING 4", flush=True)
            time.sleep(600)
        return await finalize(self)

    atomicity.AtomicRenameTemporaryPath.finalize = hang_before_committing_4
    run_experiment(TINY, output_dir=sys.argv[1])
""")


@pytest.mark.slow
def test_kill_during_save_keeps_previous_checkpoint(uninterrupted, tiny_cfg, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_DURING_SAVE, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        for line in proc.stdout:
            if line.startswith("SAVING 4"):
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert "2" in checkpoints and "4" not in checkpoints
    assert any(name.startswith("4.") for name in checkpoints)  # the half-written save, ignored

    resumed = run_experiment({**tiny_cfg, "resume": str(tmp_path)})
    assert_states_identical(resumed.state, uninterrupted.state)


@pytest.fixture
def finished_run(uninterrupted, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(uninterrupted.run_dir, run_dir)
    return run_dir


def test_corrupt_newest_checkpoint_is_an_error_and_changes_nothing(finished_run, tiny_cfg):
    for f in (finished_run / "checkpoints" / "6" / "state").rglob("*"):
        if f.is_file():
            f.write_bytes(b"garbage")
    before = snapshot(finished_run)
    with pytest.raises(CheckpointError, match=r"checkpoints/6 cannot be read.*resume from 4"):
        run_experiment({**tiny_cfg, "resume": str(finished_run)})
    assert snapshot(finished_run) == before


def test_incompatible_checkpoint_names_the_differences(finished_run, tiny_cfg):
    tiny_cfg["training"]["num_envs"] = 8
    tiny_cfg["agent"]["actor_hidden_layer_sizes"] = [16]
    before = snapshot(finished_run)
    with pytest.raises(CheckpointError) as info:
        run_experiment({**tiny_cfg, "resume": str(finished_run)})
    message = str(info.value)
    assert "training.num_envs: 4 (checkpoint) -> 8 (now)" in message
    assert "agent.actor_hidden_layer_sizes: [8] (checkpoint) -> [16] (now)" in message
    assert snapshot(finished_run) == before


def test_a_checkpoint_of_another_format_version_is_refused_naming_both(finished_run, tiny_cfg):
    """Version 1 named the state's hyperparameters ``discount``/``vtrace_lambda``; it is
    refused with the version that wrote it, before its arrays are read."""
    meta_file = finished_run / "checkpoints" / "6" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    meta.update(format_version=1, evorl_version="0.0.1-old")
    meta_file.write_text(json.dumps(meta))
    before = snapshot(finished_run)
    with pytest.raises(CheckpointError, match=r"checkpoints/6 has format version 1; this evorl .* reads version 3\. "
                                              r"Resume it with evorl 0\.0\.1-old"):
        run_experiment({**tiny_cfg, "resume": str(finished_run)})
    assert snapshot(finished_run) == before


def test_new_run_refuses_a_folder_with_checkpoints(finished_run, tiny_cfg):
    with pytest.raises(CheckpointError, match="already holds checkpoints.*resume="):
        run_experiment(tiny_cfg, output_dir=finished_run)


def test_new_run_refuses_a_folder_with_only_an_unfinished_save(tiny_cfg, tmp_path):
    unfinished = tmp_path / "checkpoints" / "10.orbax-checkpoint-tmp"
    unfinished.mkdir(parents=True)
    with pytest.raises(CheckpointError, match="only unfinished checkpoint saves.*10.orbax-checkpoint-tmp.*cannot be resumed"):
        run_experiment(tiny_cfg, output_dir=tmp_path)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == [unfinished.name]


def test_resume_needs_a_checkpoint(tiny_cfg, tmp_path):
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        run_experiment({**tiny_cfg, "resume": str(tmp_path)})


@pytest.mark.slow
def test_zero_size_leaves_round_trip(tmp_path):
    """orbax cannot write arrays without elements; mjx env states have them (``act`` of a model
    without actuator activations, e.g. reacher): they are saved and restored with their shape."""
    from evorl.app.checkpoint import CheckpointConfig, Checkpointer

    pytest.importorskip("brax")
    from evorl.envs import create_env

    env = create_env({"env_type": "brax", "env_name": "reacher", "backend": "mjx"}, parallel=2)
    env_state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    empty = [leaf for leaf in jax.tree.leaves(env_state) if leaf.size == 0]
    assert empty, "the mjx reacher state has no zero-size leaf any more: pick another example"

    state = {"params": np.arange(6, dtype=np.float32).reshape(2, 3),
             "act": np.zeros(empty[0].shape, empty[0].dtype), "none": np.zeros((0,), np.int32)}
    ckpt = Checkpointer(tmp_path / "ckpt", CheckpointConfig(), eval_interval=1, num_iterations=1, run_config={})
    ckpt.save(state, 1)
    ckpt.close()
    restored, meta = Checkpointer(tmp_path / "ckpt", CheckpointConfig(), eval_interval=1,
                                  num_iterations=1, run_config={}).restore(state)
    assert meta["iteration"] == 1
    assert_states_identical(state, restored)


def flip_bytes_in_largest_file(folder: Path, count: int = 64) -> Path:
    """Inverts ``count`` bytes in the middle of the largest file under ``folder`` (the data of
    the largest array: orbax keeps no checksum of array data, only of its index)."""
    largest = max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(largest.read_bytes())
    middle = len(data) // 2
    data[middle:middle + count] = bytes(b ^ 0xFF for b in data[middle:middle + count])
    largest.write_bytes(bytes(data))
    return largest


def saved_state(folder: Path):
    """A state with arrays large enough (256 KiB) to be stored outside orbax's checksummed index."""
    from evorl.app.checkpoint import CheckpointConfig, Checkpointer

    rng = np.random.default_rng(0)
    state = {"params": rng.normal(size=(256, 256)).astype(np.float32),
             "adam_mu": (rng.normal(size=(256, 256)) * 1e-6).astype(np.float32), "count": np.int32(7)}
    checkpointer = Checkpointer(folder, CheckpointConfig(max_to_keep=None), eval_interval=1, num_iterations=2,
                                run_config={})
    for step in (1, 2):
        checkpointer.save(state, step)
    checkpointer.close()
    return state, Checkpointer(folder, CheckpointConfig(), eval_interval=1, num_iterations=2, run_config={})


def test_changed_checkpoint_data_is_refused_naming_the_checkpoint_and_the_array(tmp_path):
    state, checkpointer = saved_state(tmp_path / "ckpt")
    restored, meta = checkpointer.restore(state)  # untouched: bit-identical
    assert_states_identical(state, restored)
    assert set(meta["sha256"]) == {"['adam_mu']", "['count']", "['params']"}

    flip_bytes_in_largest_file(tmp_path / "ckpt" / "2")
    before = snapshot(tmp_path / "ckpt")
    with pytest.raises(CheckpointError) as info:
        checkpointer.restore(state)
    message = str(info.value)
    assert f"Checkpoint {tmp_path / 'ckpt' / '2'} cannot be read" in message
    assert "does not match the SHA-256 recorded when it was saved" in message
    assert ("['params']" in message) != ("['adam_mu']" in message)  # the one array whose bytes changed
    assert "move" in message and "resume from 1" in message
    assert snapshot(tmp_path / "ckpt") == before
    assert_states_identical(state, checkpointer.restore(state, step=1)[0])  # the older one is still good


def test_checkpoint_without_recorded_checksums_still_restores(tmp_path):
    """Checkpoints written before evorl recorded checksums (no ``sha256`` in meta) restore unchecked."""
    state, checkpointer = saved_state(tmp_path / "ckpt")
    meta_file = tmp_path / "ckpt" / "2" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    del meta["sha256"]
    meta_file.write_text(json.dumps(meta))
    restored, meta = checkpointer.restore(state)
    assert "sha256" not in meta
    assert_states_identical(state, restored)
