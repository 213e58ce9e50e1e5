"""Refactors keep the numbers: a few configs train to the parameters recorded before the
training step and the execution layer were separated (issue 11), on the CPU.

``data/params_before_issue11.npz`` holds the final parameters (``jax.tree.leaves`` order)
after 3 + 2 iterations from ``PRNGKey(1)``, recorded with the code before that change; the
same configs gave bit-identical parameters after it. The tolerance only absorbs float
differences between CPUs and XLA versions.
"""

from pathlib import Path

import jax
import numpy as np
import pytest

from evorl.workflows import resolve_workflow_cls

RECORDED = np.load(Path(__file__).with_name("data") / "params_before_issue11.npz")
CART = {"env_name": "CartPole-v1", "env_type": "gymnax"}
NETS = {"actor_hidden_layer_sizes": [32, 32], "critic_hidden_layer_sizes": [32, 32]}
TRAINING = {"num_envs": 8, "rollout_length": 32, "num_epochs": 2, "num_minibatches": 2, "eval_episodes": 4,
            "num_iterations": 20}
CONFIGS = {
    # KL early stopping that triggers, value clipping
    "ppo_kl": ("PPOWorkflow", {"env": CART, "agent": {**NETS, "target_kl": 0.002, "value_clip_epsilon": 0.2},
                               "training": TRAINING}),
    # continuous actions, observation normalisation, training episodes cut (truncation)
    "ppo_pendulum": ("PPOWorkflow", {"env": {"env_name": "Pendulum-v1", "env_type": "gymnax"},
                                     "agent": {**NETS, "normalize_obs": True, "policy_distribution": "tanh_gaussian"},
                                     "training": {**TRAINING, "train_episode_length": 50}}),
    "a2c": ("A2CWorkflow", {"env": CART, "agent": NETS,
                            "training": {**TRAINING, "num_epochs": 1, "num_minibatches": 1}}),
    "impala_lag": ("IMPALAWorkflow", {"env": CART, "agent": {**NETS, "normalize_obs": True},
                                      "training": {**TRAINING, "actor_lag": 1}}),
    # a population of 4: learning rate x gamma (V-trace's discount) lists
    "pop_lr_gamma": ("IMPALAWorkflow", {"env": CART, "agent": NETS,
                                        "training": {**TRAINING, "learning_rate": [1e-3, 3e-4], "gamma": [0.99, 0.95]}}),
}


#: a run each (the longest ones); the others stay in the default set
SLOW_CONFIGS = {"pop_lr_gamma", "ppo_pendulum", "impala_lag", "ppo_kl", "a2c"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_CONFIGS else n for n in CONFIGS])
def test_parameters_equal_the_recorded_ones(name):
    workflow_cls, cfg = CONFIGS[name]
    workflow = resolve_workflow_cls(f"evorl.workflows.{workflow_cls}").build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(1))
    state, _ = workflow.run_iterations(state, 3)
    state, _ = workflow.run_iterations(state, 2)
    leaves = jax.tree.leaves(state.agent_state.params)
    recorded = [RECORDED[f"{name}/{i}"] for i in range(len(leaves))]
    assert len([k for k in RECORDED.files if k.startswith(f"{name}/")]) == len(leaves)
    for leaf, expected in zip(leaves, recorded):
        np.testing.assert_allclose(np.asarray(leaf), expected, rtol=1e-5, atol=1e-6)
