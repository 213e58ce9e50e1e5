"""The command line: Hydra overrides from any directory, resume, a joblib sweep, evaluate, plot."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TINY_OVERRIDES = [
    "agent.actor_hidden_layer_sizes=[8]", "agent.critic_hidden_layer_sizes=[8]", "training.rollout_length=16",
    "training.num_minibatches=2", "training.num_epochs=1", "training.eval_episodes=2", "training.eval_interval=1",
]


def run(args, cwd, cache_dir):
    env = {**os.environ, "HYDRA_FULL_ERROR": "1", "JAX_COMPILATION_CACHE_DIR": str(cache_dir),
           "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def command(name):
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed (pip install -e .)")
    return [str(path)]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("jax_cache_cli")


@pytest.mark.slow
def test_train_with_overrides_from_any_directory_then_resume_and_evaluate(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    out = run(command("evorl-train") + TINY_OVERRIDES + [
        "training.num_iterations=2", "checkpoint.save_interval=1", "logging.recorders=[console,csv,tensorboard]",
        "env.env_name=Acrobot-v1", f"hydra.run.dir={run_dir}"], cwd=tmp_path, cache_dir=cache_dir)
    assert "[PPO] iter=2 " in out and "final evaluation over 2 episodes" in out
    # a line before JAX's import, the env build, the state's initialisation and the compilation
    starts = ["[evorl] importing JAX and the workflows...", "[PPO] building the env (gymnax Acrobot-v1) and the agent...",
              "[PPO] initialising the training state", "[PPO] compiling the training program..."]
    lines = out.splitlines()
    assert [next(i for i, line in enumerate(lines) if line.startswith(start)) for start in starts] == [0, 2, 4, 6], out
    config = (run_dir / "config.yaml").read_text()
    assert "env_name: Acrobot-v1" in config and "num_iterations: 2" in config and "rollout_length: 16" in config
    info = json.loads((run_dir / "run.json").read_text())
    assert info["status"] == "finished" and info["seed"] == 0 and info["devices"] and info["jax_version"]
    assert info["start_time"] and info["end_time"] and "final_eval" in info and "git_commit" in info
    for name in ("metrics.jsonl", "metrics.csv", "learning_curve.png"):
        assert (run_dir / name).is_file(), name
    assert not (run_dir / "train.log").exists() and not (run_dir / ".hydra").exists()  # evorl's own files only
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["1", "2"]

    # resume=<run folder> takes the run's own config; num_iterations may grow
    out = run(command("evorl-train") + [f"resume={run_dir}", "training.num_iterations=3"], cwd=tmp_path,
              cache_dir=cache_dir)
    assert f"resuming {run_dir} from iteration 2" in out and "[PPO] iter=3 " in out
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["iteration"] for line in lines] == [1, 2, 3]

    out = run([sys.executable, str(ROOT / "scripts" / "evaluate.py"), str(run_dir), "--episodes", "3"],
              cwd=tmp_path, cache_dir=cache_dir)
    assert re.search(r"checkpoint 3, 3 greedy episodes: return mean -?[\d.]+ std [\d.]+ min -?[\d.]+ max -?[\d.]+", out)


@pytest.mark.slow
def test_joblib_sweep_runs_each_job_in_its_own_folder_and_plots(tmp_path, cache_dir):
    sweep_dir = tmp_path / "sweep"
    out = run([sys.executable, str(ROOT / "scripts" / "train.py"), "-m", "seed=1,2", "training.num_iterations=2",
               *TINY_OVERRIDES, f"hydra.sweep.dir={sweep_dir}"], cwd=ROOT, cache_dir=cache_dir)
    for job in (0, 1):  # the jobs' interleaved lines say whose they are
        assert f"[PPO job {job}] iter=2 " in out and f"[PPO job {job}] final evaluation" in out, out
    seeds = sorted(json.loads((sweep_dir / job / "run.json").read_text())["seed"] for job in ("0", "1"))
    assert seeds == [1, 2]
    hydra_cfg = (sweep_dir / "multirun.yaml").read_text()
    assert "JoblibLauncher" in hydra_cfg

    out = run(command("evorl-plot") + [str(sweep_dir), "-o", str(tmp_path / "curves.png")], cwd=tmp_path,
              cache_dir=cache_dir)
    assert "(2 runs)" in out and (tmp_path / "curves.png").stat().st_size > 10_000
    from evorl.app.plotting import group_runs

    assert list(group_runs([sweep_dir / "0", sweep_dir / "1"]).values()) == [[sweep_dir / "0", sweep_dir / "1"]]


def test_bad_resume_folder_is_a_clear_error(tmp_path, cache_dir):
    proc = subprocess.run(command("evorl-train") + [f"resume={tmp_path}", f"hydra.run.dir={tmp_path / 'x'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "has no config.yaml: it is not an evorl run folder" in proc.stderr
