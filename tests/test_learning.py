"""PPO learns: CartPole (discrete) and Pendulum (continuous) to their thresholds."""

import jax
import pytest

from evorl.workflows import PPOWorkflow


def steps_to_reach(workflow, seed, threshold, max_env_steps, eval_every):
    """Env steps at the first evaluation with mean greedy return >= threshold (None if never)."""
    state = workflow.init(jax.random.PRNGKey(seed))
    per_iteration = workflow.config.training.env_steps_per_iteration
    done = 0
    while (done + eval_every) * per_iteration <= max_env_steps:
        state, _ = workflow.run_iterations(state, eval_every)
        done += eval_every
        if workflow.evaluate(state)["eval/episode_return"] >= threshold:
            return done * per_iteration
    return None


@pytest.mark.slow  # a learning run
def test_ppo_learns_cartpole_in_80k_steps():
    """The default set's cheap PPO learning check: the default job's settings (8 envs x 128
    steps) cut to 80 iterations (82k env steps), greedy return after training on seeds 0-3
    (measured 2026-12-03: 176.4, 500, 500, 472.2; a random policy returns ~20)."""
    from evorl.app.config_groups import select_algorithm, with_default_config

    cfg, _ = select_algorithm(with_default_config({"training": {"num_iterations": 80, "eval_interval": 80}}))
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    returns = []
    for seed in range(4):
        state, _ = workflow.run_iterations(workflow.init(jax.random.PRNGKey(seed)), 80)
        returns.append(workflow.evaluate(state)["eval/episode_return"])
    assert min(returns) >= 150 and sorted(returns)[1] >= 400, returns


@pytest.mark.slow
def test_ppo_cartpole_reaches_475_within_500k_steps_for_4_of_5_seeds():
    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
        "training": {"num_iterations": 976, "num_envs": 4, "rollout_length": 128,
                     "num_epochs": 4, "num_minibatches": 4, "learning_rate": 2.5e-4},
    }, recorders=[])
    reached = [steps_to_reach(workflow, seed, 475.0, 500_000, eval_every=20) for seed in range(5)]
    print("env steps to reach 475:", reached)
    assert sum(r is not None for r in reached) >= 4, reached


@pytest.mark.slow
def test_ppo_pendulum_beats_minus_400_within_1m_steps():
    workflow = PPOWorkflow.build_from_config({
        "env": {"env_name": "Pendulum-v1", "env_type": "gymnax"},
        "agent": {"normalize_obs": True, "ent_coef": 0.0},
        "training": {"num_iterations": 61, "num_envs": 64, "rollout_length": 256, "learning_rate": 1e-3,
                     "num_epochs": 10, "num_minibatches": 16, "gamma": 0.95, "gae_lambda": 0.95},
    }, recorders=[])
    reached = steps_to_reach(workflow, 0, -400.0, 1_000_000, eval_every=4)
    print("env steps to beat -400:", reached)
    assert reached is not None
