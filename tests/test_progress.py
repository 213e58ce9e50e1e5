"""The progress bar moves while training runs, not only at logging points: after every
learner update of the asynchronous runner (a slow host env) and every chunk of the fused one,
with steps/s and an ETA; a resumed run's bar starts at the step it resumed from. Without a
terminal the console prints the same in lines: when the training program compiles, then at
most every ``progress_seconds``. Before that, each phase of a run's start (the env build, the
state's initialisation) says when it begins and how long it took. Every steps/s figure shown
has one format."""

import copy
import io
import re
import time

import gymnasium
import numpy as np
import pytest
from conftest import TINY

from evorl.app.experiment import run_experiment
from evorl.engine.recording import ConsoleRecorder, ProgressRecorder, StartupLines
from evorl.engine.recording import format_steps_per_s


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
    """What every ProgressRecorder shows, in order: ``("init", completed, status)``,
    ``("compiling", completed, status)``, ``("progress", completed, rate, eta, status)`` and
    ``("write", completed)``, read from the rich bar itself."""
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
    spy("compiling", lambda bar: ("compiling", bar.completed, fields(bar)["status"]))
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
    assert bar_events[1] == ("compiling", 0, "compiling...")
    before_log = bar_events[2:bar_events.index(("write", 4 * steps))]
    # compiled (step 0), then after each of the 4 learner updates, then the chunk's end
    assert [e[1] for e in before_log] == [0, steps, 2 * steps, 3 * steps, 4 * steps, 4 * steps]
    assert all(e[0] == "progress" and e[4] == "training..." for e in before_log)
    assert before_log[0][2:4] == ("", "-:--:--")  # no speed measured yet
    assert re.fullmatch(r"[\d,.]+ wall steps/s ", before_log[2][2]) and before_log[2][3] != "-:--:--"  # measured

    bar_events.clear()
    cfg["training"]["num_iterations"] = 6
    run_experiment({**cfg, "resume": str(tmp_path)})
    assert bar_events[0] == ("init", 4 * steps, "compiling...")  # from the resumed step, not 0
    assert bar_events[1] == ("compiling", 4 * steps, "compiling...")
    assert [e[1] for e in bar_events if e[0] == "progress"][:3] == [4 * steps, 5 * steps, 6 * steps]


@pytest.mark.slow  # a run long enough for several chunks
def test_fused_bar_moves_with_every_chunk(bar_events):
    cfg = bar_config({"env_name": "CartPole-v1", "env_type": "gymnax"}, "fused", 4, 2)
    run_experiment(cfg)
    steps = 8 * 4
    events = [e[:2] for e in bar_events]
    assert events[:3] == [("init", 0), ("compiling", 0), ("progress", 0)]
    assert [e for e in events if e[0] == "write"] == [("write", 2 * steps), ("write", 4 * steps)]
    progress = [n for kind, n in events[1:] if kind == "progress"]
    assert progress == sorted(progress) and progress[-1] == 4 * steps
    # the bar moves with every compiled call: the first call of the first chunk is one iteration
    assert ("progress", steps) in events
    for i, (kind, n) in enumerate(events):
        if kind == "write":
            assert events[i - 1] == ("progress", n)
    assert re.fullmatch(r"[\d,.]+ wall steps/s ", bar_events[3][2]) and bar_events[3][3] != "-:--:--"


class FakeClock:
    """``clock()`` returns ``now``, which the test sets."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def plain_console(clock, total_steps=6000):
    stream = io.StringIO()  # not a terminal: plain lines
    return stream, ProgressRecorder(total_steps, stream=stream, prefix="[SAC] ", progress_seconds=15.0, clock=clock)


def test_plain_console_says_it_compiles_then_shows_progress_at_most_every_15_s():
    clock = FakeClock()
    stream, console = plain_console(clock)
    console.init({})
    console.compiling(0)
    clock.now = 30.0
    console.progress(0)  # compiled: speeds are measured from here
    for second in range(1, 16):  # an update a second: 100 env steps/s
        clock.now = 30.0 + second
        console.progress(100 * second)
    clock.now = 50.0
    console.write({"iteration": 2000, "env_steps": 2000, "steps_per_s": 100.0}, 2000)
    for second in (60, 64.9, 65):  # 15 s after the logging point's line, not after the last progress line
        clock.now = second
        console.progress(int((second - 30) * 100))
    assert stream.getvalue().splitlines() == [
        "[SAC] compiling the training program...",
        "[SAC] compiled in 30.0 s",
        "[SAC] training: env_steps=1500/6000 wall_steps/s=100 eta=0:00:45",  # 4500 steps left at 100/s
        "[SAC] iter=2000 env_steps=2000 train_steps/s=100",
        "[SAC] training: env_steps=3500/6000 wall_steps/s=100 eta=0:00:25",
    ]


def test_plain_console_prints_nothing_more_when_logging_points_come_sooner_than_15_s():
    clock = FakeClock()
    stream, console = plain_console(clock)
    console.compiling(0)
    clock.now = 5.0
    console.progress(0)
    for point in range(1, 6):  # a logging point every 10 s, progress every second
        for second in range(1, 11):
            clock.now = 5.0 + 10 * (point - 1) + second
            console.progress(1000 * (point - 1) + 100 * second)
        console.write({"iteration": point, "env_steps": 1000 * point, "steps_per_s": 100.0}, 1000 * point)
    assert stream.getvalue().splitlines() == [
        "[SAC] compiling the training program...", "[SAC] compiled in 5.0 s",
        *(f"[SAC] iter={p} env_steps={1000 * p} train_steps/s=100" for p in range(1, 6)),
    ]


def test_plain_console_without_total_steps_shows_no_eta_and_without_compilation_no_compile_line():
    clock = FakeClock()
    stream = io.StringIO()
    console = ConsoleRecorder(stream=stream, prefix="[PPO] ", progress_seconds=15.0, clock=clock)
    console.progress(0)  # already compiled (a second learn()): its first call is training's start
    clock.now = 20.0
    console.progress(5000)
    # nothing at the start (no step taken, no rate: the line would say nothing)
    assert stream.getvalue().splitlines() == ["[PPO] training: env_steps=5000 wall_steps/s=250"]


def test_steps_per_s_has_one_format_at_every_magnitude():
    assert [format_steps_per_s(v) for v in (123.4, 12345.6, 1234567)] == ["123", "12,346", "1,234,567"]
    assert [format_steps_per_s(v) for v in (99.94, 52.34, 0.5, float("nan"))] == ["99.9", "52.3", "0.5", "nan"]
    line = ConsoleRecorder(prefix="[PPO] ").line
    for value, shown in ((123.4, "123"), (12345.6, "12,346"), (1234567.0, "1,234,567")):
        assert line({"iteration": 1, "steps_per_s": value}) == f"[PPO] iter=1 train_steps/s={shown}"
        bar = ProgressRecorder(total_steps=10**7, stream=io.StringIO(), style="bar")
        bar.init({})
        bar.write({"iteration": 1, "steps_per_s": value}, 1000)  # the first point: the bar shows its steps/s
        assert bar._progress.tasks[0].fields["rate"] == f"{shown} wall steps/s "
        bar.close()


@pytest.mark.slow  # the command as a process
def test_a_run_piped_to_a_file_says_what_it_does_from_its_start_before_the_env_build_and_compilation(
        capsys, monkeypatch):
    """Every phase of the start says so when it begins: the env build (brax's took 46 s on a
    loaded machine), the state's initialisation, the compilation; each line is printed before
    the phase's work starts, not after it."""
    import evorl.engine.rl_base as rl_base
    from evorl.engine.on_policy_workflow import OnPolicyWorkflow

    shown_before = {}
    create_env = rl_base.create_env

    def seen_at(name, work):
        def wrapped(*args, **kwargs):
            shown_before[name] = capsys.readouterr().out
            print(shown_before[name], end="")  # back into the captured output
            return work(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(rl_base, "create_env", seen_at("env build", create_env))
    monkeypatch.setattr(OnPolicyWorkflow, "init", seen_at("init", OnPolicyWorkflow.init))
    cfg = bar_config({"env_name": "CartPole-v1", "env_type": "gymnax"}, "fused", 2, 2)
    cfg["logging"]["console"] = "auto"  # pytest's captured stdout is not a terminal
    run_experiment(cfg)
    lines = capsys.readouterr().out.splitlines()
    assert shown_before["env build"].splitlines() == ["[PPO] building the env (gymnax CartPole-v1) and the agent..."]
    assert shown_before["init"].splitlines()[-1] == \
        "[PPO] initialising the training state (envs reset, networks and buffers created)..."
    assert lines[0] == "[PPO] building the env (gymnax CartPole-v1) and the agent..."
    assert re.fullmatch(r"\[PPO\] built in \d+\.\d s", lines[1])
    assert lines[2] == "[PPO] initialising the training state (envs reset, networks and buffers created)..."
    assert re.fullmatch(r"\[PPO\] initialised in \d+\.\d s", lines[3])
    assert lines[4] == "[PPO] compiling the training program..."
    assert re.fullmatch(r"\[PPO\] compiled in \d+\.\d s", lines[5])
    assert lines[6].startswith("[PPO] iter=2 env_steps=64 train_steps/s=")


def test_startup_lines_time_each_phase_and_print_no_end_for_a_phase_that_failed_or_without_a_console():
    clock = FakeClock()
    stream = io.StringIO()
    startup = StartupLines(prefix="[TD3] ", stream=stream, clock=clock)
    with startup.phase("building the env (brax inverted_pendulum) and the agent", "built"):
        clock.now = 46.04
    with pytest.raises(ValueError), startup.phase("initialising the training state", "initialised"):
        raise ValueError("bad")
    with StartupLines(prefix="[TD3] ", enabled=False, stream=stream, clock=clock).phase("compiling", "compiled"):
        clock.now = 60.0
    assert stream.getvalue().splitlines() == [
        "[TD3] building the env (brax inverted_pendulum) and the agent...", "[TD3] built in 46.0 s",
        "[TD3] initialising the training state...",
    ]


def test_the_two_rates_are_labelled_apart():
    """The logging point's rate (the training program's) and the progress line's (the wall
    clock's, evaluation included) are different figures: neither is a bare ``steps/s``."""
    from evorl.engine.recording import ConsoleRecorder

    console = ConsoleRecorder(prefix="[PPO] ", total_steps=2000)
    logged = console.line({"iteration": 1, "env_steps": 1000, "steps_per_s": 500.0})
    progress = console.progress_line(1000, 250.0)
    assert "train_steps/s=500" in logged and "wall_steps/s=250" in progress
    assert " steps/s=" not in logged + progress
