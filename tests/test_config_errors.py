"""Bad input fails before compilation with one clear message naming the bad key or value."""

import pytest

from evorl.config import ConfigError
from evorl.workflows import PPOWorkflow

BASE = {"workflow_cls": "evorl.workflows.PPOWorkflow", "env": {"env_name": "CartPole-v1", "env_type": "gymnax"}}


def build(**sections):
    cfg = {**BASE, **{k: v for k, v in sections.items() if k in ("env", "agent", "training", "seed", "workflow_cls")}}
    cfg.update({k: v for k, v in sections.items() if k not in cfg})
    return PPOWorkflow.build_from_config(cfg)


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"training": {"num_envz": 4}}, r"Unknown config key 'training.num_envz'. Did you mean 'training.num_envs'\?"),
        ({"agent": {"clip_epsilom": 0.1}}, r"Unknown config key 'agent.clip_epsilon'|Did you mean 'agent.clip_epsilon'"),
        ({"trainnig": {}}, r"Unknown config key 'trainnig'. Did you mean 'training'\?"),
        ({"training": {"num_envs": "eight"}}, r"'training.num_envs' = 'eight' has type str; expected int"),
        ({"training": {"num_envs": 8.5}}, r"'training.num_envs' = 8.5 has type float; expected int"),
        # 1e5 on the command line is the float 100000.0: refused, with the integer to write
        ({"training": {"num_iterations": 1e5}},
         r"^'training.num_iterations' = 100000.0 is a float; it takes an integer: write training.num_iterations=100000\.$"),
        ({"training": {"eval_episodes": 1e2}}, r"write training.eval_episodes=100\.$"),  # an int | None key
        ({"training": {"learning_rate": -1e-3}}, r"training.learning_rate must be > 0, got -0.001"),
        ({"training": {"gamma": 1.5}}, r"training.gamma must be in \[0, 1\], got 1.5"),
        ({"training": {"num_minibatches": 3}}, r"training.num_minibatches=3 must divide the batch .* = 512"),
        ({"training": {"num_envs": 0}}, r"training.num_envs must be >= 1, got 0"),
        ({"agent": {"normalize_obs": "yes"}}, r"'agent.normalize_obs' = 'yes' has type str; expected bool"),
        ({"agent": {"actor_hidden_layer_sizes": [64, "x"]}}, r"actor_hidden_layer_sizes"),
        ({"agent": {"clip_epsilon": 0.0}}, r"^agent.clip_epsilon must be > 0, got 0.0"),  # named as the config does
        ({"agent": {"clip_epsilon": [0.2, 0.0]}}, r"^agent.clip_epsilon must be > 0, got 0.0"),  # a variant's too
        ({"agent": {"activation": "sigmoidal"}}, r"Unknown activation 'sigmoidal'; valid: tanh, relu"),
        ({"env": {"env_name": "CartPol-v1", "env_type": "gymnax"}}, r"Unknown gymnax env_name 'CartPol-v1'. Did you mean 'CartPole-v1'"),
        ({"env": {"env_name": "CartPole-v1", "env_type": "gym"}}, r"Unknown env.env_type 'gym'; valid: gymnax"),
        ({"env": {"env_name": "CartPole-v1", "env_type": "gymnax", "episode_len": 5}}, r"Did you mean 'env.episode_length'"),
        ({"workflow_cls": "evorl.workflows.PPOWorkflo"}, r"workflow_cls 'evorl.workflows.PPOWorkflo' cannot be imported.*PPOWorkflow"),
        ({"seed": "abc"}, r"'seed' = 'abc' must be an integer"),
    ],
)
def test_bad_config_is_a_clear_error(cfg, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        build(**cfg)


def test_config_errors_name_the_closest_key():
    with pytest.raises(ConfigError) as info:
        build(agent={"clip_epsilom": 0.1})
    assert "Did you mean 'agent.clip_epsilon'" in str(info.value)


def test_omegaconf_config_is_accepted():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({**BASE, "agent": {"actor_hidden_layer_sizes": [8]}, "training": {"learning_rate": 3e-4}})
    workflow = PPOWorkflow.build_from_config(cfg)
    assert workflow.config.agent.actor_hidden_layer_sizes == (8,)
    assert workflow.config.training.learning_rate == pytest.approx(3e-4)


def test_did_you_mean_is_one_mechanism_closest_first_case_folded():
    from evorl.config.errors import close_matches, did_you_mean

    assert close_matches("ppo_cartpol", ["a2c_cartpole", "pbt_ppo_cartpole", "ppo_cartpole"])[0] == "ppo_cartpole"
    assert close_matches("CartPole-v1", ["acrobot", "cartpole", "pendulum"]) == ["cartpole"]  # by its lowercase
    assert did_you_mean("CartPole-v1", ["acrobot", "cartpole"], prefix="env=") == " Did you mean 'env=cartpole'?"
    assert did_you_mean("zzz", ["acrobot", "cartpole"]) == ""


def test_an_unknown_group_option_from_python_names_the_env_key():
    from evorl.app.config_groups import default_config

    with pytest.raises(ConfigError, match=r"env=CartPole-v1: no such env group .*set env.env_name=CartPole-v1"):
        default_config("ppo", env="CartPole-v1")
