"""Population-based training: the exploit/explore step against a NumPy reference, copies,
hyperparameters taking effect, config errors, exact resume and the lineage file."""

import copy
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import TINY
from test_checkpoint_resume import InterruptAt, Interrupted, assert_states_identical
from test_multi_device import run_two_devices

from evorl.config import ConfigError
from evorl.app.experiment import run_experiment
from evorl.app.recorders import read_jsonl
from evorl.workflows import PPOWorkflow
from evorl.engine.pbt import Evolving, evolving_hyperparameters
from evorl.rl.evolution import draw, exploit_explore

LR = Evolving("training.learning_rate", None, 1e-4, 1e-2, log_scale=True)
CLIP = Evolving("agent.clip_epsilon", "clip_epsilon", 0.05, 0.5, log_scale=False)
FACTORS = (0.8, 1.2)


def numpy_exploit_explore(fitness, values, draws, k, evolving, factors, p):
    """The PBT step written out agent by agent (the module docstring of evorl.engine.pbt)."""
    n = len(fitness)
    rank_key = lambda i: (-math.inf if math.isnan(fitness[i]) else fitness[i], i)  # noqa: E731
    order = sorted(range(n), key=rank_key)  # worst first; ties: lower index lower
    losers, winners = order[:k], order[n - k:]
    source = list(range(n))
    new = values.astype(np.float64).copy()
    for loser in losers:
        source[loser] = winners[min(int(draws["winner"][loser] * k), k - 1)]
        for j, e in enumerate(evolving):
            if draws["resample"][loser, j] < p:
                u = draws["value"][loser, j]
                v = (math.exp(math.log(e.low) + u * (math.log(e.high) - math.log(e.low))) if e.log_scale
                     else e.low + u * (e.high - e.low))
            else:
                v = values[source[loser], j] * factors[draws["factor"][loser, j]]
            new[loser, j] = min(max(v, e.low), e.high)
    return np.asarray(source), new


def test_exploit_explore_matches_numpy_reference():
    # 8 agents: a tie (agents 2 and 5), a NaN (agent 6: no episode ended, ranked worst)
    fitness = np.array([10.0, 50.0, 20.0, 90.0, 70.0, 20.0, np.nan, 80.0], np.float32)
    values = np.array([[1e-4, 0.1], [3e-4, 0.2], [1e-3, 0.3], [3e-3, 0.4],
                       [1e-2, 0.5], [2e-3, 0.05], [5e-4, 0.25], [9e-3, 0.45]], np.float32)
    for seed in range(20):
        draws = draw(jax.random.PRNGKey(seed), 8, 2, len(FACTORS))
        source, new = exploit_explore(jnp.asarray(fitness), jnp.asarray(values), draws, 3, (LR, CLIP), FACTORS, 0.3)
        ref_source, ref_new = numpy_exploit_explore(fitness, values, jax.tree.map(np.asarray, vars(draws)), 3,
                                                    (LR, CLIP), FACTORS, 0.3)
        np.testing.assert_array_equal(source, ref_source)
        np.testing.assert_allclose(new, ref_new, rtol=1e-6)
        # the 3 worst (6: NaN, 0, then 2 before 5 on the tie) copy one of the 3 best (3, 7, 4)
        assert {i for i in range(8) if source[i] != i} == {6, 0, 2}
        assert set(np.asarray(source)[[6, 0, 2]]) <= {3, 7, 4}
        np.testing.assert_array_equal(np.asarray(new)[[1, 3, 4, 5, 7]], values[[1, 3, 4, 5, 7]])


def test_explored_values_stay_in_bounds_and_learning_rates_resample_log_uniformly():
    values = jnp.tile(jnp.array([[1e-2, 0.5]], jnp.float32), (64, 1))  # at the upper bounds: x1.2 must clip
    fitness = jnp.arange(64.0)

    def step(key, p):
        return exploit_explore(fitness, values, draw(key, 64, 2, 2), 32, (LR, CLIP), FACTORS, p)[1]

    keys = jax.random.split(jax.random.PRNGKey(0), 200)
    perturbed = np.asarray(jax.vmap(lambda k: step(k, 0.0))(keys))[:, :32]  # [200, 32 replaced, 2]
    assert np.all(perturbed >= [1e-4, 0.05]) and np.all(perturbed <= [1e-2, 0.5])
    np.testing.assert_allclose(np.unique(perturbed[..., 1]), [0.4, 0.5])  # 0.5 x 0.8, or 0.5 x 1.2 clipped to 0.5
    resampled = np.asarray(jax.vmap(lambda k: step(k, 1.0))(keys))[:, :32].reshape(-1, 2)  # 6400 draws
    log_position = (np.log(resampled[:, 0]) - np.log(1e-4)) / (np.log(1e-2) - np.log(1e-4))
    # log-uniform: the position in log space is uniform (a uniform lr would put ~99% above 1e-3)
    assert abs(np.mean(log_position < 0.5) - 0.5) < 0.03 and abs(np.mean(log_position < 0.1) - 0.1) < 0.02
    clip_position = (resampled[:, 1] - 0.05) / 0.45
    assert abs(np.mean(clip_position < 0.5) - 0.5) < 0.03 and abs(np.mean(clip_position < 0.1) - 0.1) < 0.02


BASE = {
    "env": {"env_name": "CartPole-v1", "env_type": "gymnax"},
    "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8], "normalize_obs": True},
    "training": {"num_iterations": 6, "num_envs": 4, "rollout_length": 16, "num_minibatches": 2, "num_epochs": 1,
                 "eval_interval": 2, "eval_episodes": 2, "num_seeds": 2, "learning_rate": [1e-3, 3e-3]},
    "pbt": {"enabled": True, "interval": 2, "exploit_fraction": 0.5, "eval_episodes": 2,
            "hyperparameters": {"training.learning_rate": [1e-4, 1e-2], "agent.clip_epsilon": [0.05, 0.5]}},
}


def config(**pbt):
    cfg = copy.deepcopy(BASE)
    cfg["pbt"].update(pbt)
    return cfg


@pytest.fixture(scope="module")
def workflow():
    return PPOWorkflow.build_from_config(config(interval=1000), recorders=[])


@pytest.mark.slow  # ~46 s on 2 cores at load 8-10 (2026-12-03)
def test_copied_agents_equal_their_sources_and_their_learning_rate_takes_effect(workflow):
    state, _ = workflow.run_iterations(workflow.init(jax.random.PRNGKey(1)), 2)
    pbt = workflow.pbt
    fitness = jnp.array([3.0, 1.0, 4.0, 0.0])  # agents 3 and 1 are replaced, by copies of 2 and 0
    new, record = jax.jit(pbt.step)(state.replace(env_state=None), fitness)
    source = np.asarray(record["source"])
    assert sorted(source[[1, 3]]) == [0, 2] or set(source[[1, 3]]) <= {0, 2}
    np.testing.assert_array_equal(source[[0, 2]], [0, 2])
    for i in range(4):
        mine = lambda tree: jax.tree.map(lambda x: np.asarray(x[i]), tree)  # noqa: E731
        theirs = lambda tree: jax.tree.map(lambda x: np.asarray(x[source[i]]), tree)  # noqa: E731
        for field in ("params", "obs_stats"):
            assert_states_identical(mine(getattr(new.agent_state, field)), theirs(getattr(state.agent_state, field)))
        assert_states_identical(mine(new.opt_state), theirs(state.opt_state))
        assert_states_identical(mine(new.key), mine(state.key))  # its own PRNG stream and environments
    np.testing.assert_array_equal(np.asarray(pbt.values(new)), np.asarray(record["after"]))
    # the learning rate in the state drives the next update: 0 freezes agent 3's parameters
    lr = np.asarray(new.learning_rate).copy()
    lr[3] = 0.0
    before = jax.tree.map(np.asarray, new.agent_state.params)  # the call below donates the state's buffers
    after, _ = workflow.run_iterations(new.replace(env_state=state.env_state, learning_rate=jnp.asarray(lr)), 1)
    frac = 1.0 - 2 / 6  # linear annealing at iteration 2 of 6
    np.testing.assert_allclose(after.opt_state.hyperparams["learning_rate"], lr * frac, rtol=1e-6)
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: (~np.all(np.asarray(a) == b, axis=tuple(range(1, b.ndim)))),
                                         after.agent_state.params, before))  # per leaf: [4] agents moved
    assert not any(m[3] for m in moved) and all(m[i] for m in moved for i in (0, 1, 2))


@pytest.mark.slow  # ~36 s on 2 cores at load 8-10 (2026-12-03)
def test_pbt_with_an_interval_longer_than_the_run_equals_the_plain_population(workflow):
    plain_cfg = config()
    del plain_cfg["pbt"]
    plain = PPOWorkflow.build_from_config(plain_cfg, recorders=[])
    a, _ = plain.run_iterations(plain.init(jax.random.PRNGKey(2)), 3)
    b, _ = workflow.run_iterations(workflow.init(jax.random.PRNGKey(2)), 3)
    assert_states_identical(b.replace(fitness_episodes=None), a)
    assert workflow.last_pbt_records == []


@pytest.mark.slow
def test_impala_evolves_its_v_trace_hyperparameters():
    """Any hyperparameter that is data evolves, wherever the state holds it: IMPALA's
    ``vtrace_c_bar`` and ``training.gae_lambda`` (V-trace's lambda)."""
    from evorl.workflows import IMPALAWorkflow

    cfg = config(interval=1, exploit_fraction=0.25)
    cfg["training"]["eval_interval"] = 1
    cfg["workflow_cls"] = "evorl.workflows.IMPALAWorkflow"
    cfg["agent"] = {**BASE["agent"], "vtrace_rho_bar": 1.0, "vtrace_c_bar": 1.0}
    cfg["training"]["num_seeds"] = 4
    cfg["pbt"]["hyperparameters"] = {"agent.vtrace_c_bar": [0.5, 1.0], "training.gae_lambda": [0.8, 1.0]}
    w = IMPALAWorkflow.build_from_config(cfg, recorders=[])
    state, _ = w.run_iterations(w.init(jax.random.PRNGKey(0)), 2)
    assert [r["iteration"] for r in w.last_pbt_records] == [1, 2]
    after = w.last_pbt_records[-1]["new_hyperparameters"]
    np.testing.assert_allclose(state.agent_state.hparams.vtrace_c_bar, after["agent.vtrace_c_bar"], rtol=1e-6)
    np.testing.assert_allclose(state.agent_state.hparams.gae_lambda, after["training.gae_lambda"], rtol=1e-6)
    assert len(set(after["training.gae_lambda"])) > 1  # explored: no longer the initial 0.95 everywhere


@pytest.mark.parametrize("pbt, error", [
    ({"hyperparameters": {"training.num_envs": [2, 8]}},
     "'training.num_envs' cannot evolve: it shapes the compiled program.*can evolve: agent.clip_epsilon"),
    ({"hyperparameters": {"agent.actor_hidden_layer_sizes": [8, 16]}},
     "'agent.actor_hidden_layer_sizes' cannot evolve"),
    ({"hyperparameters": {"training.num_minibatches": [1, 4]}}, "'training.num_minibatches' cannot evolve"),
    ({"hyperparameters": {"agent.clip_epsilonn": [0.1, 0.2]}}, "Did you mean 'agent.clip_epsilon'"),
    ({"hyperparameters": {"agent.clip_epsilon": [-0.1, 0.2]}},
     "bound -0.1 is not a valid value: agent.clip_epsilon must be > 0"),
    ({"hyperparameters": {"agent.clip_epsilon": [0.3, 0.5]}}, "initial value agent.clip_epsilon=0.2 lies outside"),
    ({"hyperparameters": {"agent.target_kl": [0.01, 0.1]}}, "agent.target_kl is null"),
    ({"hyperparameters": {"training.learning_rate": [0, 0.1]}}, "log-uniformly, its bounds must be > 0"),
    ({"hyperparameters": {"agent.ent_coef": [0.1]}}, "must be \\[low, high\\]"),
    ({"exploit_fraction": 0.2}, "replaces no agent"),
    ({"exploit_fraction": 0.7}, "exploit_fraction must be in \\(0, 0.5\\]"),
    ({"fitness": "best"}, "pbt.fitness must be one of eval, train"),
    ({"intervall": 3}, "Did you mean 'pbt.interval'"),
    ({"hyperparameters": {}}, "pbt.enabled=true but pbt.hyperparameters is empty"),
    ({"interval": 3}, "pbt.interval=3 must be a multiple of training.eval_interval=2 with pbt.fitness=eval"),
    ({"hyperparameters": {"agent.ent_coef": [np.float32(0.1), "0.5"]}}, "must be \\[low, high\\], two finite numbers"),
])
def test_bad_pbt_configs_are_refused_naming_the_key(pbt, error):
    cfg = config(**pbt)
    if "hyperparameters" in pbt:
        cfg["pbt"]["hyperparameters"] = pbt["hyperparameters"]
    with pytest.raises(ConfigError, match=error):
        PPOWorkflow.build_from_config(cfg, recorders=[])


def test_numpy_bounds_are_the_numbers_they_hold():
    """NumPy scalars (and a NumPy array) as bounds are accepted as the Python numbers they hold."""
    cfg = config()
    cfg["pbt"]["hyperparameters"] = {"training.learning_rate": [np.float32(1e-4), np.float64(1e-2)],
                                     "agent.clip_epsilon": [np.float32(0.05), np.int64(1)],
                                     "training.gamma": np.array([0.9, 0.999])}
    parsed = PPOWorkflow.parse_config(cfg)
    bounds = parsed.pbt.hyperparameters
    assert all(type(b) in (int, float) for pair in bounds.values() for b in pair), bounds
    assert bounds["agent.clip_epsilon"] == [float(np.float32(0.05)), 1] and bounds["training.gamma"] == [0.9, 0.999]
    evolving = {e.key: e for e in evolving_hyperparameters(parsed, PPOWorkflow)}
    assert evolving["training.learning_rate"].low == float(np.float32(1e-4))
    assert evolving["agent.clip_epsilon"].high == 1.0


def test_pbt_needs_the_population_layout_on_several_devices():
    with pytest.raises(ConfigError, match="needs distributed.layout=population"):
        PPOWorkflow.check_config(PPOWorkflow.parse_config(config()), None, num_devices=2)


@pytest.mark.slow  # ~22 s on 2 cores at load 8-10 (2026-12-03)
def test_train_fitness_is_the_return_of_the_episodes_since_the_last_step():
    cfg = config(fitness="train", interval=3)
    cfg["training"]["rollout_length"] = 64  # CartPole episodes end within 3 iterations
    w = PPOWorkflow.build_from_config(cfg, recorders=[])
    state, _ = w.run_iterations(w.init(jax.random.PRNGKey(0)), 3)
    [record] = w.last_pbt_records
    np.testing.assert_allclose(record["fitness"], w.last_metrics_per_agent["train/episode_return"], rtol=1e-5)
    assert np.all(np.asarray(state.fitness_episodes.count) == 0)  # the sums start again after the step
    state, _ = w.run_iterations(state, 4)  # cut at iteration 6: calls of 3 and 1 iterations
    assert [r["iteration"] for r in w.last_pbt_records] == [6]
    assert w.executor._chunk._cache_size() == 1  # one program for every chunk length


PBT_TINY = {**TINY, "training": {**TINY["training"], "num_seeds": 4, "learning_rate": 1e-3},
            "pbt": {"enabled": True, "interval": 2, "exploit_fraction": 0.25, "eval_episodes": 2,
                    "hyperparameters": {"training.learning_rate": [1e-4, 1e-2], "agent.ent_coef": [0.0, 0.05]}}}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run_experiment({**PBT_TINY, "logging": {"recorders": [], "plot": True}},
                          output_dir=tmp_path_factory.mktemp("pbt"))


def lineage(run_dir):
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in read_jsonl(run_dir / "pbt_lineage.jsonl")]


@pytest.mark.slow
def test_lineage_file_and_plot(uninterrupted):
    records = lineage(uninterrupted.run_dir)
    assert [r["iteration"] for r in records] == [2, 4, 6]
    assert [r["step"] for r in records] == [2 * 64, 4 * 64, 6 * 64]
    for r in records:
        assert len(r["fitness"]) == 4 and all(f is not None for f in r["fitness"])
        assert r["copied"] == [{"agent": i, "from": s} for i, s in enumerate(r["source"]) if s != i]
        assert len(r["copied"]) == 1  # 4 agents x 0.25
        loser = r["copied"][0]["agent"]
        assert r["fitness"][loser] == min(r["fitness"])
        for key, (low, high) in PBT_TINY["pbt"]["hyperparameters"].items():
            new = r["new_hyperparameters"][key]
            assert all(low <= v <= high for v in new)
            assert [v for i, v in enumerate(new) if i != loser] == [v for i, v in enumerate(r["hyperparameters"][key])
                                                                   if i != loser]
    for before, after in zip(records, records[1:]):  # what a step leaves is what the next step starts from
        assert after["hyperparameters"] == before["new_hyperparameters"]
    final_lr = np.asarray(uninterrupted.state.learning_rate)
    np.testing.assert_allclose(final_lr, records[-1]["new_hyperparameters"]["training.learning_rate"], rtol=1e-6)
    assert (uninterrupted.run_dir / "pbt.png").stat().st_size > 10_000
    assert json.loads((uninterrupted.run_dir / "run.json").read_text())["status"] == "finished"


@pytest.mark.slow
def test_interrupted_and_resumed_pbt_run_is_bit_identical(uninterrupted, tmp_path):
    cfg = copy.deepcopy(PBT_TINY)
    with pytest.raises(Interrupted):
        run_experiment(cfg, output_dir=tmp_path, recorders=[InterruptAt(3)])
    assert [r["iteration"] for r in lineage(tmp_path)] == [2]  # written as the step's chunk returned
    resumed = run_experiment({**cfg, "resume": str(tmp_path)})
    assert_states_identical(resumed.state, uninterrupted.state)
    assert lineage(tmp_path) == lineage(uninterrupted.run_dir)  # none lost, none repeated


@pytest.mark.slow
def test_pbt_population_on_two_devices_equals_one_device():
    cfg = config()
    cfg["distributed"] = {"layout": "population"}
    result = run_two_devices("evorl.workflows.PPOWorkflow", cfg, iterations=6)
    assert result["partition"].strip("P()").rstrip(",").replace('"', "'") in ("'devices'", "''devices''")
    assert result["learning_rates"][0] == pytest.approx(result["learning_rates"][1], rel=1e-6)
    assert result["learning_rates"][0] != [1e-3, 1e-3, 3e-3, 3e-3]  # the PBT steps changed them
    assert result["max_param_diff"] <= 1e-5 * max(1.0, result["param_scale"]), result


@pytest.mark.slow
def test_pbt_over_two_processes_equals_one_process(tmp_path):
    """``jax.distributed`` with 2 processes of 1 CPU device each, agents split over them
    (``layout=population``): the PBT steps gather the population across the processes."""
    from test_multi_host import CFG, free_port, start

    cfg = {**CFG, "training": {**CFG["training"], "num_seeds": 2, "learning_rate": [1e-3, 3e-3], "eval_interval": 2},
           "pbt": {**BASE["pbt"], "interval": 2}, "distributed": {"layout": "population"}}
    port = free_port()
    procs = [start({**cfg, "distributed": {"layout": "population", "coordinator_address": f"127.0.0.1:{port}",
                                           "num_processes": 2, "process_id": i}}, tmp_path / f"p{i}.npz", 4)
             for i in range(2)]
    single = start(cfg, tmp_path / "single.npz", 4)
    outputs = [p.communicate(timeout=600)[0] for p in procs + [single]]
    for p, out in zip(procs + [single], outputs):
        assert p.returncode == 0, out[-4000:]
    assert "process 0 of 2: 2 devices" in outputs[0], outputs[0]
    results = [np.load(tmp_path / f"{name}.npz") for name in ("p0", "p1", "single")]
    for key in results[0].files:
        np.testing.assert_array_equal(results[0][key], results[1][key])  # the whole population in both
        np.testing.assert_allclose(results[0][key], results[2][key], rtol=1e-5, atol=1e-6)


def test_nested_hyperparameter_keys_are_the_dotted_ones():
    """``pbt.hyperparameters.agent.clip_epsilon=[..]`` on the command line nests the key."""
    from evorl.engine.pbt import PBTConfig

    nested = PBTConfig(hyperparameters={"agent": {"clip_epsilon": [0.1, 0.3]}, "training.gamma": [0.9, 0.999]})
    assert nested.hyperparameters == {"agent.clip_epsilon": [0.1, 0.3], "training.gamma": [0.9, 0.999]}


@pytest.mark.slow
def test_pbt_learns_cartpole_from_learning_rates_that_fail_alone():
    """8 PPO agents with learning rates 1e-6..8e-6 (CartPole is not learnt in 50 iterations at
    these): with PBT the population finds good learning rates and its median greedy return
    reaches 400; held fixed, it stays below 250."""
    cfg = {"env": BASE["env"], "seed": 0,
           "agent": {"actor_hidden_layer_sizes": [64, 64], "critic_hidden_layer_sizes": [64, 64],
                     "normalize_obs": True},
           "training": {"num_iterations": 50, "num_envs": 8, "rollout_length": 128, "num_minibatches": 8,
                        "anneal_lr": False, "learning_rate": [1e-6, 2e-6, 4e-6, 8e-6], "num_seeds": 2,
                        "eval_interval": 5, "eval_episodes": 16},
           "pbt": {"enabled": True, "interval": 5, "eval_episodes": 8, "exploit_fraction": 0.25,
                   "perturb_factors": [0.5, 2.0], "resample_probability": 0.5,
                   "hyperparameters": {"training.learning_rate": [1e-6, 1e-2]}}}
    medians = {}
    for enabled in (True, False):
        w = PPOWorkflow.build_from_config({**cfg, "pbt": {**cfg["pbt"], "enabled": enabled}}, recorders=[])
        w.learn(w.init(jax.random.PRNGKey(0)))
        medians[enabled] = float(np.median(w.last_metrics_per_agent["eval/episode_return"]))
    print(f"median greedy return: PBT {medians[True]:.1f}, fixed {medians[False]:.1f}")
    assert medians[True] >= 400 and medians[False] < 250, medians
