"""The cheap brax learning test: PPO balances inverted_pendulum (~30-40 s on 2 CPU cores)."""

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
    # the config's own length (128 envs x 32 steps x 400 iterations = 1.64M env steps; at 200
    # iterations the result hung on the CPU's float rounding: held-out seeds 3/5 at 900 on an
    # AMD EPYC CPU, 5/5 on another; see the config's header)
    cfg["training"].update(eval_interval=cfg["training"]["num_iterations"])
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.learn(workflow.init(jax.random.PRNGKey(0)))
    final = workflow.evaluate(state)
    assert final["eval/episode_return"] >= 800, final
    # Logged training returns are the unscaled env returns (reward_scale 0.1 in the config).
    assert workflow.last_metrics["train/episode_return"] > 100
