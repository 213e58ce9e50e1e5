"""The workflow API: init / step / evaluate / learn, one compile for every chunk length."""

import dataclasses

import jax
import numpy as np
import pytest

from evorl.engine.services import RunServices
from evorl.workflows import PPOWorkflow

CFG = {
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [16], "critic_hidden_layer_sizes": [16], "normalize_obs": True},
    "training": {"num_iterations": 6, "num_envs": 4, "rollout_length": 16, "num_minibatches": 2, "eval_interval": 4,
                 "eval_episodes": 3},
}


def avals(tree):
    return jax.tree.map(lambda x: (x.shape, x.dtype, getattr(x, "weak_type", False)), tree)


@pytest.fixture(scope="module")
def workflow():
    return PPOWorkflow.build_from_config(CFG, recorders=[])


def test_step_returns_metrics_and_keeps_state_types(workflow):
    state = workflow.init(jax.random.PRNGKey(0))
    before = avals(state)
    state, metrics = workflow.step(state)
    # the state's structure, shapes, dtypes and weak types never change: no recompilation
    assert avals(state) == before
    assert int(state.iteration) == 1
    for key in ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
                "explained_variance", "episode_return", "gradient_steps"):
        assert f"train/{key}" in metrics, key
    assert metrics["train/gradient_steps"] == 4 * 2
    assert float(state.agent_state.obs_stats.count) == 4 * 16


def test_one_compiled_program_serves_every_chunk_length(workflow):
    state = workflow.init(jax.random.PRNGKey(1))
    workflow.compile(state)
    compiled = workflow.executor._chunk
    state, _ = workflow.run_iterations(state, 3)
    state, _ = workflow.run_iterations(state, 1)
    assert workflow.executor._chunk is compiled and int(state.iteration) == 4


def test_chunking_does_not_change_the_result(workflow):
    a, _ = workflow.run_iterations(workflow.init(jax.random.PRNGKey(2)), 4)
    b = workflow.init(jax.random.PRNGKey(2))
    for _ in range(4):
        b, _ = workflow.step(b)
    jax.tree.map(np.testing.assert_array_equal, a.agent_state.params, b.agent_state.params)


def test_how_often_it_evaluates_does_not_change_what_it_learns():
    # evaluation keys are folded from the state's key, never split from it
    finals = []
    for interval in (1, 6):
        cfg = {**CFG, "training": {**CFG["training"], "eval_interval": interval}}
        wf = PPOWorkflow.build_from_config(cfg, recorders=[])
        finals.append(wf.learn(wf.init(jax.random.PRNGKey(4))))
    jax.tree.map(np.testing.assert_array_equal, finals[0].agent_state.params, finals[1].agent_state.params)
    np.testing.assert_array_equal(jax.random.key_data(finals[0].key), jax.random.key_data(finals[1].key))


def test_learn_runs_to_num_iterations_and_logs(workflow):
    lines = []

    class ListRecorder:
        def write(self, metrics, step):
            lines.append((step, metrics))

    recorded = workflow.with_services(RunServices(recorders=(ListRecorder(),)))
    state = recorded.learn(recorded.init(jax.random.PRNGKey(3)))
    assert int(state.iteration) == 6
    assert [step for step, _ in lines] == [4 * 64, 6 * 64]
    assert {"eval/episode_return", "train/episode_return", "steps_per_s"} <= set(lines[-1][1])
    evaluation = workflow.evaluate(state)
    assert 1 <= evaluation["eval/episode_length"] <= 500


@pytest.mark.slow  # ~17 s on 2 cores at load 8-10 (2026-12-03)
def test_target_kl_stops_the_remaining_updates():
    cfg = {**CFG, "agent": {**CFG["agent"], "normalize_obs": False, "target_kl": 1e-7}}
    workflow = PPOWorkflow.build_from_config(cfg, recorders=[])
    state, metrics = workflow.step(workflow.init(jax.random.PRNGKey(0)))
    # The first update sees ratio 1 (approx_kl = 0) and is applied; the second one's
    # approx_kl exceeds 1.5 x 1e-7, so it is not applied and the rest are skipped.
    assert metrics["train/gradient_steps"] == 1


@pytest.mark.slow  # ~23 s on 2 cores at load 8-10 (2026-12-03)
def test_train_episode_length_cuts_training_episodes_only():
    """Pendulum never terminates: training episodes end (truncated) at train_episode_length,
    evaluation episodes at env.episode_length; a longer training limit is refused."""
    from evorl.config import ConfigError

    cfg = {
        "env": {"env_name": "Pendulum-v1", "env_type": "gymnax", "episode_length": 30},
        "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
        "training": {"num_iterations": 4, "num_envs": 2, "rollout_length": 16, "num_minibatches": 2,
                     "eval_interval": 4, "eval_episodes": 2, "train_episode_length": 12},
    }
    wf = PPOWorkflow.build_from_config(cfg, recorders=[])
    assert (wf.env.episode_length, wf.evaluator.env.episode_length) == (12, 30)
    state = wf.init(jax.random.PRNGKey(0))
    state, metrics = wf.run_iterations(state, 4)
    assert metrics["train/episode_length"] == 12  # 64 steps per env: 5 whole training episodes
    # the cut is a truncation: bootstrapped, never a termination
    env_state = wf.env.reset(jax.random.PRNGKey(1))
    for _ in range(12):
        env_state = wf.env.step(env_state, np.zeros((2, 1), np.float32))
    assert bool(env_state.truncated.all()) and not bool(env_state.terminated.any())
    assert float(wf.evaluate(state)["eval/episode_length"]) == 30

    cfg["training"]["train_episode_length"] = 31
    with pytest.raises(ConfigError, match="train_episode_length=31 must be <= the evaluation episodes' length 30"):
        PPOWorkflow.build_from_config(cfg, recorders=[])


def test_declared_capabilities_and_hyperparameters():
    """What a population may vary and whether an agent stops early are declared, not probed."""
    from evorl.algorithms.impala import IMPALAWorkflow
    from evorl.algorithms.ppo import PPOWorkflow, make_mlp_ppo_agent
    from evorl.envs.spaces import Box, Discrete

    obs = Box(-np.ones(4, np.float32), np.ones(4, np.float32))
    assert not make_mlp_ppo_agent(Discrete(2), obs).stops_early
    assert make_mlp_ppo_agent(Discrete(2), obs, target_kl=0.01).stops_early
    agent_keys, training_keys = PPOWorkflow.sweepable_keys()
    assert set(agent_keys) == {"clip_epsilon", "value_clip_epsilon", "vf_coef", "ent_coef", "kl_coef", "target_kl"}
    assert training_keys == ("learning_rate", "gamma", "gae_lambda")
    # IMPALA: training.gae_lambda is V-trace's lambda; pg_rho_bar None follows vtrace_rho_bar per variant
    config = IMPALAWorkflow.parse_config({"agent": {"vtrace_rho_bar": [1.0, 2.0]}})
    hparams = [IMPALAWorkflow.hparams_of(dataclasses.replace(config.agent, vtrace_rho_bar=v), config.training)
               for v in (1.0, 2.0)]
    assert [h.pg_rho_bar for h in hparams] == [1.0, 2.0]
    assert hparams[0].gae_lambda == config.training.gae_lambda


def test_renamed_key_names_the_new_one():
    from evorl.algorithms.a2c import A2CWorkflow
    from evorl.config import ConfigError

    with pytest.raises(ConfigError, match="'agent.normalize_advantages' was renamed 'agent.normalize_gae'"):
        A2CWorkflow.parse_config({"agent": {"normalize_advantages": True}})


def test_network_factory_builds_the_agents_networks():
    from evorl.rl.actor_critic import make_actor_critic_networks
    from evorl.algorithms.a2c import make_mlp_a2c_agent
    from evorl.envs.spaces import Box, Discrete

    seen = []

    def factory(action_space, obs_space, options):
        seen.append(options)
        return make_actor_critic_networks(action_space, obs_space, options)

    obs = Box(-np.ones(3, np.float32), np.ones(3, np.float32))
    agent = make_mlp_a2c_agent(Discrete(2), obs, network_factory=factory, actor_hidden_layer_sizes=[5])
    assert seen[0].actor_hidden_layer_sizes == (5,) and seen[0].critic_hidden_layer_sizes == (64, 64)
    params = agent.init(jax.random.PRNGKey(0)).params
    assert params["policy"]["params"]["Dense_0"]["kernel"].shape == (3, 5)
    with pytest.raises(ValueError, match="actor_hidden_layer_size"):
        make_mlp_a2c_agent(Discrete(2), obs, actor_hidden_layer_size=[5])


@pytest.mark.slow  # evaluation episodes compiled and run twice
def test_sampled_evaluation_acts_like_the_policy_not_its_argmax():
    """``training.eval_deterministic: false``: a fresh CartPole agent's policy is nearly uniform
    (policy head init 0.01), so sampled episodes last as long as random ones (22.4 steps on
    average for CartPole-v1), unlike its argmax's. Same key, same episodes; another key, others."""
    import numpy as np

    from evorl.algorithms.ppo import make_mlp_ppo_agent
    from evorl.envs import create_env
    from evorl.engine.evaluator import Evaluator

    env = create_env({"env_name": "CartPole-v1", "env_type": "gymnax"})
    agent = make_mlp_ppo_agent(env.action_space, env.obs_space)
    state = agent.init(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    greedy = Evaluator(env, agent, 256).evaluate(state, key)[1]
    sampled = Evaluator(env, agent, 256, deterministic=False)
    lengths = sampled.evaluate(state, key)[1]
    assert 19 < float(np.mean(lengths)) < 26 and abs(float(np.mean(greedy)) - 22.4) > 5, (np.mean(greedy), np.mean(lengths))
    np.testing.assert_array_equal(lengths, sampled.evaluate(state, key)[1])
    assert not np.array_equal(lengths, sampled.evaluate(state, jax.random.PRNGKey(2))[1])


def test_compile_also_compiles_the_evaluation():
    """workflow.compile compiles the evaluation beside the chunk (a second thread), so the
    first evaluate neither traces nor compiles."""
    events = []
    record = lambda name, *args, **kwargs: events.append(name)  # noqa: E731
    jax.monitoring.register_event_listener(record)
    jax.monitoring.register_event_duration_secs_listener(record)
    try:
        workflow = PPOWorkflow.build_from_config({**CFG, "seed": 7}, recorders=[])
        state = workflow.init(jax.random.PRNGKey(7))
        workflow.compile(state)
        events.clear()
        first = workflow.evaluate(state)
        assert [e for e in events if "compile" in e or "trace" in e] == []
        assert first == workflow.evaluate(state)  # the same evaluation either way
    finally:
        jax.monitoring.unregister_event_listener(record)
        jax.monitoring.unregister_event_duration_listener(record)
