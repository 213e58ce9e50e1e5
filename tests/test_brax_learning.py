"""The cheap brax learning test: PPO balances inverted_pendulum (~40 s on 2 CPU cores,
most of it compilation)."""

from pathlib import Path

import jax
import pytest

pytest.importorskip("brax")

from omegaconf import OmegaConf  # noqa: E402

from evorl.algorithms.ppo import PPOWorkflow  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.slow
def test_ppo_balances_inverted_pendulum():
    cfg = OmegaConf.to_container(OmegaConf.load(CONFIGS / "ppo_brax_inverted_pendulum.yaml"))
    cfg.pop("defaults")
    cfg["training"].update(num_iterations=200, eval_interval=200, num_envs=32)  # 205k env steps
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.learn(workflow.init(jax.random.PRNGKey(0)))
    final = workflow.evaluate(state)
    assert final["eval/episode_return"] >= 800, final
    # Logged training returns are the unscaled env returns (reward_scale 0.1 in the config).
    assert workflow.last_metrics["train/episode_return"] > 100
