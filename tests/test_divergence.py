"""NaN is noticed: training that diverges stops at the next logging point with an error
naming the iteration, the agent and the metric; nothing non-finite is checkpointed, and the
last finite state is (the run's start, before the first save), named by the error; the run
folder's JSON stays strict; evorl-eval refuses a non-finite checkpoint. In a population a
diverged agent is frozen and reported once, the others train on, and only a population
whose every agent diverged stops."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY

from evorl.algorithms.ppo import PPOWorkflow
from evorl.engine.execution import Executor
from evorl.rl.on_policy import OnPolicyState
from evorl.rl.state_roles import env_axes
from evorl.engine.host_loop import chunk_health
from evorl.app.checkpoint import CheckpointConfig, Checkpointer
from evorl.app.experiment import load_run, resolved_config, run_experiment
from evorl.app.run_folder import checkpoint_dir, dumps_json
from evorl.engine.health import TrainingDiverged

ROOT = Path(__file__).resolve().parents[1]
#: Adam steps of this size overflow the value loss within the first iteration.
DIVERGING_LR = 1e30


def strict_json(text: str):
    """``json.loads`` that refuses NaN / Infinity tokens, as strict JSON readers do."""
    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")
    return json.loads(text, parse_constant=refuse)


class PoisonedPPOWorkflow(PPOWorkflow):
    """PPO whose parameters become NaN at the end of iteration ``POISON_AT``, inside the
    compiled chunk (its loss metrics stay finite: only the parameter check can notice)."""

    POISON_AT = 4

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        step = self.executor.step

        def poisoned_step(state):
            state, metrics = step(state)
            poison = state.iteration >= self.POISON_AT
            params = jax.tree.map(lambda x: jnp.where(poison, x * jnp.nan, x), state.agent_state.params)
            return state.replace(agent_state=state.agent_state.replace(params=params)), metrics

        self.executor = Executor(poisoned_step, self.placement, env_axes(OnPolicyState), final_metrics=chunk_health)


def test_diverging_run_stops_with_the_iteration_and_metric_and_run_json_says_failed(tiny_cfg, tmp_path):
    tiny_cfg["training"]["learning_rate"] = DIVERGING_LR
    with pytest.raises(TrainingDiverged) as info:
        run_experiment(tiny_cfg, output_dir=tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("training diverged by iteration 1: the agent: non-finite parameters")
    assert "train/value_loss=" in message and "training.learning_rate" in message
    info_json = strict_json((tmp_path / "run.json").read_text())
    assert info_json["status"] == "failed" and info_json["reason"].startswith("TrainingDiverged: training diverged")
    # the non-finite state was not saved; the last finite one, the run's start, was (before the first save)
    assert "the newest checkpoint, iteration 0 (the run's start), holds the last finite state saved" in message
    assert [p.name for p in checkpoint_dir(tmp_path).iterdir()] == ["0"]
    assert not (tmp_path / "metrics.jsonl").read_text()  # nor logged
    workflow, state, iteration = load_run(tmp_path)
    initial = workflow.init(jax.random.PRNGKey(tiny_cfg["seed"]))
    assert iteration == 0 and workflow.params_finite(state).all()
    for a, b in zip(jax.tree.leaves(state.agent_state.params), jax.tree.leaves(initial.agent_state.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow  # a diverging run with checkpoints
def test_the_newest_checkpoint_is_the_last_finite_state(tiny_cfg, tmp_path):
    tiny_cfg["workflow_cls"] = f"{__name__}.PoisonedPPOWorkflow"
    tiny_cfg["checkpoint"]["save_interval"] = 1
    with pytest.raises(TrainingDiverged, match=r"by iteration 4: the agent: non-finite parameters\. Nothing non-finite "
                                               r"was checkpointed: the newest checkpoint, iteration 3, holds"):
        run_experiment(tiny_cfg, output_dir=tmp_path)
    assert sorted(int(p.name) for p in checkpoint_dir(tmp_path).iterdir()) == [1, 2, 3]
    records = [strict_json(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3]
    workflow, state, iteration = load_run(tmp_path)
    assert iteration == 3 and workflow.params_finite(state).all()
    assert strict_json((tmp_path / "run.json").read_text())["status"] == "failed"


@pytest.mark.slow  # ~29 s on 2 cores at load 8-10 (2026-12-03)
def test_a_diverged_agent_of_a_population_is_frozen_and_the_others_train_on(tiny_cfg, tmp_path, capsys):
    tiny_cfg["training"].update(learning_rate=[5e-4, DIVERGING_LR], num_iterations=4)
    result = run_experiment(tiny_cfg, output_dir=tmp_path)
    err = [line for line in capsys.readouterr().err.splitlines() if "diverged" in line]
    assert len(err) == 1, err  # reported once, in one line
    assert err[0].startswith("evorl: training diverged by iteration 1 for agent 1 (learning_rate=1e+30, seed 0)")
    assert "frozen at the last finite state" in err[0] and "1 of 2 agents train on" in err[0]
    assert strict_json((tmp_path / "run.json").read_text())["status"] == "finished"
    records = [strict_json(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [1, 2, 3, 4]
    for r in records:  # the healthy agent's metrics, finite; the frozen one left out and counted
        assert r["train/nonfinite_agents"] == 1 and np.isfinite(r["train/value_loss"])
        assert r["eval/episode_return"] == r["eval/episode_return[learning_rate=0.0005]"] > 0
        assert r["eval/episode_return[learning_rate=1e+30]"] is None
    assert sorted(int(p.name) for p in checkpoint_dir(tmp_path).iterdir()) == [2, 4]
    workflow, state, iteration = load_run(tmp_path)
    assert iteration == 4 and workflow.params_finite(state).all()
    # the frozen agent kept its initial parameters (it diverged in its first iteration); the other trained
    initial = workflow.init(jax.random.PRNGKey(tiny_cfg["seed"]))
    moved = [bool(np.any(np.asarray(a)[i] != np.asarray(b)[i])) for i in range(2)
             for a, b in zip(jax.tree.leaves(state.agent_state.params), jax.tree.leaves(initial.agent_state.params))]
    assert not any(moved[len(moved) // 2:]) and all(moved[:len(moved) // 2])
    assert result is not None


@pytest.mark.slow  # ~19 s on 2 cores at load 8-10 (2026-12-03)
def test_a_population_whose_every_agent_diverged_stops(tiny_cfg, tmp_path):
    tiny_cfg["training"].update(learning_rate=[1e29, DIVERGING_LR])
    with pytest.raises(TrainingDiverged) as info:
        run_experiment(tiny_cfg, output_dir=tmp_path)
    message = str(info.value)
    assert message.startswith("training diverged by iteration 1: every agent diverged (agent 0 (learning_rate=1e+29, "
                              "seed 0): non-finite ")
    assert "agent 1 (learning_rate=1e+30, seed 0): non-finite " in message and "training.learning_rate" in message
    assert "the newest checkpoint, iteration 0 (the run's start)" in message
    assert [p.name for p in checkpoint_dir(tmp_path).iterdir()] == ["0"]  # the last finite state, on disk
    workflow, state, iteration = load_run(tmp_path)
    assert iteration == 0 and workflow.params_finite(state).all()
    assert strict_json((tmp_path / "run.json").read_text())["status"] == "failed"


@pytest.mark.slow  # ~23 s on 2 cores at load 8-10 (2026-12-03)
def test_population_metrics_leave_out_frozen_agents_and_count_them(tiny_cfg):
    tiny_cfg["training"].update(learning_rate=[3e-4, DIVERGING_LR], num_seeds=2)
    workflow = PPOWorkflow.build_from_config(tiny_cfg, recorders=[])
    state, metrics = workflow.run_iterations(workflow.init(jax.random.PRNGKey(0)), 1)
    assert metrics["train/nonfinite_agents"] == 2
    assert np.isfinite(metrics["train/value_loss"])  # the mean of the agents that train on
    assert workflow.alive_agents().tolist() == [True, True, False, False]
    assert workflow.params_finite(state).tolist() == [True] * 4  # frozen at their last finite state


@pytest.mark.slow  # ~41 s on 2 cores at load 8-10 (2026-12-03)
def test_pbt_replaces_a_frozen_agent_at_its_next_step(tiny_cfg):
    tiny_cfg["training"].update(learning_rate=[5e-4, DIVERGING_LR], num_iterations=2, eval_interval=2)
    tiny_cfg["pbt"] = {"enabled": True, "interval": 2, "exploit_fraction": 0.5, "eval_episodes": 2,
                       "resample_probability": 0.0, "hyperparameters": {"training.learning_rate": [1e-5, 1e31]}}
    workflow = PPOWorkflow.build_from_config(tiny_cfg, recorders=[])
    state, _ = workflow.run_iterations(workflow.init(jax.random.PRNGKey(0)), 2)
    (record,) = workflow.last_pbt_records
    assert record["source"] == [0, 0]  # the frozen agent ranks worst (NaN fitness) and copies agent 0
    assert np.isfinite(record["fitness"][0]) and not np.isfinite(float(record["fitness"][1] or "nan"))
    assert workflow.alive_agents().tolist() == [True, True]  # the copy trains again
    assert np.asarray(state.learning_rate)[1] < 1e-2


def test_population_metrics_leave_out_only_the_returns_not_measured():
    from evorl.engine.population import aggregate_metrics

    per_agent = {"train/episode_return": np.array([1.0, np.nan]), "train/loss": np.array([0.5, np.nan])}
    out = aggregate_metrics(per_agent, [{}], 2, may_be_nan=("train/episode_return",))
    assert out["train/episode_return"] == 1.0 and np.isnan(out["train/loss"])
    frozen = aggregate_metrics(per_agent, [{}], 2, may_be_nan=("train/episode_return",), include=np.array([1, 0]) > 0)
    assert frozen["train/loss"] == 0.5 and frozen["train/episode_return/max"] == 1.0  # agent 1 left out


def test_run_folder_json_is_strict():
    text = dumps_json({"a": float("nan"), "b": [np.float32(np.inf), 1.5], "c": {"d": np.float64(-np.inf)}, "e": (1, 2)})
    assert strict_json(text) == {"a": None, "b": [None, 1.5], "c": {"d": None}, "e": [1, 2]}


@pytest.mark.slow  # a diverging run to a checkpoint
def test_evaluate_refuses_a_nonfinite_checkpoint(tiny_cfg, tmp_path, capsys):
    from evorl.app.scripts.evaluate import main

    tiny_cfg["training"]["num_iterations"] = 2
    run_experiment(tiny_cfg, output_dir=tmp_path)
    workflow, state, _ = load_run(tmp_path)
    params = jax.tree.map(lambda x: x * jnp.nan, state.agent_state.params)
    checkpointer = Checkpointer(checkpoint_dir(tmp_path), CheckpointConfig(max_to_keep=None), 1, 3,
                                resolved_config(workflow.config))
    # a checkpoint's state counts the iterations its step names
    poisoned = state.replace(agent_state=state.agent_state.replace(params=params), iteration=state.iteration + 1)
    checkpointer.save(poisoned, 3)
    checkpointer.close()
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path), "--episodes", "1"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evorl-eval: checkpoint 3 of ") and "has non-finite parameters (the agent)" in err
    assert "\n" not in err
    main([str(tmp_path), "--episodes", "1", "--checkpoint", "2"])  # the finite one still evaluates


@pytest.mark.slow
def test_diverging_run_through_the_cli_exits_3_with_one_line(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "EVORL_COMPILATION_CACHE": "0"}
    env.pop("HYDRA_FULL_ERROR", None)
    overrides = ["agent.actor_hidden_layer_sizes=[8]", "agent.critic_hidden_layer_sizes=[8]",
                 "training.rollout_length=16", "training.num_minibatches=2", "training.num_epochs=1",
                 "training.eval_episodes=2", "training.eval_interval=1", "training.num_iterations=3",
                 f"training.learning_rate={DIVERGING_LR}", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "train.py"), *overrides], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("evorl:")]
    assert len(errors) == 1 and errors[0].startswith("evorl: training diverged by iteration 1: the agent"), proc.stderr
    assert strict_json((run_dir / "run.json").read_text())["status"] == "failed"
    assert [p.name for p in checkpoint_dir(run_dir).iterdir()] == ["0"]  # the run's start: the last finite state


def test_the_freeze_restores_only_what_the_iteration_changed():
    """A leaf the (jitted) iteration passes through, such as the parameters of an off-policy
    warm-up iteration, stays out of the freeze's branch (``relink_forwarded``: read from the
    step's jaxpr), whose outputs XLA copies every iteration; the leaves it changed are restored
    for a diverged agent as before."""
    from evorl.engine.execution import POPULATION_AXIS, relink_forwarded
    from evorl.engine.health import freeze_diverged
    from evorl.rl.agent import AgentState
    from flax import struct

    @struct.dataclass
    class State:
        agent_state: AgentState
        opt_state: jax.Array
        lagged_params: None = None

    @jax.jit
    def step(state):  # the parameters pass through; the optimiser state moves (NaN for agent 1)
        return state.replace(opt_state=state.opt_state * jnp.array([2.0, jnp.nan])[state.agent_state.hparams]), {}

    def iteration(state, alive):
        new = step(state)[0]
        relinked = relink_forwarded(step, state, new)
        assert relinked.agent_state.params["w"] is state.agent_state.params["w"]  # passed through: the same value
        assert relinked.opt_state is not state.opt_state  # changed
        return freeze_diverged(state, relinked, {}, alive, fields=("agent_state", "opt_state", "lagged_params"),
                               axis_name=POPULATION_AXIS)

    population = State(AgentState(params={"w": jnp.ones((2, 64, 64))}, obs_stats=None, hparams=jnp.arange(2)),
                       opt_state=jnp.ones((2, 3)))
    alive = jnp.ones(2, bool)
    jaxpr = jax.make_jaxpr(jax.vmap(iteration, axis_name=POPULATION_AXIS))(population, alive)
    conds = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "cond"]
    assert len(conds) == 1 and sorted(v.aval.shape for v in conds[0].invars[1:]) == [(2,), (2, 3), (2, 3)]  # not w
    state, alive = jax.vmap(iteration, axis_name=POPULATION_AXIS)(population, alive)
    assert list(np.asarray(alive)) == [True, False]
    np.testing.assert_array_equal(state.opt_state, [[2.0] * 3, [1.0] * 3])  # agent 1 keeps its old value
    np.testing.assert_array_equal(state.agent_state.params["w"], population.agent_state.params["w"])
