"""PBT with a competitive swarm (``pbt.strategy: cso``): the swarm step against a NumPy loop,
odd populations, the step on the training state, config errors and exact resume."""

import copy
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY
from test_checkpoint_resume import InterruptAt, Interrupted, assert_states_identical

from evorl.app.experiment import run_experiment
from evorl.app.recorders import read_jsonl
from evorl.config import ConfigError
from evorl.rl.evolution import cso_draw, cso_step
from evorl.workflows import PPOWorkflow

LOW, HIGH = np.array([-2.0, 0.0], np.float32), np.array([3.0, 0.5], np.float32)


def numpy_cso_step(fitness, x, v, draws, low, high, phi):
    """The swarm step written out pair by pair (the docstring of evorl.rl.evolution.cso_step)."""
    n = len(fitness)
    score = [f if math.isfinite(f) else -math.inf for f in fitness]
    perm = draws["pairing"]
    mean = x.astype(np.float64).mean(axis=0)
    source, new_x, new_v = list(range(n)), x.astype(np.float64).copy(), v.astype(np.float64).copy()
    for j in range(n // 2):
        a, b = int(perm[j]), int(perm[j + n // 2])
        a_wins = score[a] > score[b] or (score[a] == score[b] and a > b)  # a tie: the higher index wins
        w, loser = (a, b) if a_wins else (b, a)
        for d in range(x.shape[1]):
            vel = (draws["r1"][j, d] * v[loser, d] + draws["r2"][j, d] * (x[w, d] - x[loser, d])
                   + phi * draws["r3"][j, d] * (mean[d] - x[loser, d]))
            new_v[loser, d] = vel
            new_x[loser, d] = min(max(x[loser, d] + vel, low[d]), high[d])
        source[loser] = w
    return np.asarray(source), new_x, new_v


@pytest.mark.parametrize("n", [8, 7])
@pytest.mark.parametrize("phi", [0.0, 0.3])
def test_cso_step_matches_numpy_reference(n, phi):
    # a tie (agents 2 and 5), a NaN and a -inf (6 and 0: diverged, ranked last, tied with each other)
    fitness = np.array([-np.inf, 50.0, 20.0, 90.0, 70.0, 20.0, np.nan, 80.0], np.float32)[:n]
    rng = np.random.default_rng(0)
    x = rng.uniform(LOW, HIGH, (n, 2)).astype(np.float32)
    v = rng.normal(0, 0.5, (n, 2)).astype(np.float32)
    for seed in range(20):
        draws = cso_draw(jax.random.PRNGKey(seed), n, 2)
        source, new_x, new_v = cso_step(jnp.asarray(fitness), jnp.asarray(x), jnp.asarray(v), draws, LOW, HIGH, phi)
        ref_source, ref_x, ref_v = numpy_cso_step(fitness, x, v, jax.tree.map(np.asarray, vars(draws)), LOW, HIGH, phi)
        np.testing.assert_array_equal(source, ref_source)
        np.testing.assert_allclose(new_x, ref_x, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(new_v, ref_v, rtol=1e-5, atol=1e-6)
        losers = np.flatnonzero(np.asarray(source) != np.arange(n))
        assert len(losers) == n // 2  # one loser per pair; with n odd one member sits out
        kept = np.setdiff1d(np.arange(n), losers)
        np.testing.assert_array_equal(np.asarray(new_x)[kept], x[kept])  # winners (and the odd one) unchanged
        np.testing.assert_array_equal(np.asarray(new_v)[kept], v[kept])
        assert np.all(np.asarray(new_x) >= LOW) and np.all(np.asarray(new_x) <= HIGH)
        if n % 2:
            assert int(draws.pairing[-1]) in kept
        assert 3 not in losers  # the best member wins every pair


def test_a_non_finite_fitness_loses_to_any_finite_one():
    fitness = jnp.array([jnp.nan, -1e30, jnp.inf, -jnp.inf])  # only member 1 is finite
    x, v = jnp.zeros((4, 1)), jnp.zeros((4, 1))
    for seed in range(10):
        draws = cso_draw(jax.random.PRNGKey(seed), 4, 1)
        pairing = np.asarray(draws.pairing).reshape(2, 2)  # pairs: the columns
        partner = int(pairing[1 - np.argwhere(pairing == 1)[0][0], np.argwhere(pairing == 1)[0][1]])
        source = np.asarray(cso_step(fitness, x, v, draws, -1.0, 1.0, 0.0)[0])
        assert source[1] == 1 and source[partner] == 1  # -1e30 beats NaN, +inf and -inf alike


def cso_config(**pbt):
    """4 agents: 2 learning rates x 2 entropy coefficients (the swarm moves only between values the agents have)."""
    return {**TINY, "agent": {**TINY["agent"], "ent_coef": [0.0, 0.02]},
            "training": {**TINY["training"], "learning_rate": [1e-3, 3e-3], "eval_interval": 2},
            "pbt": {"enabled": True, "strategy": "cso", "interval": 2, "eval_episodes": 2,
                    "hyperparameters": {"training.learning_rate": [1e-4, 1e-2], "agent.ent_coef": [0.0, 0.05]},
                    **pbt}}


@pytest.mark.slow
def test_cso_step_on_the_training_state_copies_winners_and_moves_losers():
    w = PPOWorkflow.build_from_config(cso_config(interval=1000), recorders=[])
    state = w.init(jax.random.PRNGKey(1))  # one seed: the 4 agents start from the same parameters
    state = state.replace(agent_state=state.agent_state.replace(params=jax.tree.map(  # tell them apart
        lambda x: x + jnp.arange(4.0).reshape((4,) + (1,) * (x.ndim - 1)), state.agent_state.params)))
    np.testing.assert_array_equal(state.pbt_velocity, np.zeros((4, 2), np.float32))
    fitness = jnp.array([3.0, 1.0, 4.0, 0.0])
    new, record = jax.jit(w.pbt.step)(state.replace(env_state=None), fitness)
    source, before, after = (np.asarray(record[k]) for k in ("source", "before", "after"))
    losers = np.flatnonzero(source != np.arange(4))
    assert len(losers) == 2 and all(fitness[i] < fitness[source[i]] for i in losers)
    for i in range(4):
        mine = lambda tree: jax.tree.map(lambda x: np.asarray(x[i]), tree)  # noqa: E731
        theirs = lambda tree: jax.tree.map(lambda x: np.asarray(x[source[i]]), tree)  # noqa: E731
        assert_states_identical(mine(new.agent_state.params), theirs(state.agent_state.params))
        assert_states_identical(mine(new.opt_state), theirs(state.opt_state))
    # a loser moves by its velocity, the learning rate's in log space, from its own values
    v = np.asarray(new.pbt_velocity)
    y_before = np.stack([np.log(before[:, 0]), before[:, 1]], 1)
    y_after = np.clip(y_before + v, [np.log(1e-4), 0.0], [np.log(1e-2), 0.05])
    np.testing.assert_allclose(np.log(after[losers, 0]), y_after[losers, 0], rtol=1e-5)
    np.testing.assert_allclose(after[losers, 1], y_after[losers, 1], atol=1e-7)
    winners = np.setdiff1d(np.arange(4), losers)
    np.testing.assert_array_equal(after[winners], before[winners])  # bit for bit: no exp(log h) round trip
    np.testing.assert_array_equal(v[winners], 0.0)
    np.testing.assert_array_equal(np.asarray(w.pbt.values(new)), after)


def test_truncation_keeps_no_velocity():
    cfg = cso_config(strategy="truncation", exploit_fraction=0.25)
    w = PPOWorkflow.build_from_config(cfg, recorders=[])
    assert w.init(jax.random.PRNGKey(0)).pbt_velocity is None  # the default's state is the one it always was


@pytest.mark.parametrize("pbt, error", [
    ({"strategy": "swarm"}, "pbt.strategy must be one of truncation, cso; got 'swarm'"),
    ({"cso_phi": -0.1}, "pbt.cso_phi must be a finite number >= 0, got -0.1"),
    ({"strategy": "truncation", "cso_phi": 0.1}, "pbt.cso_phi=0.1 applies to pbt.strategy=cso, not truncation"),
    ({"exploit_fraction": 0.5}, "pbt.exploit_fraction=0.5 applies to pbt.strategy=truncation"),
    ({"perturb_factors": [0.5, 2.0]}, "pbt.perturb_factors=\\(0.5, 2.0\\) applies to pbt.strategy=truncation"),
    ({"resample_probability": 0.0}, "pbt.resample_probability=0.0 applies to pbt.strategy=truncation"),
])
def test_bad_cso_configs_are_refused_naming_the_key(pbt, error):
    with pytest.raises(ConfigError, match=error):
        PPOWorkflow.build_from_config(cso_config(**pbt), recorders=[])


def test_cso_needs_two_agents():
    cfg = cso_config()
    cfg["agent"] = TINY["agent"]
    cfg["training"] = {**cfg["training"], "learning_rate": 1e-3}
    cfg["pbt"]["hyperparameters"] = {"training.learning_rate": [1e-4, 1e-2]}
    with pytest.raises(ConfigError, match="pbt.strategy=cso pairs the agents, and 1 agent .* has no partner"):
        PPOWorkflow.build_from_config(cfg, recorders=[])


def test_cso_refuses_a_hyperparameter_every_agent_starts_at():
    cfg = cso_config()
    cfg["agent"] = TINY["agent"]  # ent_coef: the default 0.01 in all 4 agents (4 seeds)
    cfg["training"] = {**cfg["training"], "num_seeds": 2}
    with pytest.raises(ConfigError, match="pbt.hyperparameters.agent.ent_coef: every agent starts with "
                                          "agent.ent_coef=0.01, and pbt.strategy=cso .* would never change"):
        PPOWorkflow.build_from_config(cfg, recorders=[])


def lineage(run_dir):
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in read_jsonl(run_dir / "pbt_lineage.jsonl")]


@pytest.mark.slow
def test_interrupted_and_resumed_cso_run_is_bit_identical(tmp_path):
    """The velocity is in the checkpointed state: a resumed run takes the same swarm steps."""
    cfg = cso_config()
    cfg["training"].update(eval_interval=1, num_iterations=4)  # a logged iteration 3 to interrupt at
    whole = run_experiment(copy.deepcopy(cfg), output_dir=tmp_path / "whole")
    velocity = np.asarray(whole.state.pbt_velocity)
    assert np.any(velocity != 0)
    with pytest.raises(Interrupted):
        run_experiment(copy.deepcopy(cfg), output_dir=tmp_path / "cut", recorders=[InterruptAt(3)])
    resumed = run_experiment({**copy.deepcopy(cfg), "resume": str(tmp_path / "cut")})
    assert_states_identical(resumed.state, whole.state)
    assert lineage(tmp_path / "cut") == lineage(tmp_path / "whole")
    assert [len(r["copied"]) for r in lineage(tmp_path / "whole")] == [2, 2]  # half the agents each step


@pytest.mark.slow
def test_cso_population_on_two_devices_equals_one_device():
    """The velocities travel with their agents: gathered for the step, each device's rows back."""
    from test_multi_device import run_two_devices

    cfg = copy.deepcopy(cso_config())
    cfg["training"].update(num_envs=4, num_minibatches=2)
    cfg["distributed"] = {"layout": "population"}
    result = run_two_devices("evorl.workflows.PPOWorkflow", cfg, iterations=4)
    assert result["learning_rates"][0] == pytest.approx(result["learning_rates"][1], rel=1e-6)
    assert sorted(result["learning_rates"][0]) != [1e-3, 1e-3, 3e-3, 3e-3]  # the swarm steps moved them
    assert result["max_param_diff"] <= 1e-5 * max(1.0, result["param_scale"]), result
