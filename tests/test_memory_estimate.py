"""The memory estimate (issue 36, item 2): a config that cannot fit is refused in one line
before anything is built, compiled or allocated; ``runner.max_memory_gb`` overrides the limit."""

import subprocess
import time

import pytest
from conftest import TINY
from test_cli_mistakes import TINY_OVERRIDES, assert_one_line, train_process

from evorl.config import ConfigError
from evorl.engine.memory_estimate import (
    WORD_BYTES,
    check_memory,
    memory_message,
    on_policy_terms,
    sizes_from_config,
    sizes_of_agent,
)
from evorl.workflows import PPOWorkflow

CARTPOLE = {**TINY, "agent": {}}  # PPO's default [64, 64] networks on CartPole (obs 4, 2 actions)


def dense(n_in, n_out):
    return n_in * n_out + n_out  # kernel + bias


#: By hand: policy 4 -> 64 -> 64 -> 2 logits, value 4 -> 64 -> 64 -> 1.
CARTPOLE_PARAMS = (dense(4, 64) + dense(64, 64) + dense(64, 2)) + (dense(4, 64) + dense(64, 64) + dense(64, 1))


@pytest.fixture(scope="module")
def cartpole():
    return PPOWorkflow.build_from_config(CARTPOLE)


def test_parameter_count_of_a_known_network_is_the_hand_count(cartpole):
    sizes = sizes_of_agent(cartpole.agent)
    assert sizes.num_params == CARTPOLE_PARAMS == 9155
    assert (sizes.obs_size, sizes.action_size, sizes.policy_state_size) == (4, 1, 0)
    assert sizes.largest_layer == (64, 64)


def test_estimate_of_a_known_config_is_within_a_factor_2_of_the_hand_count(cartpole):
    """Hand count: weights, gradient and Adam's two moments of each parameter, and the [T, B]
    rollout (obs, next obs, action, 7 scalars) with its shuffled copy, in float32; the estimate
    adds the activations, so it lies between the hand count and twice it."""
    tc = cartpole.config.training
    terms = on_policy_terms(cartpole.config, sizes_of_agent(cartpole.agent), num_devices=1, asynchronous=False)
    assert {t.name: t.words for t in terms}["parameters"] == 4 * CARTPOLE_PARAMS
    hand = WORD_BYTES * (4 * CARTPOLE_PARAMS + 2 * tc.rollout_length * tc.num_envs * (2 * 4 + 1 + 7))
    total = sum(t.bytes for t in terms)
    assert hand <= total <= 2 * hand, (hand, total)


@pytest.mark.parametrize("agent", [{}, {"actor_hidden_layer_sizes": [300, 20, 7]}, {"core": "gru", "core_size": 32},
                                   {"core": "lstm", "core_size": 16, "critic_hidden_layer_sizes": [5]}])
def test_config_bounds_are_lower_bounds_of_the_built_agent(agent):
    """The check before the agent is built must never refuse what the exact one accepts."""
    training = {**TINY["training"], "num_minibatches": 1}
    workflow = PPOWorkflow.build_from_config({**TINY, "agent": agent, "training": training})
    low, exact = sizes_from_config(workflow.config.agent), sizes_of_agent(workflow.agent)
    assert low.num_params <= exact.num_params
    assert low.activation_width <= exact.activation_width
    assert low.policy_state_size <= exact.policy_state_size


@pytest.mark.parametrize("agent, parts", [
    ({"actor_hidden_layer_sizes": [200000, 200000]}, ["parameters", "largest layer 200,000 x 200,000"]),
    ({"core": "gru", "core_size": 60000}, ["parameters", "largest layer 60,000 x"]),
    ({"core": "gru", "core_size": 2**31 - 1}, ["parameters", "largest layer 2,147,483,647 x"]),
], ids=["wide_mlp", "core_60000", "core_2**31-1"])
def test_too_large_networks_are_refused_before_anything_is_built(agent, parts, monkeypatch):
    """Refused before the env is created (the agent's networks, and the buffers of a
    ``core_size`` torso, come after it): nothing is allocated."""
    def no_env(*args, **kwargs):
        raise AssertionError("the env was created before the memory check")

    monkeypatch.setattr("evorl.engine.rl_base.create_env", no_env)
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="runner.max_memory_gb") as error:
        PPOWorkflow.build_from_config({**TINY, "agent": agent})
    assert time.perf_counter() - start < 1.0
    message = str(error.value)
    assert "\n" not in message and message.startswith("the run needs about ")
    for part in parts:
        assert part in message, message


def test_too_many_envs_are_refused_before_the_envs_are_created(monkeypatch):
    monkeypatch.setattr("evorl.engine.rl_base.create_env", lambda *a, **k: pytest.fail("env created"))
    training = {**TINY["training"], "num_envs": 10_000_000, "rollout_length": 128}
    with pytest.raises(ConfigError, match=r"rollout: 1 agent\(s\) x 128 x 10,000,000 steps"):
        PPOWorkflow.build_from_config({**TINY, "training": training})


def test_a_replay_buffer_too_large_is_refused_before_the_envs_are_created(monkeypatch):
    """Off-policy runs take the same path (``RLWorkflow.build_from_config``) with their own
    terms: the buffer's lower bound (one observation float) is already past the limit."""
    from evorl.workflows import DQNWorkflow

    for module in ("engine.rl_base", "engine.off_policy_workflow"):
        monkeypatch.setattr(f"evorl.{module}.create_env", lambda *a, **k: pytest.fail("env created"),
                            raising=False)
    training = {"num_iterations": 4, "num_envs": 4, "rollout_length": 1, "buffer_size": 2_000_000_000,
                "batch_size": 8, "learning_starts": 8, "eval_interval": 2, "eval_episodes": 2}
    cfg = {**TINY, "workflow_cls": "evorl.workflows.DQNWorkflow", "agent": {}, "training": training}
    with pytest.raises(ConfigError, match=r"replay buffer: 1 agent\(s\) x 2,000,000,000 transitions"):
        DQNWorkflow.build_from_config(cfg)


CLI_CASES = {
    "wide_mlp": (["agent.actor_hidden_layer_sizes=[200000,200000]"], ["config error: the run needs about", "640 GB",
                                                                     "runner.max_memory_gb"]),
    "core_60000": (["agent.core=gru", "agent.core_size=60000"], ["config error: the run needs about",
                                                                 "runner.max_memory_gb"]),
    "core_2**31-1": (["agent.core=gru", f"agent.core_size={2**31 - 1}"], ["config error: the run needs about"]),
    "core_2**31": (["agent.core=gru", f"agent.core_size={2**31}"], ["config error: 'agent.core_size'", "int32"]),
    "tiny_limit": (["runner.max_memory_gb=1e-6"], ["config error: the run needs about", "runner.max_memory_gb=1e-06"]),
}


def cli_overrides(args, tmp_path):
    overrides = [a for a in TINY_OVERRIDES if not any(a.split("=")[0] == b.split("=")[0] for b in args)]
    return [*overrides, *args, f"hydra.run.dir={tmp_path / 'run'}"]


@pytest.mark.parametrize("args, parts", list(CLI_CASES.values()), ids=list(CLI_CASES))
def test_the_cli_refuses_in_one_line(args, parts, tmp_path, train_in_process):
    status, out, err = train_in_process(cli_overrides(args, tmp_path), tmp_path)
    assert_one_line(subprocess.CompletedProcess(args, status, out, err), *parts)
    assert not (tmp_path / "run").exists()


# as a process of its own: one case in the default test set, every case with -m slow
@pytest.mark.parametrize("args, parts", [pytest.param(*CLI_CASES[c], id=c, marks=() if c == "wide_mlp" else
                                                      pytest.mark.slow) for c in CLI_CASES])
def test_the_command_refuses_in_one_line_within_seconds(args, parts, tmp_path):
    """Exit 2 and one line; the time is mostly Python and JAX starting (about 4 s)."""
    start = time.perf_counter()
    proc = train_process(cli_overrides(args, tmp_path), tmp_path)
    elapsed = time.perf_counter() - start
    assert_one_line(proc, *parts)
    assert elapsed < 30, elapsed
    assert not (tmp_path / "run").exists()


def test_the_override_key_moves_the_limit(cartpole):
    """A tiny limit refuses the ordinary config the default accepts; a larger one, or .inf,
    lets a config over the machine's memory through the check."""
    terms = on_policy_terms(cartpole.config, sizes_of_agent(cartpole.agent), 1, False)
    check_memory(terms, None)  # the machine's memory: accepted
    with pytest.raises(ConfigError, match=r"more than the 1e-06 GB available \(runner.max_memory_gb=1e-06\)"):
        PPOWorkflow.build_from_config({**CARTPOLE, "runner": {"max_memory_gb": 1e-6}})
    huge = PPOWorkflow.parse_config({**TINY, "agent": {"actor_hidden_layer_sizes": [200000, 200000]}})
    huge_terms = on_policy_terms(huge, sizes_from_config(huge.agent), 1, False)
    with pytest.raises(ConfigError):
        check_memory(huge_terms, None)
    check_memory(huge_terms, 1e4)  # 10 TB allowed
    check_memory(huge_terms, float("inf"))  # no check
    assert memory_message(huge_terms, limit=1e15, source="test") is None


@pytest.mark.parametrize("value, ok", [(".inf", True), (2.5, True), (None, True), (0, False), (-1.0, False)])
def test_max_memory_gb_is_validated(value, ok):
    cfg = {**CARTPOLE, "runner": {"max_memory_gb": value}}
    if ok:
        expected = float("inf") if value == ".inf" else value
        assert PPOWorkflow.parse_config(cfg).runner.max_memory_gb == expected
    else:
        with pytest.raises(ConfigError, match="runner.max_memory_gb must be > 0"):
            PPOWorkflow.parse_config(cfg)


def test_es_population_too_large_is_refused():
    from evorl.workflows import ESWorkflow

    cfg = {"workflow_cls": "evorl.workflows.ESWorkflow", "env": TINY["env"], "es": {"population_size": 100_000},
           "agent": {"actor_hidden_layer_sizes": [1024, 1024]}}
    with pytest.raises(ConfigError, match=r"candidates: 100,000 members x .* make the candidates smaller "
                                          r"\(es.population_size"):
        ESWorkflow.build_from_config(cfg)


# --- multi-agent runs: every agent's observations, actions and scalars (issue 55) ------------
def shipped_workflow(name: str):
    from pathlib import Path

    from omegaconf import OmegaConf

    from evorl.workflows import resolve_workflow_cls

    pytest.importorskip("jaxmarl", reason="the multi-agent configs need jaxmarl (pip install -e '.[marl]')")
    cfg = OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[1] / "configs" / f"{name}.yaml"))
    cfg.pop("defaults")
    return resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])


def tree_bytes(tree) -> int:
    import jax

    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


def estimated_bytes(workflow, term: str) -> float:
    terms = workflow.memory_terms(workflow.config, sizes_of_agent(workflow.agent), 1, False)
    return {t.name: t.bytes for t in terms}[term]


def test_replay_buffer_estimate_of_a_multi_agent_config_is_its_bytes():
    """MATD3's buffer holds ``[n_agents, obs_dim]`` observations, ``[n_agents, d]`` actions and
    ``[n_agents]`` rewards per transition, all float32: the estimate is its bytes within 1%
    (it was 0.906 of them, 46.0 of 50.8 MB, counting one agent's action and reward)."""
    import jax

    workflow = shipped_workflow("matd3_mpe_simple_spread")
    actual = tree_bytes(workflow.init(jax.random.PRNGKey(0)).buffer.data)
    assert actual == 100_000 * 4 * (2 * 3 * 18 + 3 * 5 + 3 + 1)
    assert estimated_bytes(workflow, "replay buffer") == pytest.approx(actual, rel=0.01)


@pytest.mark.parametrize("name", ["ippo_mpe_simple_spread", "mappo_mpe_simple_spread"])
def test_rollout_estimate_of_a_multi_agent_config_is_its_bytes(name):
    """IPPO's and MAPPO's ``[T, B]`` rollout with its targets holds every agent's observations,
    action, reward, log-prob, value, advantage and return: the estimate (two copies: the
    rollout and its shuffled minibatches) is two rollouts' bytes to within 0-5% above (1.2%:
    the shared terminated and truncated are 1-byte bools, counted as words). It was 0.35 of
    them, counting one agent's observation and one scalar of each kind per step."""
    import jax
    import numpy as np

    from evorl.rl.rollout import rollout_with_policy_state

    workflow = shipped_workflow(name)
    tc, agent = workflow.config.training, workflow.agent
    state = workflow.init(jax.random.PRNGKey(0))

    def collect(state):
        _, _, trajectory, _ = rollout_with_policy_state(workflow.env, agent, state.agent_state, state.env_state,
                                                        state.policy_state, state.key, tc.rollout_length,
                                                        np.arange(tc.num_envs))
        return agent.compute_targets(state.agent_state, trajectory)  # [T, B, n_agents, ...]

    actual = 2 * tree_bytes(jax.eval_shape(collect, state))
    assert actual <= estimated_bytes(workflow, "rollout") <= 1.05 * actual
