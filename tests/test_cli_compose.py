"""The first hour on the command line: config groups (algo=, env=), switching workflow_cls,
--help, --list-envs, an unknown --config-name, and no stray folders (a config error, resume)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, str(ROOT / "scripts" / "train.py")]
#: Tiny and valid for every algorithm (one minibatch, one epoch: A2C's structure).
TINY = ["agent.actor_hidden_layer_sizes=[8]", "agent.critic_hidden_layer_sizes=[8]", "training.num_iterations=2",
        "training.eval_interval=1", "training.eval_episodes=2", "training.rollout_length=8", "training.num_envs=4",
        "logging.plot=false"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("jax_cache_compose")


def train(args, cwd, cache_dir=None, status=0):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("HYDRA_FULL_ERROR", None)
    if cache_dir is not None:
        env["EVORL_COMPILATION_CACHE"] = str(cache_dir)
    proc = subprocess.run(TRAIN + args, cwd=cwd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == status, proc.stdout + proc.stderr
    return proc


def run_folders(cwd):
    return sorted(p.relative_to(cwd) for p in (cwd / "outputs").glob("*/*")) if (cwd / "outputs").exists() else []


@pytest.mark.slow
def test_algo_and_env_groups_compose(tmp_path, cache_dir):
    proc = train(["algo=a2c", "env=acrobot", *TINY, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, cache_dir)
    assert "[A2C] iter=2 " in proc.stdout
    assert "evorl: note: algo=a2c env=acrobot has no tuned preset" in proc.stderr  # no measured target
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["workflow_cls"] == "evorl.workflows.A2CWorkflow" and config["env"]["env_name"] == "Acrobot-v1"
    assert config["agent"]["normalize_obs"] is True  # env/acrobot.yaml
    assert config["agent"]["vf_coef"] == 0.5 and config["agent"]["ent_coef"] == 0.01  # algo/a2c.yaml
    assert config["training"]["learning_rate"] == 7e-4 and config["training"]["num_minibatches"] == 1
    assert config["training"]["num_envs"] == 4  # the command line over both


@pytest.mark.slow
def test_workflow_cls_alone_switches_algorithm_and_resume_adds_no_folder(tmp_path, cache_dir):
    proc = train(["workflow_cls=evorl.workflows.A2CWorkflow", *TINY], tmp_path, cache_dir)
    assert "leaving out the algorithm defaults of the config" in proc.stderr and "algo=a2c" in proc.stderr
    assert "[A2C] iter=2 " in proc.stdout
    [run_dir] = run_folders(tmp_path)
    config = yaml.safe_load((tmp_path / run_dir / "config.yaml").read_text())
    assert "clip_epsilon" not in config["agent"] and config["training"]["num_minibatches"] == 1  # A2C's own defaults

    proc = train([f"resume={run_dir}", "training.num_iterations=3"], tmp_path, cache_dir)
    assert "[A2C] iter=3 " in proc.stdout
    assert run_folders(tmp_path) == [run_dir]  # the run continued in its folder; nothing new in outputs/


@pytest.mark.slow  # the command as processes
def test_config_errors_name_the_fix_and_leave_no_folder(tmp_path):
    proc = train(["agent.vtrace_rho_bar=2"], tmp_path, status=2)
    assert "'agent.vtrace_rho_bar' is a key of IMPALA, not of PPO" in proc.stderr
    assert "algo=impala (or --config-name=impala_cartpole)" in proc.stderr
    proc = train(["training.num_envz=2"], tmp_path, status=2)
    assert "Did you mean 'training.num_envs'?" in proc.stderr  # a typo is still strict
    assert not (tmp_path / "outputs").exists()


def test_unknown_config_name_lists_the_valid_ones(tmp_path):
    proc = train(["--config-name=ppo_cartpol"], tmp_path, status=2)
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("evorl: unknown config name 'ppo_cartpol'. Did you mean 'ppo_cartpole' or ")
    assert "Valid: a2c_breakout, " in line and "reinforce_cartpole" in line and "algo=<name>" in line and "search path" not in proc.stderr.lower()


def test_help_lists_configs_algorithms_env_types_and_keys(tmp_path):
    out = train(["--help"], tmp_path).stdout
    for text in ("algo=<a2c|ddpg|dqn|impala|ppo|reinforce|sac|td3>", "env=<acrobot|cartpole|pendulum>", "ppo_cartpole",
                 "evorl.workflows.A2CWorkflow", "Advantage actor-critic", "Env types (env.env_type): gymnax, brax",
                 "anneal_lr = true", "Decay the learning rate linearly to 0 over num_iterations",
                 "agent (IMPALA, algo=impala): ", "vtrace_rho_bar=1.0", "checkpoint:", "max_to_keep = 3", "--list-envs",
                 "evorl.workflows.ESWorkflow", "strategy = OpenES", "population_size = 64",
                 # the default job's values (config.yaml with algo/ppo.yaml), not the dataclasses' (4, 4, false)
                 "num_envs = 8 ", "num_minibatches = 8 ", "agent (PPO, the default job): ", "normalize_obs=true",
                 "training (A2C, algo=a2c) where it differs: ", "num_epochs=1",
                 # whole first sentences: runner.mode's auto is explained
                 "mode = auto ", "auto (the default): async for host environments (gymnasium,"):
        assert text in out, text
    assert "``" not in out and ":class:" not in out and "Powered by Hydra" not in out
    assert not [line for line in out.splitlines() if line.endswith(" ...")]  # no description cut short
    assert max(len(line) for line in out.splitlines()) <= 100


@pytest.mark.slow  # ~19 s on 2 cores at load 8-10 (2026-12-03)
def test_list_envs(tmp_path):
    out = train(["--list-envs", "gymnax"], tmp_path).stdout
    assert out.startswith("gymnax (") and "CartPole-v1" in out and "Breakout-MinAtar" in out and "brax" not in out
    pytest.importorskip("gymnasium")
    check = ("import sys; from evorl.app.cli_help import env_names; names = env_names('gymnasium'); "
             "assert 'CartPole-v1' in names and 'HalfCheetah-v5' in names and 'ALE/Pong-v5' in names, names; "
             "assert 'mujoco' not in sys.modules and 'ale_py' not in sys.modules")  # ids, not the envs' packages
    subprocess.run([sys.executable, "-c", check], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "unknown env type 'gym'" in train(["--list-envs", "gym"], tmp_path, status=2).stderr


@pytest.mark.parametrize("module", ["evorl.app.scripts.evaluate", "evorl.app.scripts.plot"])
def test_eval_and_plot_help_are_plain_text(module, capsys):
    import importlib

    mod = importlib.import_module(module)
    main = mod.parse_args if hasattr(mod, "parse_args") else mod.main
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "RUN_DIR" in out and "``" not in out and ":class:" not in out


def test_untuned_combinations_are_flagged_in_one_line():
    from evorl.app.config_groups import untuned_note

    note = untuned_note({"algo": "a2c", "env": "acrobot"})
    assert note.startswith("note: algo=a2c env=acrobot has no tuned preset") and "algo=ppo has one" in note
    assert "\n" not in note
    assert untuned_note({"algo": "ppo", "env": "acrobot"}) is None  # configs/tuned/ppo_acrobot.yaml
    assert untuned_note({"algo": "impala", "env": "cartpole"}) is None  # the algorithms' own env
    assert "no algorithm has one" in untuned_note({"algo": "impala", "env": "nosuch"})


def test_help_sets_each_algorithm_apart():
    """Workflows that share a module (TD3 and DDPG, IPPO and MAPPO, MATD3 and MADDPG) each get
    their own line in --help, naming what sets them apart."""
    from evorl.app.cli_help import algorithm_lines

    text = "\n".join(algorithm_lines())
    by_name = {}
    for line in text.replace("\n    ", " ").splitlines():
        name, _, description = line.strip().partition(" ")
        by_name[name.removeprefix("evorl.workflows.")] = " ".join(description.split())
    assert len(set(by_name.values())) == len(by_name), by_name  # no two alike
    for name, words in {"DDPGWorkflow": ("one critic",), "TD3Workflow": ("twin critics", "delayed"),
                        "IPPOWorkflow": ("its own observation",), "MAPPOWorkflow": ("global state",),
                        "MATD3Workflow": ("twin", "TD3"), "MADDPGWorkflow": ("DDPG", "one centralised critic")}.items():
        assert all(w in by_name[name] for w in words), (name, by_name[name])
