"""SIGTERM / SIGINT stop training after the current compiled call with a final checkpoint and run.json
"interrupted"; a second signal stops the process at once."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import TINY

from evorl.app.experiment import run_experiment
from evorl.app.run_folder import checkpoint_dir, load_run_config
from evorl.engine.execution import CALL_SECONDS
from evorl.engine.host_loop import TrainingInterrupted

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
       "EVORL_COMPILATION_CACHE": "0"}
ENV.pop("HYDRA_FULL_ERROR", None)


@pytest.mark.slow  # the command as a process, stopped and resumed
def test_sigterm_stops_after_the_chunk_with_a_checkpoint_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["agent.actor_hidden_layer_sizes=[8]", "agent.critic_hidden_layer_sizes=[8]",
                 "training.rollout_length=16", "training.num_minibatches=2", "training.num_epochs=1",
                 "training.eval_episodes=2", "training.eval_interval=1", "training.num_iterations=100000",
                 "checkpoint.save_interval=1000", "logging.console=lines", "logging.plot=false",
                 f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "train.py"), *overrides], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        for line in proc.stdout:
            if "iter=3 " in line:
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("evorl:")]
    assert len(errors) == 1 and errors[0].startswith("evorl: SIGTERM: training stopped after iteration "), err
    assert errors[0].endswith(f"; its state is checkpointed: continue with resume={run_dir}."), err  # pastable
    iteration = int(errors[0].split("after iteration ")[1].split(";")[0])
    assert 3 <= iteration < 1000
    # save_interval is 1000: the one checkpoint is the final one the signal asked for
    assert sorted(int(p.name) for p in checkpoint_dir(run_dir).iterdir()) == [iteration]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "interrupted" and "SIGTERM" in info["reason"]

    cfg = load_run_config(run_dir)
    cfg["training"]["num_iterations"] = iteration + 1
    cfg["logging"]["recorders"] = []
    resumed = run_experiment({**cfg, "resume": str(run_dir)})
    assert int(resumed.state.iteration) == iteration + 1


@pytest.mark.slow  # the command as a process
def test_a_second_signal_stops_at_once(tmp_path):
    """Both signals come from a recorder at a known logging point: the first asks for a stop
    after the chunk, the second (before it ends) kills the process with the signal."""
    script = textwrap.dedent(f"""
        import os, signal
        from evorl.app.experiment import run_experiment

        class SignalTwice:
            def init(self, config): pass
            def close(self): pass
            def write(self, metrics, step):
                if metrics["iteration"] == 3:
                    os.kill(os.getpid(), signal.SIGTERM)
                    print("first signal handled", flush=True)
                    os.kill(os.getpid(), signal.SIGTERM)
                    print("still running after the second signal", flush=True)

        run_experiment({TINY!r}, output_dir={str(tmp_path)!r}, recorders=[SignalTwice()])
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=ENV)
    assert proc.returncode == -signal.SIGTERM, proc.stdout + proc.stderr
    assert "first signal handled" in proc.stdout and "still running" not in proc.stdout
    assert "SIGTERM: stopping after the current compiled call" in proc.stderr
    info = json.loads((tmp_path / "run.json").read_text())  # killed, not stopped, and run.json says so
    assert info["status"] == "interrupted" and info["end_time"], info
    assert info["reason"].startswith("SIGTERM sent twice: stopped at once, without checkpointing the current state")
    assert info["reason"].endswith(f"continue with resume={tmp_path}"), info["reason"]
    # a stop after the chunk would have saved iteration 3 (the save of iteration 2 may have been
    # cut short too: orbax writes in the background, and a killed save leaves only a temporary folder)
    assert not [p.name for p in checkpoint_dir(tmp_path).iterdir() if p.name.startswith("3")]


class SignalAt:
    """A recorder that sends ``signum`` to this process at logging point ``iteration``."""

    def __init__(self, signum, iteration):
        self.signum, self.iteration = signum, iteration

    def init(self, config):
        pass

    def close(self):
        pass

    def write(self, metrics, step):
        if metrics["iteration"] == self.iteration:
            os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("signum", [signal.SIGINT,  # two runs each
                                    pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_a_stopped_run_resumes_bit_identical_to_an_uninterrupted_one(tmp_path, signum, monkeypatch, capsys):
    """Stopped by the signal at iteration 2 of 6 (checkpointed then), resumed to 6: the same
    parameters, optimiser state and env states as the run that was never stopped. The
    message names the run folder to resume, absolute, though it was given relative."""
    monkeypatch.chdir(tmp_path)
    cfg = {**TINY, "checkpoint": {"save_interval": 3}}  # the stop's checkpoint is the signal's own
    with pytest.raises(TrainingInterrupted) as stopped:
        run_experiment(cfg, output_dir="stopped", recorders=[SignalAt(signum, 2)])
    assert str(stopped.value) == (f"{signal.Signals(signum).name}: training stopped after iteration 2; its state is "
                                  f"checkpointed: continue with resume={tmp_path / 'stopped'}.")
    assert sorted(int(p.name) for p in checkpoint_dir(tmp_path / "stopped").iterdir()) == [2]
    assert json.loads((tmp_path / "stopped" / "run.json").read_text())["status"] == "interrupted"
    assert signal.getsignal(signum) is not None  # handlers restored after the run
    capsys.readouterr()
    resumed = run_experiment({**cfg, "resume": "stopped"})
    assert f"resuming {tmp_path / 'stopped'} from iteration 2" in capsys.readouterr().out
    assert resumed.run_dir == tmp_path / "stopped"
    straight = run_experiment(cfg, output_dir=tmp_path / "straight")
    for a, b in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(straight.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow  # the command as a process, stopped and resumed, against an uninterrupted run
def test_sigterm_inside_a_long_chunk_stops_within_seconds_and_resumes_bit_identical(tmp_path):
    """One chunk of 10^6 iterations (``eval_interval``): SIGTERM after the chunk's first compiled
    calls stops it within one call (``CALL_SECONDS``) plus the partial chunk's evaluation and
    checkpoint, not at the chunk's end; the run resumed from that iteration ends bit-identical
    to one never stopped."""
    # no annealing: the learning rate must not depend on num_iterations, which the check shortens
    cfg = {**TINY, "training": {**TINY["training"], "num_iterations": 10**6, "eval_interval": 10**6,
                                "anneal_lr": False}, "checkpoint": {"save_interval": 10**6}}
    script = textwrap.dedent(f"""
        from evorl.app.experiment import run_experiment

        class ShowProgress:
            def init(self, config): pass
            def close(self): pass
            def write(self, metrics, step): pass
            def progress(self, step):
                print("progress", step, flush=True)

        run_experiment({cfg!r}, output_dir={str(tmp_path / "stopped")!r}, recorders=[ShowProgress()])
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        for line in proc.stdout:
            if line.startswith("progress") and int(line.split()[1]) > 0:  # a compiled call has ended
                break
        signalled = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        waited = time.perf_counter() - signalled
    finally:
        proc.kill()
    assert proc.returncode == 1 and "TrainingInterrupted: SIGTERM: training stopped after iteration" in err, err
    assert waited < CALL_SECONDS + 15, waited  # one call, an evaluation of 2 episodes, a checkpoint
    [saved] = [int(p.name) for p in checkpoint_dir(tmp_path / "stopped").iterdir()]
    assert 0 < saved < 10**6
    assert json.loads((tmp_path / "stopped" / "run.json").read_text())["status"] == "interrupted"

    short = {**cfg, "training": {**cfg["training"], "num_iterations": saved + 3}}
    resumed = run_experiment({**short, "resume": str(tmp_path / "stopped")})
    straight = run_experiment(short, output_dir=tmp_path / "straight")
    assert int(resumed.state.iteration) == saved + 3
    for a, b in zip(jax.tree.leaves(resumed.state), jax.tree.leaves(straight.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


SLOW_START = '''
import pathlib, time
import gymnasium as gym
import numpy as np


class Slow(gym.Env):
    """An env whose construction takes a minute: the run is still starting up."""
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        pathlib.Path("building").touch()
        time.sleep(60)


gym.register(id="Slow-v0", entry_point=Slow, max_episode_steps=10)
'''


@pytest.mark.parametrize("signum", [signal.SIGINT,  # a process each
                                    pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_a_signal_while_the_run_starts_is_one_line_and_the_signals_status(tmp_path, signum):
    """Ctrl-C (or SIGTERM) while the env is being built: one line and exit 130 (143), no
    traceback, no process left training."""
    (tmp_path / "slowstart.py").write_text(SLOW_START)
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "train.py"), "--config-name=impala_gymnasium_cartpole",
                             "env.env_name=slowstart:Slow-v0", f"hydra.run.dir={tmp_path / 'run'}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "building").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert (tmp_path / "building").exists(), proc.communicate(timeout=10)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)  # not the env's 60 s
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err, err
    name = signal.Signals(signum).name
    assert [line for line in err.splitlines() if line.startswith("evorl:")] == [
        f"evorl: {name}: stopped before training started"], err


def test_a_signal_python_swallowed_before_learn_stops_learn_at_once():
    """Python ignores an exception raised in a garbage-collection callback (JAX registers one),
    which is where a Ctrl-C in the first second of a run landed, and the run trained to its end.
    The signal is remembered: ``learn``, when it starts, stops at its first safe point."""
    import gc

    from evorl.app.stop_signals import stop_on_signals, stopping_outside_training
    from evorl.engine.services import StopRequest

    def signal_inside_gc(phase, info):
        gc.callbacks.remove(signal_inside_gc)
        signal.raise_signal(signal.SIGINT)  # its handler raises here, inside the callback

    before = signal.getsignal(signal.SIGINT)  # SIG_IGN in a job started in the background
    with stopping_outside_training():
        gc.callbacks.append(signal_inside_gc)
        gc.collect()  # no exception reaches this frame
        stop = StopRequest()
        with stop_on_signals(stop, "W"):
            assert stop.reason == "SIGINT"
        second = StopRequest()
        with stop_on_signals(second, "W"):  # taken once
            assert second.reason is None
    assert signal.getsignal(signal.SIGINT) is before
