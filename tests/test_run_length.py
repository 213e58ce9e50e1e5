"""A run's length in env steps: ``training.total_env_steps`` sets ``num_iterations`` to
ceil(total / the env steps one iteration takes) for every RL family, is refused (with why) by
the generation-based ones, and is exclusive with ``num_iterations``; SB3's ``total_timesteps``
is pointed at it."""

import pytest

from evorl.app.config_groups import select_algorithm, with_default_config
from evorl.app.experiment import resolved_config
from evorl.config import ConfigError
from evorl.workflows import resolve_workflow_cls


def parse(cfg):
    """``cfg`` as ``run_experiment`` reads it: over its algorithm's default config."""
    cfg, _ = select_algorithm(with_default_config(cfg))
    return resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg)


@pytest.mark.parametrize("workflow, env, per_iteration", [
    ("PPOWorkflow", "CartPole-v1", 8 * 128),  # on-policy: num_envs x rollout_length
    ("A2CWorkflow", "CartPole-v1", 8 * 5),
    ("DQNWorkflow", "CartPole-v1", 10 * 10),  # off-policy: the same, into the buffer
    ("SACWorkflow", "Pendulum-v1", 1 * 1),
])
def test_total_env_steps_sets_num_iterations_over_the_algorithms_default(workflow, env, per_iteration):
    training = parse({"workflow_cls": f"evorl.workflows.{workflow}", "env": {"env_name": env},
                      "training": {"total_env_steps": 100_001}}).training
    assert training.env_steps_per_iteration == per_iteration
    assert training.num_iterations == -(-100_001 // per_iteration)  # ceil: at least the budget
    assert (training.num_iterations - 1) * per_iteration < 100_001 <= training.num_iterations * per_iteration


def test_the_saved_config_resumes_to_the_same_length():
    config = parse({"training": {"total_env_steps": 5000, "num_envs": 4, "rollout_length": 16}})
    saved = resolved_config(config)
    assert saved["training"]["num_iterations"] is None and saved["training"]["total_env_steps"] == 5000
    assert resolve_workflow_cls(saved["workflow_cls"]).parse_config(saved).training.num_iterations == 79


@pytest.mark.parametrize("cfg, message", [
    ({"training": {"total_env_steps": 10_000, "num_iterations": 5}},
     r"^training.num_iterations=5 and training.total_env_steps=10000 both set the run's length: set one"),
    ({"training": {"total_env_steps": 0}}, r"training.total_env_steps must be >= 1, got 0"),
    ({"training": {"total_env_steps": 1e6}}, r"write training.total_env_steps=1000000\.$"),
    ({"total_timesteps": 10_000}, r"^Unknown config key 'total_timesteps'. A run's length in env steps is "
                                  r"'training.total_env_steps'"),
    ({"training": {"total_timesteps": 10_000}}, r"^Unknown config key 'training.total_timesteps'. A run's length"),
    ({"workflow_cls": "evorl.workflows.ESWorkflow", "training": {"total_env_steps": 10_000}},
     r"'training.total_env_steps' does not apply to ESWorkflow: one iteration is a generation"),
    ({"workflow_cls": "evorl.workflows.CEMRLWorkflow", "env": {"env_name": "Pendulum-v1"},
      "training": {"total_env_steps": 10_000}}, r"does not apply to CEMRLWorkflow"),
    ({"workflow_cls": "evorl.workflows.ERLWorkflow", "env": {"env_name": "Pendulum-v1"},
      "training": {"total_env_steps": 10_000}}, r"does not apply to ERLWorkflow"),
])
def test_run_length_mistakes_are_one_clear_error(cfg, message):
    with pytest.raises(ConfigError, match=message):
        parse(cfg)


def test_a_single_file_config_needs_its_num_iterations_unset():
    from evorl.app.config_groups import CONFIG_DIR
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "ppo_cartpole.yaml"))
    cfg.pop("defaults", None)
    cfg["training"]["total_env_steps"] = 4096
    with pytest.raises(ConfigError, match="training.num_iterations=null keeps total_env_steps"):
        resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg)
    cfg["training"]["num_iterations"] = None
    training = resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg).training
    assert training.num_iterations == -(-4096 // training.env_steps_per_iteration)


def test_resume_sets_the_length_either_way(tmp_path):
    """A run saved with total_env_steps resumes longer with training.num_iterations=N (or a new
    total_env_steps): the override replaces the saved length, it does not clash with it."""
    import yaml

    from evorl.app.cli_args import resume_config

    saved = resolved_config(parse({"training": {"total_env_steps": 5000, "num_envs": 4, "rollout_length": 16}}))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))

    def length(overrides):
        cfg = resume_config(str(tmp_path), overrides)
        return resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg).training.num_iterations

    assert length([]) == 79
    assert length(["training.num_iterations=200"]) == 200
    assert length(["training.total_env_steps=6400"]) == 100


@pytest.mark.slow  # three short runs of the command (~40 s on 2 cores)
def test_a_run_of_total_env_steps_resumes_longer_either_way(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "EVORL_COMPILATION_CACHE": str(tmp_path / "cache")}
    env.pop("HYDRA_FULL_ERROR", None)
    run = tmp_path / "run"

    def train(*args):
        proc = subprocess.run([sys.executable, str(root / "scripts" / "train.py"), *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    out = train("training.total_env_steps=100", "training.num_envs=4", "training.rollout_length=16",
                "training.eval_interval=1", "training.eval_episodes=1", "agent.actor_hidden_layer_sizes=[8]",
                "agent.critic_hidden_layer_sizes=[8]", f"hydra.run.dir={run}")
    assert "iter=2 env_steps=128 " in out and "iter=3" not in out  # ceil(100 / 64) = 2
    assert "iter=4 env_steps=256 " in train(f"resume={run}", "training.total_env_steps=256")
    assert "iter=5 env_steps=320 " in train(f"resume={run}", "training.num_iterations=5")
