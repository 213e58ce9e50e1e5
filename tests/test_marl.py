"""Multi-agent: the JaxMARL adapter against JaxMARL stepped directly, truncation, IPPO's and
MAPPO's losses and critics against independent references, parameter sharing off, the
bad-input errors, exact resume, a population, and (slow) learning on MPE simple_spread."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jaxmarl = pytest.importorskip("jaxmarl", reason="the multi-agent tests need jaxmarl (pip install -e '.[marl]')")

from evorl import hardware  # noqa: E402
from evorl.algorithms.mappo import make_mlp_ippo_agent, make_mlp_mappo_agent  # noqa: E402
from evorl.algorithms.ppo import make_mlp_ppo_agent  # noqa: E402
from evorl.app.experiment import run_experiment  # noqa: E402
from evorl.config import ConfigError  # noqa: E402
from evorl.envs import create_env  # noqa: E402
from evorl.envs.spaces import Box  # noqa: E402
from evorl.rl.rollout import Trajectory  # noqa: E402
from evorl.workflows import IPPOWorkflow, PPOWorkflow  # noqa: E402
from test_checkpoint_resume import Interrupted, InterruptAt, assert_states_identical  # noqa: E402

SPREAD = {"env_name": "MPE_simple_spread_v3", "env_type": "jaxmarl"}
TINY_IPPO = {
    "workflow_cls": "evorl.workflows.IPPOWorkflow",
    "seed": 3,
    "env": SPREAD,
    "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
    "training": {"num_iterations": 6, "eval_interval": 1, "rollout_length": 8, "num_envs": 4,
                 "num_minibatches": 2, "num_epochs": 1, "eval_episodes": 2},
    "checkpoint": {"save_interval": 2, "max_to_keep": None},
    "logging": {"recorders": [], "plot": False},
}


def spread_env(num_envs=2):
    return create_env(SPREAD, parallel=num_envs)


@pytest.mark.slow
def test_adapter_steps_as_jaxmarl_does():
    env = spread_env(2)
    direct = jaxmarl.make("MPE_simple_spread_v3")
    assert env.num_agents == 3 and env.obs_space.shape == (3, 18) and env.action_space.n == 5
    key = jax.random.PRNGKey(7)
    state = env.reset(key)
    copies = jax.random.split(hardware.fast_key(key), 2)
    direct_states = []
    for i in range(2):  # VectorEnv's key path: one key per copy, split into (next key, reset key)
        obs, s = direct.reset(jax.random.split(copies[i])[1])
        np.testing.assert_array_equal(state.obs[i], np.stack([obs[a] for a in direct.agents]))
        direct_states.append(s)
    actions = jax.random.randint(jax.random.PRNGKey(1), (10, 2, 3), 0, 5)
    for t in range(10):
        keys = state.key
        state = env.step(state, actions[t])
        for i in range(2):
            step_key = jax.random.split(hardware.fast_key(keys[i]), 3)[1]
            obs, direct_states[i], rew, dones, _ = direct.step_env(
                step_key, direct_states[i], {a: actions[t, i, j] for j, a in enumerate(direct.agents)})
            np.testing.assert_allclose(state.obs[i], np.stack([obs[a] for a in direct.agents]), rtol=1e-6)
            np.testing.assert_allclose(state.reward[i], [rew[a] for a in direct.agents], rtol=1e-6)
    assert state.reward.shape == (2, 3) and state.terminated.shape == (2,)


def test_time_limit_is_truncation_with_the_true_final_observation():
    env = spread_env(2)
    assert env.episode_length == 26  # JaxMARL's MPE ends after max_steps + 1 = 26 steps
    state = env.reset(jax.random.PRNGKey(0))
    rewards = []
    for _ in range(26):
        last = state
        state = env.step(state, jnp.ones((2, 3), jnp.int32))
        rewards.append(state.reward)
    assert bool(state.truncated.all()) and not bool(state.terminated.any())
    assert not np.allclose(state.final_obs, state.obs)  # obs: the next episode's; final_obs: this one's
    assert not np.allclose(state.final_obs, last.obs)
    np.testing.assert_allclose(state.episode_return, np.sum(np.mean(rewards, axis=-1), axis=0), rtol=1e-5)
    assert list(np.asarray(state.episode_length)) == [26, 26]


def test_mabrax_limit_is_evorls_truncation_not_brax_done():
    """MABrax's brax env is built bare (no EpisodeWrapper, whose done is 1 at the limit; no
    AutoResetWrapper, which would reset inside the step): its done is termination alone, and the
    episode length, 1000 by default as JaxMARL's, is evorl's time limit (truncation)."""
    pytest.importorskip("brax", reason="MABrax needs brax (pip install -e '.[brax]')")
    from brax.envs.wrappers import training as brax_wrappers

    from evorl.envs.jaxmarl_env import step_limit

    wrapped = jaxmarl.make("ant_4x2")
    assert isinstance(wrapped.env, brax_wrappers.AutoResetWrapper)  # what JaxMARL builds by default
    assert step_limit(wrapped)[:2] == ("episode_length", 1000)
    env = create_env({"env_name": "ant_4x2", "env_type": "jaxmarl"}, parallel=2)
    assert env.episode_length == 1000 and env.num_agents == 4 and env.obs_space.shape == (4, 18)
    assert type(env._env.env).__name__ == "Ant" and not isinstance(env._env.env, brax_wrappers.Wrapper)
    assert create_env({"env_name": "ant_4x2", "env_type": "jaxmarl", "episode_length": 50}).episode_length == 50
    assert step_limit(jaxmarl.make("MPE_simple_spread_v3"))[:2] == ("max_steps", 26)


def one_step_trajectory(key, truncated, num_envs=2, n_agents=3, obs_dim=18):
    k = jax.random.split(key, 5)
    return Trajectory(
        obs=jax.random.normal(k[0], (1, num_envs, n_agents, obs_dim)),
        actions=jax.random.randint(k[1], (1, num_envs, n_agents), 0, 5),
        rewards=jax.random.normal(k[2], (1, num_envs, n_agents)),
        terminated=jnp.full((1, num_envs), not truncated), truncated=jnp.full((1, num_envs), truncated),
        next_obs=jax.random.normal(k[3], (1, num_envs, n_agents, obs_dim)),
        extras={"logp": -jax.random.uniform(k[4], (1, num_envs, n_agents))},
    )


@pytest.mark.slow
@pytest.mark.parametrize("truncated", [True, False])
def test_truncation_bootstraps_from_the_final_observation(truncated):
    env = spread_env()
    agent = make_mlp_mappo_agent(env.action_space, env.obs_space)
    state = agent.init(jax.random.PRNGKey(0))
    traj = one_step_trajectory(jax.random.PRNGKey(1), truncated)
    out = agent.compute_targets(state, traj)
    v, v_next = agent.values(state, traj.obs), agent.values(state, traj.next_obs)  # [1, B, n_agents]
    bootstrap = 0.99 * v_next if truncated else 0.0
    np.testing.assert_allclose(out.extras["advantages"], traj.rewards + bootstrap - v, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # IPPO and PPO programs both compiled and run
def test_ippo_with_shared_parameters_is_ppo_on_the_agent_folded_batch():
    env = spread_env()
    options = dict(actor_hidden_layer_sizes=[16], critic_hidden_layer_sizes=[16])
    ippo = make_mlp_ippo_agent(env.action_space, env.obs_space, **options)
    ppo = make_mlp_ppo_agent(env.action_space, env.agent_obs_space, **options)
    key = jax.random.PRNGKey(0)
    ippo_state, ppo_state = ippo.init(key), ppo.init(key)
    assert jax.tree.structure(ippo_state.params) == jax.tree.structure(ppo_state.params)

    traj = jax.tree.map(lambda x: jnp.repeat(x, 4, axis=0), one_step_trajectory(jax.random.PRNGKey(2), True))
    traj = traj.replace(truncated=traj.truncated.at[:3].set(False), terminated=traj.terminated.at[1].set(True))
    T, B, N = traj.rewards.shape
    fold = lambda x: x.reshape((T, B * N) + x.shape[3:])  # noqa: E731
    done = lambda d: jnp.repeat(d, N, axis=1)  # noqa: E731
    folded = Trajectory(obs=fold(traj.obs), actions=fold(traj.actions), rewards=fold(traj.rewards),
                        terminated=done(traj.terminated), truncated=done(traj.truncated),
                        next_obs=fold(traj.next_obs), extras={"logp": fold(traj.extras["logp"])})
    ours = ippo.compute_targets(ippo_state, traj)
    ref = ppo.compute_targets(ppo_state, folded)
    for name in ("advantages", "returns", "values"):
        np.testing.assert_allclose(fold(ours.extras[name]), ref.extras[name], rtol=1e-5, atol=1e-6)

    flat = lambda t: jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), t)  # noqa: E731  [T, B] -> [T*B]
    loss, metrics = ippo.loss(ippo_state, flat(ours), jax.random.PRNGKey(3))
    ref_loss, ref_metrics = ppo.loss(ppo_state, flat(ref), jax.random.PRNGKey(3))
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for name in ("policy_loss", "value_loss", "entropy"):
        np.testing.assert_allclose(metrics[name], ref_metrics[name], rtol=1e-5)


def test_mappo_critic_reads_the_global_state():
    env = spread_env()
    mappo = make_mlp_mappo_agent(env.action_space, env.obs_space)
    ippo = make_mlp_ippo_agent(env.action_space, env.obs_space)
    obs = jax.random.normal(jax.random.PRNGKey(0), (5, 3, 18))
    inputs = mappo.critic_inputs(obs)  # [5, 3, 54]
    for i in range(3):
        np.testing.assert_array_equal(inputs[:, i], obs.reshape(5, 54))
    np.testing.assert_array_equal(mappo.actor_inputs(obs), obs)
    moved = obs.at[:, 2].add(1.0)  # agent 2's observation changes: agent 0's value changes with MAPPO only
    for agent, changes in ((mappo, True), (ippo, False)):
        state = agent.init(jax.random.PRNGKey(1))
        before, after = agent.values(state, obs)[:, 0], agent.values(state, moved)[:, 0]
        assert (not np.allclose(before, after)) == changes


def test_agent_ids_are_appended_one_hot():
    env = spread_env()
    agent = make_mlp_ippo_agent(env.action_space, env.obs_space, agent_ids=True)
    x = agent.actor_inputs(jnp.zeros((2, 3, 18)))
    assert x.shape == (2, 3, 21)
    np.testing.assert_array_equal(x[1, :, 18:], np.eye(3))


@pytest.mark.slow
def test_parameters_per_agent_are_separate_and_learn_separately():
    env = spread_env()
    agent = make_mlp_ippo_agent(env.action_space, env.obs_space, share_parameters=False, normalize_gae=False,
                                actor_hidden_layer_sizes=[8], critic_hidden_layer_sizes=[8])
    state = agent.init(jax.random.PRNGKey(0))
    assert all(x.shape[0] == 3 for x in jax.tree.leaves(state.params))
    traj = agent.compute_targets(state, one_step_trajectory(jax.random.PRNGKey(4), True, num_envs=4))
    batch = jax.tree.map(lambda x: x[0], traj)  # [B, ...]
    grad = lambda b: jax.grad(lambda p: agent.loss(state.replace(params=p), b, None)[0])(state.params)  # noqa: E731
    g = grad(batch)
    # agent 1's data changed: agent 0's gradient is the same, agent 1's is not
    other = batch.replace(extras={**batch.extras, "advantages": batch.extras["advantages"].at[:, 1].add(3.0)})
    g_other = grad(other)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_other)):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-6, atol=1e-7)
    assert any(not np.allclose(a[1], b[1]) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_other)))


@pytest.mark.slow
def test_training_without_sharing_updates_each_agent(tmp_path):
    cfg = copy.deepcopy(TINY_IPPO)
    cfg["agent"]["share_parameters"] = False
    cfg["training"]["num_iterations"] = 2
    wf = IPPOWorkflow.build_from_config(cfg)
    start = wf.init(jax.random.PRNGKey(0))
    initial = jax.tree.map(np.asarray, start.agent_state.params)  # the run donates its input state
    end, _ = wf.run_iterations(start, 2)
    for before, after in zip(jax.tree.leaves(initial), jax.tree.leaves(end.agent_state.params)):
        assert before.shape[0] == 3
        for i in range(3):
            assert not np.allclose(before[i], after[i])
        assert not np.allclose(after[0], after[1])


@pytest.mark.slow
def test_population_of_seeds_trains():
    cfg = copy.deepcopy(TINY_IPPO)
    cfg["training"].update(num_seeds=2, num_iterations=2)
    result = run_experiment(cfg)
    leaves = jax.tree.leaves(result.state.agent_state.params)
    assert all(x.shape[0] == 2 for x in leaves) and not np.allclose(leaves[0][0], leaves[0][1])


def test_single_agent_env_for_ippo_is_refused():
    cfg = copy.deepcopy(TINY_IPPO)
    cfg["env"] = {"env_name": "CartPole-v1", "env_type": "gymnax"}
    with pytest.raises(ConfigError, match="IPPO trains the agents of a multi-agent env.*has one agent: use PPOWorkflow"):
        IPPOWorkflow.build_from_config(cfg)


def test_multi_agent_env_for_ppo_is_refused():
    cfg = copy.deepcopy(TINY_IPPO)
    cfg["workflow_cls"] = "evorl.workflows.PPOWorkflow"
    with pytest.raises(ConfigError, match="has 3 agents; PPO trains one: use a multi-agent algorithm"):
        PPOWorkflow.build_from_config(cfg)


def test_heterogeneous_agents_are_refused():
    with pytest.raises(ConfigError, match="observation spaces differ.*homogeneous agents only"):
        create_env({"env_name": "MPE_simple_adversary_v3", "env_type": "jaxmarl"})


def test_unknown_env_name_is_refused():
    with pytest.raises(ConfigError, match="Unknown jaxmarl env_name 'MPE_simple_sprad_v3'.*MPE_simple_spread_v3"):
        create_env({"env_name": "MPE_simple_sprad_v3", "env_type": "jaxmarl"})


@pytest.mark.slow
def test_ippo_interrupted_and_resumed_is_bit_identical(tmp_path):
    uninterrupted = run_experiment(TINY_IPPO, output_dir=tmp_path / "whole")
    with pytest.raises(Interrupted):
        run_experiment(TINY_IPPO, output_dir=tmp_path / "cut", recorders=[InterruptAt(3)])
    resumed = run_experiment({**TINY_IPPO, "resume": str(tmp_path / "cut")})
    assert int(resumed.state.iteration) == 6
    assert_states_identical(resumed.state, uninterrupted.state)
    assert resumed.final_metrics == uninterrupted.final_metrics


@pytest.mark.slow
def test_ippo_learns_simple_spread():
    """614k env steps (30% of the shipped config): from about -26 (the untrained policy)
    to above -24."""
    cfg = {"workflow_cls": "evorl.workflows.IPPOWorkflow", "seed": 11, "env": SPREAD,
           "training": {"num_iterations": 300, "rollout_length": 128, "num_envs": 16,
                        "eval_interval": 300, "eval_episodes": 64},
           "logging": {"recorders": [], "plot": False}}
    result = run_experiment(cfg)
    assert result.final_metrics["eval/episode_return"] > -24, result.final_metrics
