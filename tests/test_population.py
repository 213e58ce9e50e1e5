"""Many agents in one program: each equals the same agent trained alone."""

import jax
import numpy as np
import pytest

from evorl.config import ConfigError
from evorl.workflows import PPOWorkflow

BASE = {
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [16], "critic_hidden_layer_sizes": [16], "normalize_obs": True},
    "training": {"num_iterations": 3, "num_envs": 4, "rollout_length": 16, "num_minibatches": 2, "eval_episodes": 2},
}


def config(agent=None, **training):
    return {**BASE, "agent": {**BASE["agent"], **(agent or {})}, "training": {**BASE["training"], **training}}


def params_close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=2e-5, atol=2e-6), a, b)


@pytest.mark.slow  # ~88 s on 2 cores at load 8-10 (2026-12-03)
def test_population_equals_separate_runs():
    population = PPOWorkflow.build_from_config(
        config({"clip_epsilon": [0.1, 0.3]}, num_seeds=2, learning_rate=[1e-3, 3e-3]), recorders=[])
    assert population.num_agents == 8
    state, metrics = population.run_iterations(population.init(jax.random.PRNGKey(7)), 3)
    assert state.env_state.obs.shape == (8, 4, 4) and state.iteration.shape == (8,)
    assert "train/episode_return/std" in metrics and "train/episode_return[clip_epsilon=0.3,learning_rate=0.003]" in metrics

    seed_keys = jax.random.split(jax.random.PRNGKey(7), 2)
    # agent index = variant * num_seeds + seed; variants in the order clip x learning_rate
    for index, (clip, lr, seed) in enumerate([(c, lr, s) for c in (0.1, 0.3) for lr in (1e-3, 3e-3) for s in (0, 1)]):
        if index not in (0, 3, 5, 6):
            continue  # a sample of the 8 keeps the test quick
        alone = PPOWorkflow.build_from_config(config({"clip_epsilon": clip}, learning_rate=lr), recorders=[])
        single, _ = alone.run_iterations(alone.init(seed_keys[seed]), 3)
        params_close(jax.tree.map(lambda x: x[index], state.agent_state.params), single.agent_state.params)


def test_only_data_hyperparameters_take_a_list():
    with pytest.raises(ConfigError, match="agent.init_log_std' cannot take a list"):
        PPOWorkflow.build_from_config(config({"init_log_std": [0.0, -0.5]}))
    with pytest.raises(ConfigError, match="training.max_grad_norm.*Keys of training that can take a list: learning_rate"):
        PPOWorkflow.build_from_config(config(max_grad_norm=[0.5, 1.0]))
    with pytest.raises(ConfigError, match="actor_hidden_layer_sizes"):
        PPOWorkflow.build_from_config(config({"actor_hidden_layer_sizes": [[16], [32]]}))


def test_population_evaluates_every_agent():
    population = PPOWorkflow.build_from_config(config(num_seeds=3), recorders=[])
    state = population.init(jax.random.PRNGKey(0))
    metrics = population.evaluate(state)
    assert population.last_metrics_per_agent["eval/episode_return"].shape == (3,)
    assert metrics["eval/episode_return/min"] <= metrics["eval/episode_return"] <= metrics["eval/episode_return/max"]


def test_population_init_factorises_one_agent_at_a_time(tiny_cfg):
    """A population's initialisation runs the orthogonal initialisers' QR factorisations one
    agent at a time, never batched: jaxlib 0.10's batched CPU QR can deadlock XLA's thread
    pool (``evorl.engine.execution.map_agents_sequentially``)."""
    from evorl.engine.population import population_inputs

    tiny_cfg["training"]["num_seeds"] = 4
    workflow = PPOWorkflow.build_from_config(tiny_cfg, recorders=[])
    workflow.init(jax.random.PRNGKey(0))
    inputs = population_inputs(jax.random.PRNGKey(0), workflow._variant_data, 4)
    hlo = workflow.executor._init_jit.lower(*inputs).as_text()
    qr_calls = [line for line in hlo.splitlines() if "geqrf" in line and "custom_call" in line]
    assert qr_calls, "the orthogonal initialisers factorise with LAPACK's geqrf"
    assert all('num_batch_dims = "0"' in line for line in qr_calls)


@pytest.mark.slow  # a population run to its end
def test_run_json_records_each_agents_final_return(tmp_path):
    """run.json's ``final_eval_per_agent`` names every agent and its final greedy return; the
    aggregated ``final_eval`` (mean, min, max across agents) is computed from the same values."""
    import json

    from evorl.app.experiment import run_experiment

    cfg = {**config(num_seeds=3, num_iterations=2, eval_interval=2), "logging": {"plot": False, "recorders": []}}
    result = run_experiment(cfg, output_dir=tmp_path / "run")
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    per_agent = info["final_eval_per_agent"]
    returns = np.array(per_agent["eval/episode_return"])
    assert per_agent["agents"] == ["agent 0 (seed 0)", "agent 1 (seed 1)", "agent 2 (seed 2)"]
    assert returns.shape == (3,) and result.final_per_agent == per_agent
    final = info["final_eval"]
    np.testing.assert_allclose(returns.mean(), final["eval/episode_return"], rtol=1e-6)
    assert (returns.min(), returns.max()) == (final["eval/episode_return/min"], final["eval/episode_return/max"])
