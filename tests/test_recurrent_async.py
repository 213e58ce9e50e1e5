"""Recurrent policies in the asynchronous actor-learner: the actors carry each environment's
policy state from one rollout to the next (JAX envs and host envs), the learner's update is
the fused one, and a host memory task is learned."""

import copy
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import TINY

from evorl.algorithms.ppo import make_mlp_ppo_agent
from evorl.envs import create_env
from evorl.app.experiment import run_experiment
from evorl.rl.host_rollout import host_rollout, host_rollout_with_policy_state
from evorl.workflows import PPOWorkflow

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import memory_cue  # noqa: E402  (registers MemoryCue-v0 with gymnasium)

MEMORY_CUE = {"env_name": f"memory_cue:{memory_cue.ENV_ID}", "env_type": "gymnasium"}


@pytest.mark.slow  # the fused and the actor-learner recurrent programs both compiled and run
def test_lockstep_single_actor_recurrent_updates_equal_the_fused_iterations():
    """One actor in lockstep on a JAX env: each learner update sees the batch the fused
    iteration collects, the GRU's state carried across rollouts as the fused state carries
    it, and applies the same update."""
    cfg = copy.deepcopy(TINY)
    cfg["agent"].update(core="gru", core_size=8)
    cfg["training"].update(num_envs=4, num_epochs=2, num_minibatches=2)
    fused = PPOWorkflow.build_from_config({**cfg, "runner": {"mode": "fused"}}, recorders=[])
    state = fused.init(jax.random.PRNGKey(0))
    state, _ = fused.run_iterations(state, 4)  # 64 steps of 4 CartPole envs: episodes end and restart
    learner = PPOWorkflow.build_from_config({**cfg, "runner": {"mode": "async", "num_actors": 1, "lockstep": True}},
                                            recorders=[])
    async_state = learner.init(jax.random.PRNGKey(0))
    assert async_state.policy_state is None  # the actors own it
    with learner.executor.running(async_state):
        async_state, _ = learner.executor.run(async_state, 4)
    assert int(async_state.iteration) == 4
    for a, b in zip(jax.tree.leaves(state.agent_state), jax.tree.leaves(async_state.agent_state)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    assert learner.executor.host_metrics()["actors/policy_lag_max"] == 0


def test_the_host_rollout_carries_the_recurrent_state_like_a_loop_over_environments():
    """Two host rollouts in a row of a GRU policy on MemoryCue (5-step episodes, so both cross
    episode ends), against a loop over the environments one at a time: each acts from its own
    state, reset by hand to the initial one at an episode's first step."""
    b, length, memory_length = 3, 7, 5
    env = create_env({**MEMORY_CUE, "kwargs": {"memory_length": memory_length}}, parallel=b)
    reference_env = env.with_num_envs(b)
    agent = make_mlp_ppo_agent(env.action_space, env.obs_space, core="gru", core_size=8,
                               actor_hidden_layer_sizes=(8,), critic_hidden_layer_sizes=(8,))
    state = agent.init(jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match="use host_rollout_with_policy_state"):
        host_rollout(env, agent, state, env.reset(0), jax.random.PRNGKey(1), length)

    env_ids, keys = np.array([4, 5, 6]), [jax.random.PRNGKey(1), jax.random.PRNGKey(2)]
    env_state, policy_state = env.reset(7), agent.initial_policy_state(b)
    trajectories = []
    for key in keys:
        env_state, policy_state, trajectory, _ = host_rollout_with_policy_state(
            env, agent, state, env_state, policy_state, key, length, env_ids)
        trajectories.append(trajectory)

    initial = agent.initial_policy_state(1)
    ref_state, states = reference_env.reset(7), [initial] * b
    starts = np.zeros(b, bool)
    for key, trajectory in zip(keys, trajectories):
        step_keys = jax.random.split(key, length)
        for t in range(length):
            actions = []
            for i, env_id in enumerate(env_ids):
                h = initial if starts[i] else states[i]
                np.testing.assert_allclose(trajectory.extras["policy_state"][t, i], np.asarray(h)[0], atol=1e-6)
                a, extras, states[i] = agent.policy_step(state, h, ref_state.obs[i:i + 1],
                                                         jax.random.fold_in(step_keys[t], env_id)[None])
                actions.append(int(a[0]))
                np.testing.assert_allclose(trajectory.extras["logp"][t, i], float(extras["logp"][0]), atol=1e-5)
            np.testing.assert_array_equal(trajectory.actions[t], actions)
            np.testing.assert_array_equal(trajectory.obs[t], ref_state.obs)
            ref_state = reference_env.step(np.array(actions))
            starts = ref_state.done
    assert np.concatenate([t.terminated for t in trajectories]).any()  # episodes ended inside: resets tested
    np.testing.assert_allclose(np.asarray(policy_state), np.concatenate([np.asarray(h) for h in states]), atol=1e-6)


def memory_cue_return(core: str, seed: int, iterations: int = 60) -> float:
    return run_experiment(memory_cue.config(core, seed, iterations)).final_metrics["eval/episode_return"]


@pytest.mark.slow  # ~20 s: two 15k-step runs through the actor-learner on host envs
def test_a_recurrent_agent_learns_a_host_memory_task_through_the_actor_learner():
    """MemoryCue (gymnasium, stepped by 2 actor threads): the GRU recalls the cue, a
    feed-forward agent stays at chance (64 episodes of +-1: std 0.125)."""
    recurrent, feed_forward = memory_cue_return("gru", seed=11), memory_cue_return("none", seed=11)
    print(f"MemoryCue through the actor-learner, seed 11, 15k steps: gru {recurrent}, feed-forward {feed_forward}")
    assert recurrent >= 0.9
    assert abs(feed_forward) <= 0.4
