"""Recurrent policies (``agent.core: gru | lstm``): the loss's unroll reproduces what the
rollout did, episode boundaries inside a sequence reset the state, evaluation and the policy
API carry it, checkpoints resume exactly, and a memory task that a feed-forward policy cannot
solve is solved."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY
from test_checkpoint_resume import Interrupted, InterruptAt, assert_states_identical

import evorl
from evorl.algorithms.a2c import make_mlp_a2c_agent
from evorl.algorithms.impala import make_mlp_impala_agent
from evorl.algorithms.ppo import make_mlp_ppo_agent
from evorl.config import ConfigError
from evorl.envs import create_env
from evorl.app.experiment import run_experiment
from evorl.rl.rollout import Trajectory, rollout, rollout_with_policy_state

CARTPOLE = {"env_name": "CartPole-v1", "env_type": "gymnax"}
SMALL = {"core_size": 16, "actor_hidden_layer_sizes": [16], "critic_hidden_layer_sizes": [16]}
FACTORIES = {"ppo": make_mlp_ppo_agent, "a2c": make_mlp_a2c_agent, "impala": make_mlp_impala_agent}


def recurrent_agent(env, core="gru", algo="ppo", **options):
    return FACTORIES[algo](env.action_space, env.obs_space, core=core, **{**SMALL, "normalize_obs": True, **options})


def two_rollouts(agent, env, length=48):
    """Two rollouts in a row (the second continues the first's episodes and policy state) with
    a fresh agent whose observation statistics are not the identity."""
    state = agent.init(jax.random.PRNGKey(0))
    env_state = env.reset(jax.random.PRNGKey(1))
    state = agent.update_obs_statistics(state, env_state.obs * 3.0 + 1.0)
    policy_state = agent.initial_policy_state(env.num_envs)
    go = jax.jit(lambda s, e, p, k: rollout_with_policy_state(env, agent, s, e, p, k, length))
    env_state, policy_state, first, _ = go(state, env_state, policy_state, jax.random.PRNGKey(2))
    env_state, policy_state, second, _ = go(state, env_state, policy_state, jax.random.PRNGKey(3))
    return state, first, second, policy_state


def max_diff(a, b):
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


@pytest.mark.slow  # a recurrent agent's rollout and its loss's unroll compiled and run
@pytest.mark.parametrize("core, algo", [("gru", "ppo"), ("lstm", "impala"), ("gru", "a2c")])
def test_the_losses_unroll_reproduces_the_rollouts_states_across_episode_ends(core, algo):
    env = create_env(CARTPOLE, parallel=4)
    agent = recurrent_agent(env, core, algo)
    state, first, second, last_state = two_rollouts(agent, env)
    done = np.asarray(first.terminated | first.truncated) | np.asarray(second.terminated | second.truncated)
    assert done[:-1].any(), "no episode ended inside the sequences: nothing tested"  # random CartPole: ~20 steps
    for trajectory in (first, second):
        states, after, _ = agent.unroll_core(state, trajectory)
        assert max_diff(states, trajectory.extras["policy_state"]) <= 1e-6
        # the same log-probabilities: the first update's ratio is exactly pi / mu = 1
        dist_params, _, _ = agent.unroll(state, trajectory)
        logp = agent.distribution.log_prob(dist_params, trajectory.actions)
        np.testing.assert_allclose(logp, trajectory.extras["logp"], atol=1e-5)
    assert max_diff(jax.tree.map(lambda h: h[-1], after), last_state) <= 1e-6  # the state the second rollout handed on
    # the second rollout started from the first one's state, not from zeros
    assert max_diff(jax.tree.map(lambda h: h[0], second.extras["policy_state"]), agent.initial_policy_state(4)) > 0.01


def by_hand(agent, state, obs, h):
    """A plain Python loop over one sequence ``obs [T, b]`` from state ``h``: the values."""
    values = []
    for t in range(obs.shape[0]):
        h, y = agent.core_network.apply(state.params["core"], h, agent.features(state, obs[t]))
        values.append(agent.value_network.apply(state.params["value"], y))
    return jnp.stack(values)


@pytest.mark.slow  # compiles the recurrent loss twice
def test_a_reset_in_the_middle_of_a_sequence_equals_two_sequences():
    env = create_env(CARTPOLE, parallel=3)
    agent = recurrent_agent(env, "gru")
    state = agent.init(jax.random.PRNGKey(0))
    t, b, end = 10, 3, 4  # every env's episode ends (terminated) at step 4; step 5 starts a new one
    obs = jax.random.normal(jax.random.PRNGKey(1), (t, b, 4))
    h0 = jax.random.normal(jax.random.PRNGKey(2), (b, SMALL["core_size"])) * 0.5  # memory from before
    terminated = jnp.zeros((t, b), bool).at[end].set(True)

    def trajectory(o, term, h):
        zeros = jnp.zeros(o.shape[:2])
        return Trajectory(obs=o, actions=zeros.astype(jnp.int32), rewards=zeros, terminated=term,
                          truncated=term & False, next_obs=o * 2.0,
                          extras={"policy_state": jnp.broadcast_to(h, (o.shape[0],) + h.shape)})

    whole = agent.unroll(state, trajectory(obs, terminated, h0))
    initial = agent.initial_policy_state(b)
    parts = [agent.unroll(state, trajectory(obs[:end + 1], terminated[:end + 1], h0)),
             agent.unroll(state, trajectory(obs[end + 1:], terminated[end + 1:], initial))]
    for w, p0, p1 in zip(whole, *parts):
        np.testing.assert_allclose(w, jnp.concatenate([p0, p1]), atol=1e-6)
    expected = jnp.concatenate([by_hand(agent, state, obs[:end + 1], h0), by_hand(agent, state, obs[end + 1:], initial)])
    np.testing.assert_allclose(whole[1], expected, atol=1e-6)


def test_recurrent_agents_refuse_to_act_without_their_state():
    env = create_env(CARTPOLE, parallel=2)
    agent = recurrent_agent(env)
    state = agent.init(jax.random.PRNGKey(0))
    assert agent.recurrent and agent.sequence_minibatches
    with pytest.raises(TypeError, match=r"recurrent core \(agent.core=gru\): act with policy_step"):
        agent.evaluate_actions(state, env.reset(jax.random.PRNGKey(0)).obs)
    with pytest.raises(TypeError, match="use rollout_with_policy_state"):
        rollout(env, agent, state, env.reset(jax.random.PRNGKey(0)), jax.random.PRNGKey(1), 4)
    cfg = copy.deepcopy(TINY)
    cfg["agent"].update(core="rnn")
    with pytest.raises(ConfigError, match=r"Unknown agent.core 'rnn'; valid: none, gru, lstm"):
        run_experiment(cfg)


def recurrent_tiny(**agent):
    cfg = copy.deepcopy(TINY)
    cfg["agent"].update(core="gru", core_size=8, **agent)
    return cfg


@pytest.mark.slow  # 16 s; test_checkpoint_resume.py keeps a bit-identical resume in the default set
def test_a_recurrent_run_resumes_bit_identical(tmp_path):
    cfg = recurrent_tiny()
    straight = run_experiment(cfg, output_dir=tmp_path / "straight")
    assert straight.state.policy_state.shape == (4, 8) and float(jnp.max(jnp.abs(straight.state.policy_state))) > 0
    with pytest.raises(Interrupted):
        run_experiment(cfg, output_dir=tmp_path / "cut", recorders=[InterruptAt(3)])
    resumed = run_experiment({**cfg, "resume": str(tmp_path / "cut")})
    assert_states_identical(resumed.state, straight.state)  # the policy state of the episodes in progress too


@pytest.mark.slow  # ~79 s on 2 cores at load 8-10 (2026-12-03)
def test_the_policy_api_carries_the_state_as_evaluation_does(tmp_path):
    result = run_experiment(recurrent_tiny(), output_dir=tmp_path / "run")
    agent, agent_state = result.workflow.agent, result.state.agent_state
    policy = evorl.load_policy(tmp_path / "run")
    env = create_env(CARTPOLE, parallel=3)
    env_state = env.reset(jax.random.PRNGKey(7))
    h, ended = agent.initial_policy_state(3), 0
    for _ in range(60):  # across episode ends: the caller resets the envs that are done
        expected, _, h = agent.policy_step(agent_state, h, env_state.obs, None, greedy=True)
        np.testing.assert_array_equal(policy(np.asarray(env_state.obs)), np.asarray(expected))
        env_state = env.step(env_state, expected)
        h = jnp.where(env_state.done[:, None], agent.initial_policy_state(3), h)
        policy.reset(np.asarray(env_state.done))
        ended += int(np.sum(env_state.done))
    assert ended > 0, "no episode ended: the resets were not tested"
    policy.reset()
    first = np.asarray(agent.policy_step(agent_state, agent.initial_policy_state(1), env_state.obs[:1], None,
                                         greedy=True)[0])
    np.testing.assert_array_equal(policy(np.asarray(env_state.obs[0])), first[0])


@pytest.mark.slow  # 17 s
def test_a_recurrent_population_equals_its_agents_trained_alone():
    """Two seeds x two clip values in one program: each agent's parameters and the policy state
    of its episodes in progress equal those of the same agent trained by itself."""
    from evorl.workflows import PPOWorkflow

    def cfg(clip, **training):
        c = recurrent_tiny(clip_epsilon=clip)
        c["training"].update(num_iterations=3, **training)
        return c

    population = PPOWorkflow.build_from_config(cfg([0.1, 0.3], num_seeds=2), recorders=[])
    state, _ = population.run_iterations(population.init(jax.random.PRNGKey(7)), 3)
    assert state.policy_state.shape == (4, 4, 8)  # [agents, envs, core]
    seed_keys = jax.random.split(jax.random.PRNGKey(7), 2)
    for index, (clip, seed) in enumerate([(c, s) for c in (0.1, 0.3) for s in (0, 1)]):
        if index not in (0, 3):
            continue  # a sample of the 4 keeps the test quick
        alone = PPOWorkflow.build_from_config(cfg(clip), recorders=[])
        single, _ = alone.run_iterations(alone.init(seed_keys[seed]), 3)
        own = jax.tree.map(lambda x: x[index], (state.agent_state.params, state.policy_state))
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=2e-5, atol=2e-6), own,
                     (single.agent_state.params, single.policy_state))


@pytest.mark.slow  # 23 s each (a subprocess compiles both runs)
@pytest.mark.parametrize("core", ["gru", "lstm"])
def test_a_recurrent_agent_on_two_devices_equals_one_device(core):
    """The environments (and their policy states) split over 2 devices: the same episodes and
    parameters as on one device."""
    from test_multi_device import run_two_devices

    cfg = {"env": CARTPOLE, "agent": {**SMALL, "core": core, "normalize_obs": True},
           "training": {"num_envs": 8, "rollout_length": 32, "num_epochs": 2, "num_minibatches": 1}}
    result = run_two_devices("evorl.workflows.PPOWorkflow", cfg, iterations=4)
    assert result["env_devices"] == 2
    assert result["episodes"][0] == result["episodes"][1]
    assert result["eval_return"][0] == pytest.approx(result["eval_return"][1], abs=1e-3)
    assert result["max_param_diff"] <= 1e-5 * max(1.0, result["param_scale"]), result


@pytest.mark.slow  # three workflows compiled
@pytest.mark.parametrize("workflow_cls", ["PPOWorkflow", "A2CWorkflow", "IMPALAWorkflow"])
def test_every_algorithm_trains_a_recurrent_core(workflow_cls):
    """Each algorithm's loss reads the unrolled core: a few iterations change the core's
    parameters and keep everything finite."""
    from evorl.workflows import resolve_workflow_cls

    cfg = recurrent_tiny()
    cfg["workflow_cls"] = f"evorl.workflows.{workflow_cls}"
    if workflow_cls == "A2CWorkflow":  # one gradient step per rollout
        cfg["training"]["num_minibatches"] = 1
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    initial = jax.tree.map(np.asarray, state.agent_state.params["core"])  # copied: the chunk donates its input
    state, metrics = workflow.run_iterations(state, 3)
    core = state.agent_state.params["core"]
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(core))
    assert max_diff(core, initial) > 1e-6
    assert np.isfinite(float(metrics["train/loss"]))


def memory_chain(core, seeds=3, iterations=40):
    """PPO on gymnax MemoryChain-bsuite (the context bit is shown at the first step, asked for
    5 steps later: return +1 if recalled, -1 if not; a memoryless policy averages 0), ``seeds``
    seeds in one program; the final greedy evaluation of each."""
    cfg = {"workflow_cls": "evorl.workflows.PPOWorkflow", "seed": 0,
           "env": {"env_name": "MemoryChain-bsuite", "env_type": "gymnax"},
           "agent": {"core": core, "core_size": 32, "actor_hidden_layer_sizes": [32], "critic_hidden_layer_sizes": [32]},
           "training": {"num_envs": 16, "rollout_length": 32, "num_iterations": iterations, "num_epochs": 4,
                        "num_minibatches": 4, "learning_rate": 3e-3, "eval_interval": iterations, "eval_episodes": 64,
                        "num_seeds": seeds},
           "logging": {"recorders": [], "plot": False}}
    workflow = run_experiment(cfg).workflow  # its last logging point evaluated each seed
    return np.asarray(workflow.last_metrics_per_agent["eval/episode_return"])  # [seeds]


@pytest.mark.slow  # 40-50 s; benchmarks/recurrent.py prints the same comparison
def test_a_memory_task_needs_the_recurrent_core():
    recurrent, feed_forward = memory_chain("gru"), memory_chain("none")
    print(f"MemoryChain, 3 seeds, 20k steps each: gru {recurrent}, feed-forward {feed_forward}")
    assert np.all(recurrent >= 0.9), recurrent
    assert np.all(np.abs(feed_forward) <= 0.4), feed_forward  # chance: 64 episodes of +-1 have std 0.125
