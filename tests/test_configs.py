"""Every config in configs/ is valid for its workflow: each parses (no compilation; a brax env
that this brax cannot step on this jax is refused with its reason instead), and the
A2C and IMPALA configs also build (no training). The default config, composed from the groups
algo/ x env/ (x tuned/), is valid for every combination, is composed the same by Hydra and by
``evorl.app.config_groups.default_config``, and its default job is PPO CartPole as it always was."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evorl.config import ConfigError
from evorl.config.env_limits import brax_fluid_refusal
from evorl.workflows import resolve_workflow_cls

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
CONFIGS = sorted(p for p in CONFIG_DIR.glob("*.yaml") if p.stem != "config")  # config.yaml: composed below


def load(path: Path) -> dict:
    cfg = OmegaConf.to_container(OmegaConf.load(path))
    assert cfg.pop("defaults", None) is not None, "each config is standalone: defaults: [_self_]"
    return cfg


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_is_valid(path):
    cfg = load(path)
    env = cfg.get("env", {})
    if env.get("env_type") == "brax" and brax_fluid_refusal(env["env_name"]):  # brax's own bug on this jax
        with pytest.raises(ConfigError, match="cannot step"):
            resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg)
        return
    config = resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg)
    tc = config.training
    if hasattr(tc, "num_minibatches"):  # ES configs have no minibatches
        assert (tc.num_envs * tc.rollout_length) % tc.num_minibatches == 0


@pytest.mark.parametrize("name", ["a2c_cartpole", "a2c_breakout", "impala_cartpole", "impala_breakout"])
def test_config_builds(name):
    cfg = load(CONFIG_DIR / f"{name}.yaml")
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    assert workflow.name().lower() == name.split("_")[0]


# --- the composed default config ------------------------------------------------------------
from evorl.app.config_groups import default_config, group_options, select_algorithm  # noqa: E402
from evorl.app.experiment import resolved_config  # noqa: E402

COMBINATIONS = [(a, e) for a in group_options("algo") for e in group_options("env")]


def hydra_compose(overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = OmegaConf.to_container(compose("config", overrides=overrides))
    return cfg


@pytest.mark.parametrize("algo, env", COMBINATIONS, ids=[f"{a}-{e}" for a, e in COMBINATIONS])
def test_every_algo_env_combination_composes_and_is_valid(algo, env):
    cfg = hydra_compose([f"algo={algo}", f"env={env}"])
    assert cfg == default_config(algo, env)  # the Python composition (run_experiment's) is Hydra's
    cfg, note = select_algorithm(cfg)
    assert note is None and "algo" not in cfg
    config = resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg)
    assert config.env.env_name == {"cartpole": "CartPole-v1", "acrobot": "Acrobot-v1", "pendulum": "Pendulum-v1"}[env]
    assert config.workflow_cls.endswith({"ppo": "PPOWorkflow", "a2c": "A2CWorkflow", "impala": "IMPALAWorkflow",
                                            "dqn": "DQNWorkflow", "reinforce": "REINFORCEWorkflow", "sac": "SACWorkflow",
                                            "td3": "TD3Workflow", "ddpg": "DDPGWorkflow"}[algo])
    tc = config.training
    if hasattr(tc, "num_minibatches"):  # ES configs have no minibatches
        assert (tc.num_envs * tc.rollout_length) % tc.num_minibatches == 0


def test_tuned_presets_do_not_repeat_their_env_presets_keys():
    """An env preset's top-level keys win over the algo node (tuned/ included): a key set in
    both would silently ignore the tuned value."""
    for name in group_options("tuned"):
        algo, env = name.split("_", 1)
        assert algo in group_options("algo") and env in group_options("env"), name
        tuned = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "tuned" / f"{name}.yaml"))
        preset = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "env" / f"{env}.yaml"))
        for section, values in tuned.items():
            assert not set(values) & set(preset.get(section, {})), (name, section)


# The default job before config groups (configs/config.yaml as it was): the composition keeps it,
# except that it evaluates every 10 iterations (was 50), so learning_curve.png has 10 points.
DEFAULT_JOB = {
    "workflow_cls": "evorl.workflows.PPOWorkflow", "seed": 0,
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64], "activation": "tanh",
              "clip_epsilon": 0.2, "ent_coef": 0.01, "normalize_obs": True},
    "training": {"num_iterations": 100, "rollout_length": 128, "num_envs": 8, "learning_rate": 5.0e-4,
                 "num_epochs": 4, "num_minibatches": 8, "gamma": 0.99, "gae_lambda": 0.95, "eval_interval": 10,
                 "eval_episodes": 16},
    "checkpoint": {"save_interval": None, "max_to_keep": 3},
    "logging": {"recorders": ["console", "csv"], "console": "auto", "plot": True},
}


def test_the_default_job_is_unchanged():
    from evorl.workflows import PPOWorkflow

    cfg, _ = select_algorithm(hydra_compose([]))
    assert resolved_config(PPOWorkflow.parse_config(cfg)) == resolved_config(PPOWorkflow.parse_config(DEFAULT_JOB))


def test_another_workflow_cls_leaves_out_the_config_algorithms_defaults():
    cfg, note = select_algorithm(hydra_compose(["++workflow_cls=evorl.workflows.A2CWorkflow",
                                                "++agent.vf_coef=0.25"]))
    assert "leaving out the algorithm defaults of the config (agent.actor_hidden_layer_sizes" in note
    assert "agent.clip_epsilon" in note and "algo=a2c gives A2C's own" in note
    assert cfg["agent"] == {"vf_coef": 0.25} and "training" not in cfg  # what was typed stays
    resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg)
