"""Evaluation renderings (learning curves: tests/test_plotting.py)."""

import os
import sys
import warnings

import jax
import numpy as np
import pytest

from evorl.app.rendering import FFMPEG_PLAIN_START, render_episode
from evorl.config import install_hint
from evorl.workflows import PPOWorkflow


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_render_gymnax_episode(tmp_path, suffix, monkeypatch):
    iio = pytest.importorskip("imageio.v3")
    if suffix == ".mp4":
        pytest.importorskip("imageio_ffmpeg")
    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "Catch-bsuite", "env_type": "gymnax"},
        "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
    }, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = render_episode(workflow, state, tmp_path / f"episode{suffix}", max_steps=30)
    assert not [w for w in caught if "os.fork()" in str(w.message)]  # ffmpeg started without a preexec_fn
    assert FFMPEG_PLAIN_START not in os.environ  # the switch was set for the write only
    monkeypatch.setenv(FFMPEG_PLAIN_START, "1")  # imageio's reader starts ffmpeg the same way
    frames = iio.imread(path)
    assert frames.ndim == 4 and frames.shape[-1] == 3 and len(frames) == 9  # Catch: the ball falls 9 rows


def test_render_gymnax_episode_with_sticky_actions(tmp_path):
    # with sticky actions the backend state wraps the game's (GymnaxEnv.game_states)
    iio = pytest.importorskip("imageio.v3")
    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "Catch-bsuite", "env_type": "gymnax", "repeat_action_probability": 0.5},
        "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
    }, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    frames = iio.imread(render_episode(workflow, state, tmp_path / "episode.gif", max_steps=30))
    assert frames.ndim == 4 and frames.shape[-1] == 3 and len(frames) == 9


@pytest.mark.slow
def test_render_brax_episode_to_html(tmp_path):
    pytest.importorskip("brax")
    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "inverted_pendulum", "env_type": "brax", "backend": "spring"},
        "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
    }, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    path = render_episode(workflow, state, tmp_path / "episode.html", max_steps=20)
    page = path.read_text()
    assert "<title>brax visualizer</title>" in page.lower() and page.rstrip().endswith("</html>")
    assert len(page) > 1000
    with pytest.raises(ValueError, match=r"writes \.html files"):
        render_episode(workflow, state, tmp_path / "episode.gif", max_steps=5)


def _tiny_cartpole_run(tiny_cfg, tmp_path):
    from evorl.app.experiment import run_experiment

    tiny_cfg["training"]["num_iterations"] = 2
    run_experiment(tiny_cfg, output_dir=tmp_path)
    return tmp_path


@pytest.mark.parametrize("out_name, message", [
    ("episode.gif", f"cannot render: Rendering CartPole-v1 needs pygame: {install_hint('render')}."),
    ("episode.png", "cannot render: Rendering CartPole-v1 writes .gif or .mp4 files, not 'episode.png'."),
])
def test_evaluate_checks_the_rendering_before_evaluating(tiny_cfg, tmp_path, monkeypatch, capsys, out_name, message):
    from evorl.app.scripts.evaluate import main
    from evorl.engine.on_policy_workflow import OnPolicyWorkflow

    run_dir = _tiny_cartpole_run(tiny_cfg, tmp_path / "run")
    evaluations = []
    monkeypatch.setattr(OnPolicyWorkflow, "evaluate", lambda self, state: evaluations.append(state))
    monkeypatch.setitem(sys.modules, "pygame", None)  # import pygame raises ImportError
    with pytest.raises(SystemExit) as info:
        main([str(run_dir), "--episodes", "100", "--render", str(tmp_path / out_name)])
    assert info.value.code == 2 and evaluations == []
    assert capsys.readouterr().err.strip() == f"evorl-eval: {message}"


def test_classic_control_rendering_is_quiet_on_a_headless_machine(tmp_path, capfd, monkeypatch):
    pytest.importorskip("pygame")
    from PIL import Image

    for name in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
        monkeypatch.delenv(name, raising=False)
    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
        "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
    }, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    capfd.readouterr()
    path = render_episode(workflow, state, tmp_path / "episode.gif", max_steps=40)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")  # pygame's probes printed "XDG_RUNTIME_DIR is invalid" once per frame
    assert "SDL_VIDEODRIVER" not in os.environ  # set for the rendering only
    gif = Image.open(path)
    assert gif.n_frames >= 8 and gif.size == (600, 400)  # gymnasium's CartPole frames
    assert gif.convert("RGB").getpixel((300, 100)) == (255, 255, 255)  # the background stays white


def test_gif_palette_keeps_frequent_colours_exact(tmp_path):
    from PIL import Image

    from evorl.app.rendering import write_gif

    rng = np.random.default_rng(0)
    flat = np.full((40, 60, 3), 255, np.uint8)
    flat[10:20, 10:30] = (202, 152, 101)
    flat[0, :] = rng.integers(0, 256, (60, 3))  # 60 rare colours: nearest palette colour
    noise = rng.integers(0, 256, (300, 300, 3), dtype=np.uint8)  # more than 65536 colours: median cut
    for name, frames in (("flat", [flat, flat[::-1].copy()]), ("noise", [noise, noise[::-1].copy()])):
        write_gif(frames, tmp_path / f"{name}.gif", frame_ms=50)
        gif = Image.open(tmp_path / f"{name}.gif")
        decoded = []
        for i in range(gif.n_frames):
            gif.seek(i)
            decoded.append(np.asarray(gif.convert("RGB")))
        assert len(decoded) == 2
        error = np.abs(np.stack(decoded).astype(int) - np.stack(frames))
        if name == "flat":
            assert (error[:, 1:-1] == 0).all()  # white and the pole's colour, exactly
        else:
            assert error.mean() < 20


@pytest.mark.slow  # ~24 s on 2 cores at load 8-10 (2026-12-03)
def test_evaluate_says_which_actions_it_evaluates(tiny_cfg, tmp_path, capsys):
    """evorl-eval evaluates as the run did (training.eval_deterministic) unless --actions says
    otherwise, and its line names the mode it used; sampled and greedy returns differ here."""
    from evorl.app.scripts.evaluate import main

    tiny_cfg["training"]["eval_deterministic"] = False
    run_dir = str(_tiny_cartpole_run(tiny_cfg, tmp_path / "run"))
    lines = {}
    for actions in (None, "greedy", "sampled"):
        main([run_dir, "--episodes", "16"] + ([] if actions is None else ["--actions", actions]))
        lines[actions] = capsys.readouterr().out.strip().splitlines()[-1]
    assert "16 sampled-action episodes: return mean" in lines[None]
    assert "16 greedy episodes: return mean" in lines["greedy"]
    assert lines["sampled"] == lines[None]  # the run's own mode, same key: the same episodes
    assert lines["greedy"].split("return")[1] != lines[None].split("return")[1]


@pytest.mark.slow
def test_evaluate_a_population_says_so_and_gives_each_agent(tiny_cfg, tmp_path, capsys):
    """A run of 2 seeds: one line for the spread across agents, then each agent's episodes
    (the std of the first line is across agents; it used to read as if over episodes)."""
    from evorl.app.scripts.evaluate import main

    tiny_cfg["training"]["num_seeds"] = 2
    run_dir = str(_tiny_cartpole_run(tiny_cfg, tmp_path / "run"))
    capsys.readouterr()
    main([run_dir, "--episodes", "3"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert "3 greedy episodes per agent, 2 agents: mean return" in lines[0] and "across agents" in lines[0]
    assert [line.split(":")[0] for line in lines[1:]] == ["  agent 0 (seed 0)", "  agent 1 (seed 1)"], lines
    means = [float(line.split("return mean ")[1].split()[0]) for line in lines[1:]]
    assert float(lines[0].split("mean return ")[1].split()[0]) == pytest.approx(np.mean(means), abs=0.01)


@pytest.mark.parametrize("args, message", [
    (["--episodes", "0"], "--episodes must be >= 1, got 0"),
    # DQN evaluates its greedy actions: its training section has no eval_deterministic to set
    (["--actions", "sampled"], "--actions applies to runs that evaluate a stochastic policy"),
])
def test_evaluate_usage_errors_are_one_line_and_status_2(tmp_path, capsys, args, message):
    from evorl.app.experiment import run_experiment
    from evorl.app.scripts.evaluate import main

    run_experiment({"workflow_cls": "evorl.workflows.DQNWorkflow", "env": {"env_name": "CartPole-v1"},
                    "agent": {"q_hidden_layer_sizes": [8]},
                    "training": {"num_iterations": 2, "num_envs": 4, "buffer_size": 64, "batch_size": 8,
                                 "learning_starts": 8, "eval_interval": 2, "eval_episodes": 2},
                    "logging": {"recorders": [], "plot": False}}, output_dir=tmp_path)
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path), *args])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evorl-eval: ") and message in err and "\n" not in err, err
