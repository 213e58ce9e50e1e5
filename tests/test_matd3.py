"""MATD3 and MADDPG: the critic loss and the policy gradient's joint actions against NumPy and
per-agent references, the centralised critics reading the global state and every action, the
decentralised actors, parameters per agent, the replay of multi-agent n-step transitions with
truncation, the bad-input errors, exact resume, and (slow) learning on continuous simple_spread."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jaxmarl = pytest.importorskip("jaxmarl", reason="the multi-agent tests need jaxmarl (pip install -e '.[marl]')")

from evorl.algorithms.matd3 import MATD3Workflow, make_mlp_maddpg_agent, make_mlp_matd3_agent  # noqa: E402
from evorl.app.experiment import run_experiment  # noqa: E402
from evorl.config import ConfigError  # noqa: E402
from evorl.config.training import OffPolicyTrainingConfig  # noqa: E402
from evorl.envs import create_env  # noqa: E402
from evorl.envs.spaces import Box  # noqa: E402
from evorl.rl import replay  # noqa: E402
from evorl.rl.off_policy import init_state, make_learner_update  # noqa: E402
from evorl.rl.learner import make_optimizer  # noqa: E402
from evorl.rl.rollout import Trajectory  # noqa: E402
from evorl.rl.targets import n_step_transitions  # noqa: E402
from test_checkpoint_resume import Interrupted, InterruptAt, assert_states_identical  # noqa: E402

SPREAD = {"env_name": "MPE_simple_spread_v3", "env_type": "jaxmarl", "kwargs": {"action_type": "Continuous"}}
N_AGENTS, OBS_DIM, ACT_DIM = 3, 18, 5
STACKED_OBS = Box(np.full((N_AGENTS, OBS_DIM), -np.inf, np.float32), np.full((N_AGENTS, OBS_DIM), np.inf, np.float32))
ACTIONS = Box(np.zeros(ACT_DIM, np.float32), np.ones(ACT_DIM, np.float32))
SMALL = dict(actor_hidden_layer_sizes=(8,), critic_hidden_layer_sizes=(8,))
TINY_MATD3 = {
    "workflow_cls": "evorl.workflows.MATD3Workflow",
    "seed": 3,
    "env": SPREAD,
    "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8], "agent_ids": True},
    "training": {"num_iterations": 6, "eval_interval": 1, "rollout_length": 4, "num_envs": 4, "batch_size": 8,
                 "num_updates": 2, "buffer_size": 128, "learning_starts": 16, "warmup_steps": 16,
                 "target_update_period": 2, "tau": 0.1, "eval_episodes": 2},
    "checkpoint": {"save_interval": 2, "max_to_keep": None},
    "logging": {"recorders": [], "plot": False},
}


def random_batch(n=6, seed=1):
    rng = np.random.default_rng(seed)
    f = lambda *shape, **kw: jnp.asarray(rng.normal(size=shape), jnp.float32)  # noqa: E731
    return replay.Transition(obs=f(n, N_AGENTS, OBS_DIM),
                             action=jnp.asarray(rng.uniform(-1, 1, size=(n, N_AGENTS, ACT_DIM)), jnp.float32),
                             reward=f(n, N_AGENTS),
                             discount=jnp.asarray(rng.choice([0.0, 0.95, 0.95 ** 3], size=n), jnp.float32),
                             next_obs=f(n, N_AGENTS, OBS_DIM))


def numpy_critics(agent, critic_params, obs, joint_per_agent):
    """Agent ``i``'s critics ``[C, N]`` for each ``i``, built by hand: the network on the
    concatenated observations (and id ``i``) and the joint action ``joint_per_agent[i]``."""
    obs = np.asarray(obs)
    n = obs.shape[0]
    apply = jax.jit(agent.critic.apply)
    out = []
    for i in range(N_AGENTS):
        state = obs.reshape(n, -1)
        if agent.agent_ids:
            state = np.concatenate([state, np.tile(np.eye(N_AGENTS)[i], (n, 1))], axis=1)
        params = critic_params if agent.share_parameters else jax.tree.map(lambda x: x[i], critic_params)
        out.append(np.asarray(apply(params, jnp.asarray(state, jnp.float32),
                                    jnp.asarray(joint_per_agent[i], jnp.float32))))
    return np.stack(out, axis=-1)  # [C, N, n_agents]


@pytest.mark.parametrize("share", [pytest.param(True, marks=pytest.mark.slow), False])  # one compiled loss per case
def test_matd3_critic_loss_against_numpy(share):
    agent = make_mlp_matd3_agent(ACTIONS, STACKED_OBS, share_parameters=share, agent_ids=share, target_noise=0.2,
                                 target_noise_clip=0.5, gamma=0.95, **SMALL)
    state = agent.init(jax.random.PRNGKey(0))
    target = {k: jax.tree.map(lambda x: 1.3 * x, state.params[k]) for k in agent.target_keys}
    batch, key = random_batch(), jax.random.PRNGKey(7)
    loss, _ = jax.jit(agent.critic_loss)(state, target, batch, key)

    mu_next = []  # each agent's target actor on its own observation (and id)
    for i in range(N_AGENTS):
        o = np.asarray(batch.next_obs[:, i])
        if agent.agent_ids:
            o = np.concatenate([o, np.tile(np.eye(N_AGENTS)[i], (len(o), 1))], axis=1)
        params = target["actor"] if share else jax.tree.map(lambda x: x[i], target["actor"])
        mu_next.append(np.asarray(agent.actor.apply(params, jnp.asarray(o, jnp.float32))))
    mu_next = np.stack(mu_next, axis=1)  # [N, n_agents, d]
    noise = 0.2 * np.asarray(jax.random.normal(key, mu_next.shape))
    a_next = np.clip(mu_next + np.clip(noise, -0.5, 0.5), -1, 1).reshape(len(mu_next), -1)  # the joint action
    q_next = numpy_critics(agent, target["critic"], batch.next_obs, [a_next] * N_AGENTS)
    y = np.asarray(batch.reward) + np.asarray(batch.discount)[:, None] * np.minimum(q_next[0], q_next[1])
    joint = np.asarray(batch.action).reshape(len(y), -1)
    q = numpy_critics(agent, state.params["critic"], batch.obs, [joint] * N_AGENTS)
    expected = np.mean((q[0] - y) ** 2) + np.mean((q[1] - y) ** 2)  # means over the batch and the agents
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_the_actor_climbs_its_own_critic_with_the_others_actions_from_the_buffer():
    agent = make_mlp_matd3_agent(ACTIONS, STACKED_OBS, agent_ids=True, **SMALL)
    state = agent.init(jax.random.PRNGKey(1))
    batch = random_batch(seed=2)
    actions = agent.actor_actions(state, state.params["actor"], batch.obs)  # [N, n_agents, d]
    q = agent.policy_q(state, batch, actions)  # [N, n_agents]
    assert q.shape == (6, N_AGENTS)
    joints = []
    for i in range(N_AGENTS):
        joint = np.array(batch.action)
        joint[:, i] = np.asarray(actions[:, i])  # agent i's own action, the others' as stored
        joints.append(joint.reshape(6, -1))
    expected = numpy_critics(agent, state.params["critic"], batch.obs, joints)[0]
    np.testing.assert_allclose(q, expected, rtol=1e-5, atol=1e-6)
    loss, _ = agent.actor_loss(state, None, batch, None)
    assert float(loss) == pytest.approx(-np.mean(expected), rel=1e-5)


def test_centralised_critics_read_the_global_state_and_every_action_the_actors_their_own_observation():
    agent = make_mlp_matd3_agent(ACTIONS, STACKED_OBS, **SMALL)
    state = agent.init(jax.random.PRNGKey(0))
    batch = random_batch()
    q = agent.q_values(state, state.params["critic"], batch.obs, batch.action)
    assert q.shape == (2, 6, N_AGENTS)  # [critics, N, agents]
    moved_obs, moved_action = batch.obs.at[:, 2].add(1.0), batch.action.at[:, 2].multiply(-1.0)
    for obs, action in ((moved_obs, batch.action), (batch.obs, moved_action)):  # agent 2's, seen by agent 0's critics
        assert not np.allclose(agent.q_values(state, state.params["critic"], obs, action)[:, :, 0], q[:, :, 0])
    mu = agent.actor_actions(state, state.params["actor"], batch.obs)
    assert mu.shape == (6, N_AGENTS, ACT_DIM)
    np.testing.assert_array_equal(agent.actor_actions(state, state.params["actor"], moved_obs)[:, :2], mu[:, :2])
    # shared critics without ids: every agent's critics read the same input
    np.testing.assert_allclose(q[:, :, 0], q[:, :, 1], rtol=1e-6)
    with_ids = make_mlp_matd3_agent(ACTIONS, STACKED_OBS, agent_ids=True, **SMALL)
    ids_state = with_ids.init(jax.random.PRNGKey(0))
    assert with_ids.critic_inputs(batch.obs).shape == (6, N_AGENTS, N_AGENTS * OBS_DIM + N_AGENTS)
    q_ids = with_ids.q_values(ids_state, ids_state.params["critic"], batch.obs, batch.action)
    assert not np.allclose(q_ids[:, :, 0], q_ids[:, :, 1])


def test_parameters_per_agent_learn_from_their_own_rewards():
    agent = make_mlp_matd3_agent(ACTIONS, STACKED_OBS, share_parameters=False, **SMALL)
    state = agent.init(jax.random.PRNGKey(0))
    assert all(x.shape[0] == N_AGENTS for x in jax.tree.leaves(state.params))
    target = {k: state.params[k] for k in agent.target_keys}
    batch = random_batch()

    def grad(batch):
        def loss(critic):
            return agent.critic_loss(state.replace(params={**state.params, "critic": critic}), target, batch,
                                     jax.random.PRNGKey(0))[0]
        return jax.grad(loss)(state.params["critic"])

    g, g_other = grad(batch), grad(batch.replace(reward=batch.reward.at[:, 1].add(3.0)))
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_other)):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-6, atol=1e-7)  # agent 0's critics: unchanged
    assert any(not np.allclose(a[1], b[1]) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_other)))


def test_exploration_and_warmup_act_for_every_agent_inside_the_bounds():
    agent = make_mlp_matd3_agent(ACTIONS, STACKED_OBS, exploration_noise=0.5, **SMALL)
    state = agent.init(jax.random.PRNGKey(0))
    obs, keys = random_batch(n=4).obs, jax.random.split(jax.random.PRNGKey(3), 4)
    for random_actions in (True, False):
        policy = agent.behaviour(state, jnp.zeros((), jnp.int32), jnp.asarray(random_actions))
        actions, _, _ = policy.policy_step(state, None, obs, keys)
        assert actions.shape == (4, N_AGENTS, ACT_DIM) and bool(jnp.all(jnp.abs(actions) <= 1.0))
        env_actions = agent.to_env_action(actions)
        assert bool(jnp.all((env_actions >= 0.0) & (env_actions <= 1.0)))
    assert agent.evaluate_actions(state, obs).shape == (4, N_AGENTS, ACT_DIM)


def test_n_step_transitions_with_a_reward_per_agent_are_each_agents_own():
    rng = np.random.default_rng(0)
    T, B, n = 6, 2, 3
    rewards = jnp.asarray(rng.normal(size=(T, B, N_AGENTS)), jnp.float32)
    terminated = np.zeros((T, B), bool)
    truncated = np.zeros((T, B), bool)
    terminated[2, 0], truncated[3, 1] = True, True
    discounts = jnp.asarray(0.9 * (1.0 - terminated), jnp.float32)
    ends = jnp.asarray(terminated | truncated)
    obs = jnp.asarray(rng.normal(size=(T, B, N_AGENTS, 4)), jnp.float32)
    next_obs = jnp.asarray(rng.normal(size=(T, B, N_AGENTS, 4)), jnp.float32)
    actions = jnp.zeros((T, B, N_AGENTS, 2))
    joint = n_step_transitions(obs, actions, rewards, discounts, ends, next_obs, n)
    assert joint.reward.shape == (T, B, N_AGENTS) and joint.discount.shape == (T, B)
    for i in range(N_AGENTS):
        own = n_step_transitions(obs[:, :, i], actions[:, :, i], rewards[:, :, i], discounts, ends,
                                 next_obs[:, :, i], n)
        np.testing.assert_allclose(joint.reward[:, :, i], own.reward, rtol=1e-6)
        np.testing.assert_array_equal(joint.discount, own.discount)
        np.testing.assert_array_equal(joint.next_obs[:, :, i], own.next_obs)
    assert float(joint.discount[2, 0]) == 0.0 and float(joint.discount[3, 1]) == pytest.approx(0.9)


def test_the_buffer_stores_joint_transitions_bootstrapping_truncation_not_termination():
    env = create_env(SPREAD, parallel=2)
    agent = make_mlp_matd3_agent(env.action_space, env.obs_space, gamma=0.95, **SMALL)
    tc = OffPolicyTrainingConfig(num_iterations=1, rollout_length=2, num_envs=2, buffer_size=8, batch_size=2,
                                 learning_starts=8, n_step=1)
    state = init_state(env, agent, make_optimizer(tc), tc, jax.random.PRNGKey(0), agent.default_hparams(),
                       tc.learning_rate)
    assert state.buffer.data.reward.shape == (4, 2, N_AGENTS)
    assert state.buffer.data.action.shape == (4, 2, N_AGENTS, ACT_DIM)
    k = jax.random.split(jax.random.PRNGKey(1), 4)
    trajectory = Trajectory(
        obs=jax.random.normal(k[0], (2, 2, N_AGENTS, OBS_DIM)),
        actions=jax.random.uniform(k[1], (2, 2, N_AGENTS, ACT_DIM)),
        rewards=jax.random.normal(k[2], (2, 2, N_AGENTS)),
        terminated=jnp.array([[True, False], [False, False]]),  # [T, B]: env 0 terminates at step 0
        truncated=jnp.array([[False, True], [False, False]]),  # env 1 reaches its time limit at step 0
        next_obs=jax.random.normal(k[3], (2, 2, N_AGENTS, OBS_DIM)), extras={})
    # the update before the learning start (the buffer's add, no gradient step compiled)
    state, _ = make_learner_update(agent, make_optimizer(tc), tc, warmup=True)(state, trajectory, jax.random.PRNGKey(2))
    data = jax.tree.map(lambda x: x[:2].reshape((4,) + x.shape[2:]), state.buffer.data)  # rows 0-1: [T * B, ...]
    flat = lambda x: x.reshape((4,) + x.shape[2:])  # noqa: E731
    np.testing.assert_array_equal(data.reward, flat(trajectory.rewards))
    np.testing.assert_array_equal(data.action, flat(trajectory.actions))
    np.testing.assert_array_equal(data.next_obs, flat(trajectory.next_obs))
    np.testing.assert_allclose(data.discount, [0.0, 0.95, 0.95, 0.95], rtol=1e-6)  # terminated, truncated, going on
    assert int(state.buffer.size) == 4 and int(state.gradient_steps) == 0


def test_maddpg_is_matd3_with_one_critic_no_smoothing_and_no_delay():
    agent = make_mlp_maddpg_agent(ACTIONS, STACKED_OBS, **SMALL)
    state = agent.init(jax.random.PRNGKey(0))
    assert agent.policy_delay == 1 and float(state.hparams.target_noise) == 0.0
    batch = random_batch()
    assert agent.q_values(state, state.params["critic"], batch.obs, batch.action).shape == (1, 6, N_AGENTS)


def test_bad_inputs_are_config_errors():
    discrete = create_env({**SPREAD, "kwargs": {}})
    with pytest.raises(ConfigError, match="continuous \\(Box\\) action spaces.*Discrete.*action_type: Continuous"):
        make_mlp_matd3_agent(discrete.action_space, discrete.obs_space)
    single = Box(np.full((OBS_DIM,), -1.0, np.float32), np.full((OBS_DIM,), 1.0, np.float32))
    with pytest.raises(ConfigError, match="stacked observation space of a multi-agent env"):
        make_mlp_matd3_agent(ACTIONS, single)
    with pytest.raises(ConfigError, match="normalize_obs is not supported"):
        make_mlp_matd3_agent(ACTIONS, STACKED_OBS, normalize_obs=True)
    cfg = copy.deepcopy(TINY_MATD3)
    cfg["env"] = {"env_name": "Pendulum-v1", "env_type": "gymnax"}
    with pytest.raises(ConfigError, match="MATD3 trains the agents of a multi-agent env.*one agent: use TD3Workflow"):
        MATD3Workflow.build_from_config(cfg)
    cfg["env"] = {**SPREAD, "kwargs": {"action_type": "Contnuous"}}
    with pytest.raises(ConfigError, match="env.kwargs.*Contnuous"):
        MATD3Workflow.build_from_config(cfg)


@pytest.mark.slow  # three short runs with checkpoints: 125 s at load 17 (the IPPO one: 83 s there)
def test_matd3_interrupted_and_resumed_is_bit_identical(tmp_path):
    uninterrupted = run_experiment(TINY_MATD3, output_dir=tmp_path / "whole")
    assert int(uninterrupted.state.gradient_steps) > 0
    with pytest.raises(Interrupted):
        run_experiment(TINY_MATD3, output_dir=tmp_path / "cut", recorders=[InterruptAt(3)])
    resumed = run_experiment({**TINY_MATD3, "resume": str(tmp_path / "cut")})
    assert int(resumed.state.iteration) == 6
    assert_states_identical(resumed.state, uninterrupted.state)
    assert resumed.final_metrics == uninterrupted.final_metrics


@pytest.mark.slow
def test_matd3_learns_continuous_simple_spread():
    """128k env steps (half the shipped config): from about -25 (the untrained actor stands
    still) to above -19.5 (tuning seeds 301-303 and fresh seeds: -17.4 to -18.6 there)."""
    cfg = {**TINY_MATD3, "seed": 11,
           "agent": {"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64], "agent_ids": True},
           "training": {"num_iterations": 1000, "rollout_length": 8, "num_envs": 16, "learning_rate": 1e-3,
                        "max_grad_norm": None, "gamma": 0.95, "buffer_size": 100_000, "batch_size": 256,
                        "num_updates": 8, "learning_starts": 2048, "warmup_steps": 2048, "target_update_period": 2,
                        "tau": 0.01, "eval_interval": 1000, "eval_episodes": 256}}
    cfg.pop("checkpoint")
    result = run_experiment(cfg)
    assert result.final_metrics["eval/episode_return"] > -19.5, result.final_metrics
