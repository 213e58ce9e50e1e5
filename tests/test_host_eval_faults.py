"""A host env that raises or hangs while the learner's state is being evaluated ends the run
as an actor's fault does: within ``runner.env_step_timeout_seconds``, one line naming the env
and the phase, exit status 6, the learner's state checkpointed, run.json ``failed``; the run
resumes from that checkpoint."""

import copy
import json
import threading
import time

import gymnasium
import jax
import numpy as np
import pytest
from conftest import TINY

from evorl.algorithms.ppo import make_mlp_ppo_agent
from evorl.app.cli import EXIT_ACTOR_FAILED, exit_on_config_error
from evorl.envs import create_env
from evorl.engine.evaluator import make_evaluator
from evorl.app.experiment import run_experiment
from evorl.app.run_folder import checkpoint_dir


class EvalFault(gymnasium.Env):
    """Plays normally in the actors' threads; elsewhere (evaluation) its ``at``-th step raises,
    or with ``hang`` sleeps that long, while ``EvalFault.armed``."""

    armed = True
    hang_started: list[float] = []

    observation_space = gymnasium.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, at: int = 25, hang: float = 0.0):
        self.at, self.hang, self.calls = at, hang, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if not threading.current_thread().name.startswith("evorl-actor"):
            self.calls += 1
            if EvalFault.armed and self.calls == self.at:
                if not self.hang:
                    raise RuntimeError("the simulator exploded")
                EvalFault.hang_started.append(time.monotonic())
                time.sleep(self.hang)
        return np.full(2, 0.5, np.float32), 1.0, False, False, {}


gymnasium.register(id="EvalFault-v0", entry_point=EvalFault, max_episode_steps=20)


def host_config(**kwargs):
    """Two evaluations of two 20-step episodes each: ``at=25`` is in the second (iteration 4)."""
    cfg = copy.deepcopy(TINY)
    cfg["env"] = {"env_name": "EvalFault-v0", "env_type": "gymnasium", "kwargs": kwargs}
    cfg["runner"] = {"mode": "async", "num_actors": 2, "env_step_timeout_seconds": 1.0}
    cfg["training"].update(num_envs=4, rollout_length=8, num_iterations=6, eval_interval=2)
    cfg["checkpoint"]["save_interval"] = 2
    return cfg


def run_cli(cfg, run_dir, capsys):
    with pytest.raises(SystemExit) as info, exit_on_config_error():
        run_experiment(cfg, output_dir=run_dir)
    return info.value.code, capsys.readouterr().err


def assert_failed_at_iteration_4(run_dir, err):
    assert err.count("\n") == 1, err
    assert err.rstrip().endswith(f"The learner's state at iteration 4 is checkpointed: continue with resume={run_dir}.")
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "failed" and info["reason"].startswith("EvaluationFailed: evaluation: ")
    assert sorted(int(p.name) for p in checkpoint_dir(run_dir).iterdir()) == [2, 4]


@pytest.mark.slow  # ~44 s on 2 cores at load 8-10 (2026-12-03)
def test_an_env_raising_in_evaluation_exits_6_in_one_line_with_a_checkpoint(tmp_path, capsys):
    EvalFault.armed = True
    code, err = run_cli(host_config(), tmp_path, capsys)
    assert code == EXIT_ACTOR_FAILED
    assert err.startswith("evorl: evaluation: the environment EvalFault-v0 raised RuntimeError: the simulator "
                          "exploded (in step, "), err
    assert_failed_at_iteration_4(tmp_path, err)


@pytest.mark.slow  # waits out the evaluation timeout, then resumes
def test_an_env_hanging_in_evaluation_ends_after_the_timeout_and_resumes(tmp_path, capsys):
    EvalFault.armed, EvalFault.hang_started = True, []
    code, err = run_cli(host_config(hang=8.0), tmp_path, capsys)
    waited = time.monotonic() - EvalFault.hang_started[0]
    assert code == EXIT_ACTOR_FAILED
    assert waited < 1.0 + 3.0, waited  # the timeout, then the checkpoint; not the 8 s hang
    assert err.startswith("evorl: evaluation: the environment step of EvalFault-v0 has not returned for 1 s "
                          "(runner.env_step_timeout_seconds=1)"), err
    assert_failed_at_iteration_4(tmp_path, err)

    EvalFault.armed = False
    resumed = run_experiment({**host_config(hang=8.0), "resume": str(tmp_path)})
    assert int(resumed.state.iteration) == 6
    assert resumed.final_metrics["eval/episode_return"] == 20.0
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "finished"


def test_a_watched_host_evaluation_plays_the_same_episodes():
    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnasium"})
    agent = make_mlp_ppo_agent(env.action_space, env.obs_space)
    state, key = agent.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(5)
    plain = make_evaluator(env, agent, 3).evaluate(state, key)
    before = set(threading.enumerate())  # an earlier test's abandoned evaluation may still sleep
    watched = make_evaluator(env, agent, 3, step_timeout=5.0).evaluate(state, key)
    np.testing.assert_array_equal(watched, plain)
    assert not [t for t in threading.enumerate() if t.name == "evorl-eval" and t not in before]  # its thread ended
