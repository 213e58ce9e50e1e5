"""The progress bar moves while training runs, not only at logging points: after every
learner update of the asynchronous runner (a slow host env) and every chunk of the fused one,
with steps/s and an ETA; a resumed run's bar starts at the step it resumed from."""

import copy
import time

import gymnasium
import numpy as np
import pytest
from conftest import TINY

from evorl.experiment import run_experiment
from evorl.recorders import ProgressRecorder


class SlowCorridor(gymnasium.Env):
    """A host env whose step takes a few milliseconds (a simulator, an emulator)."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        time.sleep(0.002)
        return np.full(2, float(action), np.float32), float(action), False, False, {}


gymnasium.register(id="SlowCorridor-v0", entry_point=SlowCorridor, max_episode_steps=10)


@pytest.fixture
def bar_events(monkeypatch):
    """What every ProgressRecorder shows, in order: ``("init", completed)``, ``("progress",
    completed, rate, eta, status)`` and ``("write", completed)``, read from the rich bar itself."""
    events = []

    def fields(bar):
        return bar._progress.tasks[0].fields

    def spy(method, record):
        original = getattr(ProgressRecorder, method)

        def wrapped(self, *args):
            original(self, *args)
            events.append(record(self))
        monkeypatch.setattr(ProgressRecorder, method, wrapped)

    spy("init", lambda bar: ("init", bar.completed, fields(bar)["status"]))
    spy("progress", lambda bar: ("progress", bar.completed, fields(bar)["rate"], fields(bar)["eta"],
                                 fields(bar)["status"]))
    spy("write", lambda bar: ("write", bar.completed))
    return events


def bar_config(env, runner_mode, num_iterations, eval_interval):
    cfg = copy.deepcopy(TINY)
    cfg["env"] = env
    cfg["runner"] = {"mode": runner_mode}
    cfg["training"].update(num_iterations=num_iterations, eval_interval=eval_interval, rollout_length=8,
                           num_envs=4, eval_episodes=1)
    cfg["checkpoint"] = {"save_interval": None}
    cfg["logging"] = {"recorders": ["console"], "console": "bar", "plot": False}
    return cfg


@pytest.mark.slow  # ~27 s on 2 cores at load 8-10 (2026-12-03)
def test_async_bar_moves_with_every_update_before_the_first_evaluation_and_resumes_at_its_step(tmp_path, bar_events):
    cfg = bar_config({"env_name": "SlowCorridor-v0", "env_type": "gymnasium"}, "async", 4, 4)
    steps = 8 * 4  # env steps per iteration: rollout_length x num_envs
    run_experiment(cfg, output_dir=tmp_path)
    assert bar_events[0] == ("init", 0, "compiling...")
    before_log = bar_events[1:bar_events.index(("write", 4 * steps))]
    # compiled (step 0), then after each of the 4 learner updates, then the chunk's end
    assert [e[1] for e in before_log] == [0, steps, 2 * steps, 3 * steps, 4 * steps, 4 * steps]
    assert all(e[0] == "progress" and e[4] == "training..." for e in before_log)
    assert before_log[0][2:4] == ("", "-:--:--")  # no speed measured yet
    assert before_log[2][2].endswith(" steps/s ") and before_log[2][3] != "-:--:--"  # measured after an update

    bar_events.clear()
    cfg["training"]["num_iterations"] = 6
    run_experiment({**cfg, "resume": str(tmp_path)})
    assert bar_events[0] == ("init", 4 * steps, "compiling...")  # from the resumed step, not 0
    assert [e[1] for e in bar_events if e[0] == "progress"][:3] == [4 * steps, 5 * steps, 6 * steps]


def test_fused_bar_moves_with_every_chunk(bar_events):
    cfg = bar_config({"env_name": "CartPole-v1", "env_type": "gymnax"}, "fused", 4, 2)
    run_experiment(cfg)
    steps = 8 * 4
    events = [e[:2] for e in bar_events]
    assert events[:2] == [("init", 0), ("progress", 0)]
    assert [e for e in events if e[0] == "write"] == [("write", 2 * steps), ("write", 4 * steps)]
    progress = [n for kind, n in events[1:] if kind == "progress"]
    assert progress == sorted(progress) and progress[-1] == 4 * steps
    # the bar moves with every compiled call: the first call of the first chunk is one iteration
    assert ("progress", steps) in events
    for i, (kind, n) in enumerate(events):
        if kind == "write":
            assert events[i - 1] == ("progress", n)
    assert bar_events[2][2].endswith(" steps/s ") and bar_events[2][3] != "-:--:--"
