"""The cheap brax learning test: PPO balances inverted_pendulum (~40 s on 2 CPU cores)."""

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
    # the config's own length (128 envs x 32 steps x 200 iterations = 819k env steps): seeds 0-4
    # end at 957-1000 on an AVX2 CPU; with 64 envs the result hung on the CPU's float rounding
    # (seed 0: 952.3 on an AVX-512 CPU, 790.8 on an AVX2 one)
    cfg["training"].update(eval_interval=cfg["training"]["num_iterations"])
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state = workflow.learn(workflow.init(jax.random.PRNGKey(0)))
    final = workflow.evaluate(state)
    assert final["eval/episode_return"] >= 800, final
    # Logged training returns are the unscaled env returns (reward_scale 0.1 in the config).
    assert workflow.last_metrics["train/episode_return"] > 100
