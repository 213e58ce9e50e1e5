"""Two processes on 127.0.0.1 (jax.distributed, gloo collectives on the CPU)."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).with_name("multi_host_worker.py")
CFG = {
    "workflow_cls": "evorl.workflows.PPOWorkflow",
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [32, 32], "critic_hidden_layer_sizes": [32, 32], "normalize_obs": True},
    "training": {"num_envs": 8, "rollout_length": 32, "num_epochs": 2, "num_minibatches": 1},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cfg, out, iterations):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.Popen([sys.executable, str(WORKER), json.dumps(cfg), str(out), str(iterations)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def two_process_cfg(port, process_id, heartbeat=30):
    return {**CFG, "distributed": {"coordinator_address": f"127.0.0.1:{port}", "num_processes": 2,
                                   "process_id": process_id, "heartbeat_timeout_seconds": heartbeat}}


@pytest.mark.slow  # two processes joined as one JAX job (and a third to compare)
def test_two_processes_equal_one_process(tmp_path):
    port = free_port()
    procs = [start(two_process_cfg(port, i), tmp_path / f"p{i}.npz", 4) for i in range(2)]
    single = start(CFG, tmp_path / "single.npz", 4)
    outputs = [p.communicate(timeout=600)[0] for p in procs + [single]]
    for p, out in zip(procs + [single], outputs):
        assert p.returncode == 0, out
    assert "process 0 of 2: 2 devices, 1 local env shard(s)" in outputs[0], outputs[0]
    results = [np.load(tmp_path / f"{name}.npz") for name in ("p0", "p1", "single")]
    for key in results[0].files:
        np.testing.assert_array_equal(results[0][key], results[1][key])  # identical in both processes
        np.testing.assert_allclose(results[0][key], results[2][key], rtol=1e-5, atol=1e-6)


def kill_one_while_training(procs, progress, victim=1):
    """Kills process ``victim`` once process 0 (which prints the logs) prints ``progress``;
    returns the survivor's output and the seconds it ran on after the kill."""
    try:
        line = ""
        while progress not in line:
            line = procs[0].stdout.readline()
            assert line or procs[0].poll() is None, "process 0 ended early"
        procs[victim].kill()
        killed = time.monotonic()
        out, _ = procs[1 - victim].communicate(timeout=120)
        return out, time.monotonic() - killed
    finally:
        for p in procs:
            p.kill()


@pytest.mark.slow
def test_a_dead_process_stops_the_other_with_an_error(tmp_path):
    port = free_port()
    procs = [start(two_process_cfg(port, i, heartbeat=5), tmp_path / f"p{i}.npz", 100_000) for i in range(2)]
    out, waited = kill_one_while_training(procs, "iteration 2 ")
    assert procs[0].returncode != 0
    assert waited < 90, waited
    assert "Connection reset by peer" in out or "heartbeat timeout" in out, out[-3000:]
    print(f"process 0 stopped {waited:.1f} s after its peer died; last output:\n{out[-6000:]}")


def start_experiment(cfg, run_dir, out):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.Popen([sys.executable, str(WORKER), "experiment", json.dumps(cfg), str(run_dir), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def run_two(cfg_for, run_dir, outs):
    port = free_port()
    procs = [start_experiment(cfg_for(port, i), run_dir, outs[i]) for i in range(2)]
    for p in procs:
        out = p.communicate(timeout=600)[0]
        assert p.returncode == 0, out[-4000:]
    return [np.load(o) for o in outs]


@pytest.mark.slow
def test_two_processes_checkpoint_and_resume_exactly(tmp_path):
    def cfg(iterations, resume=None):
        def for_process(port, i):
            # constant learning rate: annealing depends on num_iterations, which the resume extends
            c = {**two_process_cfg(port, i), "training": {**CFG["training"], "num_iterations": iterations,
                                                            "eval_interval": 2, "eval_episodes": 2,
                                                            "anneal_lr": False}}
            return {**c, "resume": resume} if resume else c
        return for_process

    run = tmp_path / "run"
    run_two(cfg(4), run, [tmp_path / "a0.npz", tmp_path / "a1.npz"])
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == [2, 4]
    resumed = run_two(cfg(6, resume=str(run)), run, [tmp_path / "b0.npz", tmp_path / "b1.npz"])
    straight = run_two(cfg(6), tmp_path / "straight", [tmp_path / "c0.npz", tmp_path / "c1.npz"])
    for key in resumed[0].files:
        np.testing.assert_array_equal(resumed[0][key], resumed[1][key])
        np.testing.assert_array_equal(resumed[0][key], straight[0][key])  # bit-identical resume


@pytest.mark.slow  # both victims: a minute or more of multi-process runs
@pytest.mark.parametrize("victim", [1, 0])
def test_a_dead_process_stops_the_run_in_seconds_with_one_line(tmp_path, victim):
    """Whichever process dies, the survivor stops within 15 s with one line and run.json says
    failed (process 0 writes the run folder; when it is the one killed, process 1 records it)."""
    from evorl.app.cli import EXIT_PEER_LOST

    def cfg(port, i):  # checkpoints at every logging point: the peer may die during a save too
        return {**two_process_cfg(port, i), "logging": {"console": "lines", "recorders": ["console"], "plot": False},
                "training": {**CFG["training"], "num_iterations": 100_000, "eval_interval": 1, "eval_episodes": 2}}

    port, run_dir = free_port(), tmp_path / "run"
    procs = [start_experiment(cfg(port, i), run_dir, tmp_path / f"p{i}.npz") for i in range(2)]
    out, waited = kill_one_while_training(procs, "iter=3 ", victim)
    survivor = procs[1 - victim]
    print(f"process {1 - victim} stopped {waited:.1f} s after process {victim} was killed")
    assert survivor.returncode == EXIT_PEER_LOST, out[-4000:]
    assert waited < 15, waited
    assert "Traceback" not in out and "stack trace" not in out, out[-4000:]
    errors = [line for line in out.splitlines() if line.startswith("evorl:")]
    assert len(errors) == 1 and errors[0].startswith(f"evorl: process {victim} of 2 stopped responding ("), out[-4000:]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and f"process {victim} of 2 stopped responding" in info["reason"], info
    if victim == 0:
        assert "recorded by process 1" in info["reason"], info


@pytest.mark.slow  # two multi-process runs of ~30 s
@pytest.mark.parametrize("victim", [1, 0])
def test_a_stopped_process_stops_the_other_after_the_heartbeat_timeout_with_one_line(tmp_path, victim):
    """SIGSTOP (no TCP reset): the survivor's collectives would wait forever and JAX's own
    heartbeat watch aborts with a C++ stack trace (exit 134). The peer watch acts first: one
    line, exit 5 within the heartbeat timeout plus a few seconds, run.json failed, no
    half-written checkpoint folder left."""
    import signal

    from evorl.app.cli import EXIT_PEER_LOST

    heartbeat = 5

    def cfg(port, i):  # checkpoints at every logging point: the peer may stop during a save too
        return {**two_process_cfg(port, i, heartbeat=heartbeat),
                "logging": {"console": "lines", "recorders": ["console"], "plot": False},
                "training": {**CFG["training"], "num_iterations": 100_000, "eval_interval": 1, "eval_episodes": 2}}

    port, run_dir = free_port(), tmp_path / "run"
    procs = [start_experiment(cfg(port, i), run_dir, tmp_path / f"p{i}.npz") for i in range(2)]
    try:
        line = ""
        while "iter=3 " not in line:
            line = procs[0].stdout.readline()
            assert line or procs[0].poll() is None, "process 0 ended early"
        procs[victim].send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        out, _ = procs[1 - victim].communicate(timeout=120)
        waited = time.monotonic() - stopped
    finally:
        for p in procs:
            p.kill()
    print(f"process {1 - victim} left {waited:.1f} s after process {victim} was stopped")
    assert procs[1 - victim].returncode == EXIT_PEER_LOST, out[-4000:]
    assert waited < heartbeat + 10, waited
    assert "Traceback" not in out and "stack trace" not in out and "Check failed" not in out, out[-4000:]
    errors = [line for line in out.splitlines() if line.startswith("evorl:")]
    expected = f"process {victim} of 2" if victim == 1 else "process 0 of 2"
    assert len(errors) == 1 and errors[0].startswith(f"evorl: {expected} stopped responding (no heartbeat for "), out
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and "stopped responding" in info["reason"], info
    assert not list((run_dir / "checkpoints").glob("*.orbax-checkpoint-tmp*"))


def orbax_barrier_error() -> TimeoutError:
    """What orbax's checkpoint thread raised in process 1 when process 0 died during a save
    (CI, stop 21): a TimeoutError from the coordination service's error."""
    cause = RuntimeError("UNAVAILABLE: Failed to send RPC to coordination service. Additional GRPC error "
                         "information from remote target coordination_service while calling Barrier: "
                         "{grpc_status:14, grpc_message:\"Socket closed\"}")
    try:
        raise TimeoutError("Timed out while waiting for async_commit_complete barrier.") from cause
    except TimeoutError as e:
        return e


def test_a_lost_peer_is_read_through_the_chain_of_causes(monkeypatch):
    import jax

    from evorl.engine.processes import peer_lost

    assert peer_lost(orbax_barrier_error()) is None  # one process: no peer to lose
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    error = peer_lost(orbax_barrier_error())
    assert str(error).startswith("process 0 of 2 stopped responding (Socket closed); process 1 stops too."), error
    assert peer_lost(TimeoutError("Timed out while waiting for async_commit_complete barrier.")) is None
    assert peer_lost(RuntimeError("Gloo all-reduce: invalid argument")) is None


def test_a_thread_that_fails_on_a_lost_peer_prints_no_traceback_and_the_process_leaves(monkeypatch, capfd):
    """The main thread reports a lost peer in one line; a background thread failing on it prints
    nothing, and the process leaves on its own should the main thread not notice in time."""
    import threading

    import jax

    import evorl.app.cli as cli

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    left = threading.Event()
    monkeypatch.setattr(cli, "PEER_LOST_GRACE_SECONDS", 0.2)
    monkeypatch.setattr(cli, "_leave_peer_lost", lambda error: left.set())

    def save():
        raise orbax_barrier_error()

    def other():
        raise ValueError("an ordinary bug")

    printed = []  # what the hook before it (Python's prints the traceback) was given
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(args.exc_value))
    before = threading.excepthook
    with cli.exit_on_config_error():
        for target in (save, other):
            thread = threading.Thread(target=target)
            thread.start()
            thread.join()
        assert left.wait(5), "the process did not leave after the grace period"
    err = capfd.readouterr().err
    assert "Timed out while waiting" not in err and "coordination service" not in err, err
    assert [type(e).__name__ for e in printed] == ["ValueError"]  # other threads' errors as before
    assert threading.excepthook is before  # restored on leaving
