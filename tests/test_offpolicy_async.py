"""Off-policy agents (SAC, DQN) through the asynchronous actor-learner: the actors act with
the behaviour policy, the learner runs the fused iteration's update (buffer, gradient steps)."""

import threading

import jax
import numpy as np
import pytest

from test_dqn import TINY as FUSED_DQN_TINY
from test_td3_sac import TINY as TD3_SAC_TINY

from evorl.config import ConfigError
from evorl.workflows import DQNWorkflow, SACWorkflow

SAC_TINY = TD3_SAC_TINY  # the fused tests' tiny configs, so the two paths run the same settings
DQN_TINY = FUSED_DQN_TINY


def config(tiny, runner=None, env=None, **training):
    return {**tiny, "env": {**tiny["env"], **(env or {})}, "training": {**tiny["training"], **training},
            "runner": runner or {}}


def actor_threads():
    return [t for t in threading.enumerate() if t.name.startswith("evorl-actor")]


@pytest.mark.slow  # the fused and the actor-learner off-policy programs both compiled and run
@pytest.mark.parametrize("workflow_cls, tiny", [(SACWorkflow, SAC_TINY), (DQNWorkflow, DQN_TINY)])
def test_lockstep_single_actor_updates_equal_the_fused_iterations(workflow_cls, tiny):
    """One actor in lockstep acts with the parameters and env steps of the update before, on
    the fused iteration's keys and env states: the learner fills the same buffer and takes
    the same gradient steps (warm-up, epsilon schedule and learning_starts included)."""
    fused = workflow_cls.build_from_config(config(tiny, {"mode": "fused"}), recorders=[])
    state, fused_metrics = fused.run_iterations(fused.init(jax.random.PRNGKey(0)), 6)
    learner = workflow_cls.build_from_config(config(tiny, {"mode": "async", "num_actors": 1, "lockstep": True}),
                                             recorders=[])
    async_state = learner.init(jax.random.PRNGKey(0))
    with learner.executor.running(async_state):
        async_state, metrics = learner.executor.run(async_state, 6)
    assert int(async_state.iteration) == 6 and int(async_state.gradient_steps) == int(state.gradient_steps) > 0
    np.testing.assert_array_equal(np.asarray(async_state.buffer.data.obs), np.asarray(state.buffer.data.obs))
    np.testing.assert_allclose(np.asarray(async_state.buffer.data.action), np.asarray(state.buffer.data.action),
                               atol=1e-6)
    for a, b in zip(jax.tree.leaves((state.agent_state, state.target_params, state.opt_state)),
                    jax.tree.leaves((async_state.agent_state, async_state.target_params, async_state.opt_state))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    behaviour = "random_actions" if workflow_cls is SACWorkflow else "epsilon"
    assert metrics[behaviour] == pytest.approx(fused_metrics[f"train/{behaviour}"], abs=1e-6)
    assert learner.executor.host_metrics()["actors/policy_lag_max"] == 0
    assert not actor_threads()


@pytest.mark.parametrize("env_type", [pytest.param("gymnasium", marks=pytest.mark.slow), "envpool"])  # a SAC run each
def test_sac_on_a_host_env_trains_fills_the_buffer_and_evaluates(env_type):
    """Pendulum-v1 stepped on the host by gymnasium or envpool (runner.mode=auto picks async):
    two free actors; the buffer holds every transition the learner received; the greedy policy
    is evaluated on host episodes."""
    if env_type == "envpool":
        pytest.importorskip("envpool", reason="envpool is an optional extra")
    cfg = config(SAC_TINY, {"num_actors": 2, "queue_size": 2}, env={"env_type": env_type},
                 num_envs=4, num_iterations=4, eval_interval=4, buffer_size=512)
    workflow = SACWorkflow.build_from_config(cfg, recorders=[])
    assert workflow.asynchronous
    state = workflow.learn(workflow.init(jax.random.PRNGKey(0)))
    assert int(state.iteration) == 4 and int(state.buffer.size) == 4 * 4 * 8  # iterations x num_envs x T
    assert int(state.gradient_steps) == 3 * 4  # learning_starts 16 <= the first update's 32 transitions
    assert state.buffer.data.reward.shape == (128, 4)  # 512 slots in rows of the 4 environments: 32 rows filled
    assert np.isfinite(np.asarray(state.buffer.data.reward[:32])).all()
    assert np.abs(np.asarray(state.buffer.data.action[:32])).max() <= 1.0
    metrics = workflow.last_metrics
    assert np.isfinite(metrics["eval/episode_return"]) and metrics["eval/episode_return"] < 0  # Pendulum's costs
    assert metrics["train/buffer_size"] == 128 and metrics["actors/actor_steps_per_s"] > 0
    assert not actor_threads()


@pytest.mark.parametrize("runner, training, message", [
    ({"mode": "fused"}, {}, "steps its environments on the host"),
    ({"mode": "async", "num_actors": 3}, {}, "divisible by runner.num_actors=3"),
    ({"mode": "async"}, {"actor_lag": 2}, "the lag is real .* set training.actor_lag=0"),
])
def test_config_errors_name_the_key(runner, training, message):
    cfg = config(SAC_TINY, runner, env={"env_type": "gymnasium"}, **training)
    with pytest.raises(ConfigError, match=message):
        SACWorkflow.build_from_config(cfg, recorders=[])


def test_async_refuses_several_devices():
    cfg = config(SAC_TINY, {"mode": "async"})
    with pytest.raises(ConfigError, match="set distributed.multi_devices=false"):
        SACWorkflow.parse_config({**cfg, "distributed": {"multi_devices": True}})
