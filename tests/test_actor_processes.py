"""Actor processes (``runner.actor_processes=true``): a rollout in a child process is the
rollout a thread acts, the learner's updates are the same, and a child's failure, hang or
death ends the run as an actor thread's would, leaving no process behind."""

import contextlib
import copy
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium
import jax
import numpy as np
import pytest
from conftest import TINY

from evorl.config import ConfigError
from evorl.app.experiment import run_experiment
from evorl.app.run_folder import checkpoint_dir
from evorl.workflows import PPOWorkflow
from evorl.engine.actor_learner import ActorFailed, EnvStepTimeout
from evorl.engine.actor_processes import ACTOR_VARIABLE, CHILD_COMMAND, ActorProcessFailed, ProcessActorRollout
from evorl.engine.actors import HostEnvActorRollout

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the child processes")


def processes() -> list[tuple[int, int, int, str]]:
    """``(pid, parent pid, process group, command line)`` of the live processes (Linux: /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if fields[0] != "Z":
            found.append((int(entry.name), int(fields[1]), int(fields[2]), cmdline))
    return found


def children() -> list[int]:
    """This process's live actor processes."""
    return [pid for pid, ppid, _, cmdline in processes() if ppid == os.getpid() and CHILD_COMMAND in cmdline]


def config(env_name="CartPole-v1", **runner):
    cfg = copy.deepcopy(TINY)
    cfg["env"] = {"env_name": env_name, "env_type": "gymnasium"}
    cfg["training"].update(num_envs=8, num_epochs=2, rollout_length=8)
    cfg["runner"] = {"mode": "async", "num_actors": 1, "actor_processes": True, **runner}
    return cfg


def test_a_rollout_in_a_process_is_the_rollout_a_thread_acts():
    workflow = PPOWorkflow.build_from_config(config(), recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    env = workflow.env.with_num_envs(4)
    args = (workflow.agent, 8, np.arange(4, 8), [123])
    thread, process = HostEnvActorRollout([env], *args), ProcessActorRollout([env.with_num_envs(4)], *args)
    try:
        for key in jax.random.split(jax.random.PRNGKey(7), 3):  # the envs carry on across rollouts
            expected, expected_episodes = thread(state.agent_state, key)
            got, episodes = process(state.agent_state, key)
            jax.tree.map(np.testing.assert_array_equal, got, jax.tree.map(np.asarray, expected))
            jax.tree.map(np.testing.assert_array_equal, episodes, expected_episodes)
    finally:
        thread.close()
        process.close()
    assert not children()


@pytest.mark.slow  # ~10 s on 2 cores (2026-12-04)
def test_lockstep_learner_updates_with_processes_equal_those_with_threads():
    """One actor in lockstep on a host env is deterministic: the same updates either way."""
    states = []
    for processes in (False, True):
        workflow = PPOWorkflow.build_from_config(config(lockstep=True, actor_processes=processes), recorders=[])
        state = workflow.init(jax.random.PRNGKey(0))
        with workflow.executor.running(state):
            state, _ = workflow.executor.run(state, 3)
        states.append(state.agent_state)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), *states)
    assert not children()


def test_actor_processes_need_a_host_env():
    cfg = config()
    cfg["env"] = {"env_name": "CartPole-v1", "env_type": "gymnax"}
    with pytest.raises(ConfigError, match="needs a host env"):
        PPOWorkflow.build_from_config(cfg, recorders=[])
    cfg = config(mode="fused")
    with pytest.raises(ConfigError, match="runner.actor_processes=true"):
        PPOWorkflow.build_from_config(cfg, recorders=[])


class Breaks(gymnasium.Env):
    """In an actor process (``EVORL_ACTOR_PROCESS`` set), its 20th step raises, hangs for
    ``hang`` seconds, or ends the process (``die``); the evaluation plays it normally."""

    observation_space = gymnasium.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, hang: float = 0.0, die: bool = False):
        self.hang, self.die, self.calls = hang, die, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.calls += ACTOR_VARIABLE in os.environ
        if self.calls == 20:
            if self.die:
                os._exit(7)
            if not self.hang:
                raise RuntimeError("the simulator exploded in its process")
            time.sleep(self.hang)
        return np.full(2, 0.5, np.float32), 1.0, False, False, {}


gymnasium.register(id="BreaksInProcess-v0", entry_point=Breaks, max_episode_steps=50)


def fault_config(**kwargs):
    cfg = config("BreaksInProcess-v0", num_actors=2)
    cfg["env"]["kwargs"] = kwargs
    cfg["training"].update(num_iterations=1000)
    return cfg


@pytest.mark.slow  # starts actor processes
def test_an_exception_in_an_actor_process_ends_the_run_with_its_traceback(tmp_path):
    with pytest.raises(ActorFailed, match="the simulator exploded in its process") as failure:
        run_experiment(fault_config(), output_dir=tmp_path)
    assert "evorl-actor-" in str(failure.value) and "in step" in str(failure.value)
    assert "checkpointed" in str(failure.value)
    assert list(checkpoint_dir(tmp_path).iterdir())
    assert not children()


@pytest.mark.slow  # starts actor processes
def test_an_actor_process_that_dies_ends_the_run_with_its_exit_code(tmp_path):
    with pytest.raises(ActorFailed, match="exited with code 7"):
        run_experiment(fault_config(die=True), output_dir=tmp_path)
    assert list(checkpoint_dir(tmp_path).iterdir())
    assert not children()


@pytest.mark.slow  # waits out an actor process's step timeout
def test_a_stuck_step_in_an_actor_process_ends_the_run_and_the_process(tmp_path):
    cfg = fault_config(hang=60.0)
    cfg["runner"]["env_step_timeout_seconds"] = 1.0
    start = time.monotonic()
    with pytest.raises(EnvStepTimeout, match="has not returned for 1 s"):
        run_experiment(cfg, output_dir=tmp_path)
    assert time.monotonic() - start < 40  # the 60 s step is killed, not waited for
    assert list(checkpoint_dir(tmp_path).iterdir())
    assert not children()


@pytest.mark.slow  # the command as a process with actor processes
def test_ctrl_c_to_the_process_group_stops_an_actor_process_run_with_a_checkpoint(tmp_path):
    """Ctrl-C in a terminal signals every process of the group: the children ignore it and
    the learner's process stops them after its current update, as with threads."""
    run_dir = tmp_path / "run"
    overrides = ["env.env_type=gymnasium", "agent.actor_hidden_layer_sizes=[8]", "agent.critic_hidden_layer_sizes=[8]",
                 "runner.actor_processes=true", "runner.num_actors=2", "training.num_envs=8",
                 "training.rollout_length=16", "training.num_minibatches=2", "training.num_epochs=1",
                 "training.eval_episodes=2", "training.eval_interval=5", "training.num_iterations=100000",
                 "checkpoint.save_interval=1000", "logging.console=lines", "logging.plot=false",
                 f"hydra.run.dir={run_dir}"]
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, str(root / "scripts" / "train.py"), *overrides], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        for line in proc.stdout:
            if "iter=10 " in line:
                break
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "evorl: SIGINT: training stopped after iteration " in err, err
    assert "ActorFailed" not in err and "raised" not in err, err
    assert list(checkpoint_dir(run_dir).iterdir())
    time.sleep(1.5)  # an orphaned child would notice its parent's end within a second
    leftover = [pid for pid, _, group, _ in processes() if group == proc.pid]
    assert not leftover, leftover


def _rebuild_outside_actor_processes():
    if ACTOR_VARIABLE in os.environ:
        raise RuntimeError("this env cannot be rebuilt in an actor process")
    return Unbuildable()


class Unbuildable:
    """Unpickles in the learner's process only."""

    def __reduce__(self):
        return _rebuild_outside_actor_processes, ()


def test_what_the_child_cannot_unpickle_ends_the_first_rollout_with_its_traceback():
    """The child fails before its first rollout (it cannot rebuild the envs it was sent) and
    exits: the first call raises with the child's own traceback, not a broken pipe."""
    rollout = ProcessActorRollout([Unbuildable()], None, 8, np.arange(2), [0])
    try:
        time.sleep(3.0)  # the child has failed and exited before the call
        with pytest.raises(ActorProcessFailed, match="cannot be rebuilt in an actor process"):
            rollout({"w": np.zeros(100_000)}, np.zeros(2, np.uint32))  # larger than a pipe's buffer
    finally:
        rollout.close()
    assert not children()
