"""ERL: the genetic operators against NumPy and by their statistics (tournaments, neuron-wise
crossover, ERL's mutation, elitism), the injected learner appears in the population, a short
run end to end (run folder, champion for load_policy), exact resume and config errors."""

import copy
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from test_cemrl import check_exact_resume, check_learns_pendulum

from evorl.algorithms.erl import crossover, ga_step, mutate, neuron_segments, tournament_select
from evorl.config import ConfigError
from evorl.app.experiment import run_experiment
from evorl.workflows import ERLWorkflow
from evorl.algorithms.erl import ERLConfig

TINY = {
    "workflow_cls": "evorl.workflows.ERLWorkflow",
    "seed": 2,
    "env": {"env_name": "Pendulum-v1", "env_type": "gymnax", "episode_length": 20},
    "agent": {"actor_hidden_layer_sizes": [8], "critic_hidden_layer_sizes": [8]},
    "erl": {"population_size": 4, "num_updates": 4, "batch_size": 8, "buffer_size": 400, "learning_starts": 100,
            "crossover_prob": 0.5, "sync_period": 2},
    "training": {"num_iterations": 4, "eval_interval": 2, "eval_episodes": 2},
    "checkpoint": {"save_interval": 2, "max_to_keep": None},
    "logging": {"recorders": [], "plot": False},
}


def test_neuron_segments_by_hand():
    """A 3 -> 2 -> 1 network: flax orders Dense_0's bias [2] before its kernel [3, 2] (row-major,
    the output column fastest), then Dense_1's; a neuron is a column with its bias."""
    params = {"params": {"Dense_0": {"bias": np.zeros(2), "kernel": np.zeros((3, 2))},
                         "Dense_1": {"bias": np.zeros(1), "kernel": np.zeros((2, 1))}}}
    assert ravel_pytree(params)[0].shape == (11,)
    np.testing.assert_array_equal(neuron_segments(params), [0, 1, 0, 1, 0, 1, 0, 1, 2, 2, 2])


def test_tournament_select_against_numpy():
    """Each winner is the fittest of its drawn indices (the same draws as NumPy's loop); a NaN
    fitness never wins a tournament that drew another actor."""
    fitness = jnp.asarray([3.0, np.nan, -1.0, 7.0, 0.5, 2.0])
    key = jax.random.PRNGKey(4)
    winners = np.asarray(tournament_select(key, fitness, 500, 3))
    drawn = np.asarray(jax.random.randint(key, (500, 3), 0, 6))
    f = np.where(np.isnan(np.asarray(fitness)), -np.inf, np.asarray(fitness))
    expected = [row[int(np.argmax(f[row]))] for row in drawn]
    np.testing.assert_array_equal(winners, expected)
    assert 1 not in winners[np.any(drawn != 1, axis=1)]
    # the best actor wins every tournament it enters: 1 - (5/6)^3 of them
    assert np.mean(winners == 3) == pytest.approx(1 - (5 / 6) ** 3, abs=0.05)


def test_crossover_takes_whole_neurons_and_complementary_children():
    segments = np.asarray([0, 1, 0, 1, 0, 1, 0, 1, 2, 2, 2])
    a, b = jnp.arange(11.0), -jnp.arange(1.0, 12.0)
    seen = set()
    for i in range(20):
        c, d = crossover(jax.random.PRNGKey(i), a, b, segments)
        from_a = np.asarray(c) == np.asarray(a)
        assert np.all(from_a | (np.asarray(c) == np.asarray(b)))
        np.testing.assert_array_equal(np.where(from_a, b, a), d)  # the other parent's, everywhere
        for s in range(3):  # a neuron comes whole from one parent
            assert len(set(from_a[segments == s])) == 1
        seen.add(tuple(from_a[[0, 1, 8]]))
    assert len(seen) > 4  # the neurons choose independently


def mutation_cfg(**overrides):
    base = dict(mutation_frac=0.1, mutation_strength=0.1, super_mutation_prob=0.05, super_mutation_strength=10.0,
                reset_prob=0.05, weight_clip=1e6)
    return types.SimpleNamespace(**{**base, **overrides})


def test_mutation_statistics():
    """On 200k weights of magnitude 2: about mutation_frac change; with no super-mutation and no
    reset the relative perturbation has std mutation_strength; with reset_prob 1 the chosen
    weights are N(0, 1); nothing changes with mutation_frac 0; the clip holds."""
    x = jnp.full((200_000,), 2.0)
    y = np.asarray(mutate(jax.random.PRNGKey(0), x, mutation_cfg()))
    assert np.mean(y != 2.0) == pytest.approx(0.1, abs=0.005)

    y = np.asarray(mutate(jax.random.PRNGKey(1), x, mutation_cfg(super_mutation_prob=0.0, reset_prob=0.0)))
    delta = (y[y != 2.0] - 2.0) / 2.0
    assert np.std(delta) == pytest.approx(0.1, rel=0.03) and abs(np.mean(delta)) < 0.003

    y = np.asarray(mutate(jax.random.PRNGKey(2), x, mutation_cfg(super_mutation_prob=0.0, reset_prob=1.0,
                                                                 mutation_frac=1.0)))
    assert np.mean(y) == pytest.approx(0.0, abs=0.01) and np.std(y) == pytest.approx(1.0, rel=0.02)

    y = np.asarray(mutate(jax.random.PRNGKey(3), x, mutation_cfg(super_mutation_prob=1.0, reset_prob=0.0)))
    delta = (y[y != 2.0] - 2.0) / 2.0
    assert np.std(delta) == pytest.approx(10.0, rel=0.03)

    assert np.array_equal(mutate(jax.random.PRNGKey(4), x, mutation_cfg(mutation_frac=0.0)), x)
    y = mutate(jax.random.PRNGKey(5), x, mutation_cfg(mutation_frac=1.0, super_mutation_prob=1.0, reset_prob=0.0,
                                                      weight_clip=3.0))
    assert float(jnp.max(jnp.abs(y))) <= 3.0


def test_ga_step_elites_selection_and_variation():
    """Elites first and unchanged, best first; without crossover and mutation every child is a
    copy of its tournament winner; with both, children are built from their parents."""
    population = jax.random.normal(jax.random.PRNGKey(0), (6, 11))
    fitness = jnp.asarray([1.0, 5.0, -2.0, np.nan, 4.0, 0.0])
    segments = np.asarray([0, 1, 0, 1, 0, 1, 0, 1, 2, 2, 2])
    cfg = ERLConfig(population_size=6, num_elites=2, crossover_prob=0.0, mutation_prob=0.0)
    new, parents = ga_step(jax.random.PRNGKey(1), population, fitness, segments, cfg)
    np.testing.assert_array_equal(parents[:2], [1, 4])
    np.testing.assert_array_equal(new, population[parents])
    np.testing.assert_array_equal(parents[2:], tournament_select(jax.random.split(jax.random.PRNGKey(1), 5)[0],
                                                                 fitness, 4, 3))

    cfg = ERLConfig(population_size=6, num_elites=2, crossover_prob=1.0, mutation_prob=0.0)
    new, parents = ga_step(jax.random.PRNGKey(1), population, fitness, segments, cfg)
    np.testing.assert_array_equal(new[:2], population[jnp.asarray([1, 4])])
    for row, (i, j) in zip((2, 4), ((2, 3), (4, 5))):  # each child pair: a neuron-wise mix of its parents
        pa, pb = np.asarray(population[parents[i]]), np.asarray(population[parents[j]])
        assert np.all((new[row] == pa) | (new[row] == pb)) and np.all((new[row + 1] == pa) | (new[row + 1] == pb))

    cfg = ERLConfig(population_size=6, num_elites=2, crossover_prob=0.0, mutation_prob=1.0, mutation_frac=1.0)
    new, _ = ga_step(jax.random.PRNGKey(1), population, fitness, segments, cfg)
    np.testing.assert_array_equal(new[:2], population[jnp.asarray([1, 4])])  # elites never mutate
    assert np.all(np.asarray(new[2:]) != np.asarray(population[parents[2:]]))


@pytest.mark.slow
def test_the_learner_is_injected_every_sync_period():
    """sync_period 2: after generation 1 (the learner trained on its 100 transitions) the
    population is the GA's alone; after generation 2 its last row is the trained learner, marked
    as descending from it."""
    workflow = ERLWorkflow.build_from_config(copy.deepcopy(TINY), recorders=[])
    state = workflow.init(jax.random.PRNGKey(0))
    state, metrics = workflow.run_iterations(state, 1)
    assert metrics["train/learning"] == 1.0 and metrics["train/learner_injected"] == 0.0
    assert not bool(np.any(state.from_learner))
    learner = ravel_pytree(state.learner_actor)[0]
    assert not np.any(np.all(np.asarray(state.search.population) == np.asarray(learner), axis=1))
    state, metrics = workflow.run_iterations(state, 1)
    assert metrics["train/learning"] == 1.0 and metrics["train/learner_injected"] == 1.0
    np.testing.assert_array_equal(state.search.population[-1], ravel_pytree(state.learner_actor)[0])
    assert state.from_learner.tolist() == [False, False, False, True]


@pytest.mark.slow
def test_deploy_champion_is_the_fittest_actor_that_played():
    """erl.deploy: champion: after one generation the agent's actor is the actor (of the initial
    population and the initial learner) with the best logged return."""
    cfg = copy.deepcopy(TINY)
    cfg["erl"]["deploy"] = "champion"
    workflow = ERLWorkflow.build_from_config(cfg, recorders=[])
    start = workflow.init(jax.random.PRNGKey(0))
    played = np.concatenate([np.asarray(start.search.population), np.asarray(ravel_pytree(start.learner_actor)[0])[None]])
    state, metrics = workflow.run_iterations(start, 1)
    deployed = np.asarray(ravel_pytree(state.agent_state.params["actor"])[0])
    row = int(np.flatnonzero(np.all(played == deployed, axis=1))[0])
    assert row == 4 if metrics["train/learner_return"] > metrics["train/best_actor_return"] else row < 4


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return run_experiment(copy.deepcopy(TINY), output_dir=tmp_path_factory.mktemp("erl_run"))


@pytest.mark.slow
def test_short_run_end_to_end(uninterrupted):
    """4 generations of 4 actors and the learner x 20 steps: the buffer holds all 400
    transitions, the learner learned from generation 1 on (100 transitions), and load_policy acts
    with the trained learner (erl.deploy: learner)."""
    import evorl

    state, metrics = uninterrupted.state, uninterrupted.workflow.last_metrics
    assert int(state.iteration) == 4 and int(state.buffer.size) == 4 * 5 * 20
    assert metrics["env_steps"] == 400 and np.isfinite(metrics["eval/episode_return"])
    assert metrics["train/learning"] == 1.0 and 1.0 <= metrics["train/learner_rank"] <= 5.0
    policy = evorl.load_policy(uninterrupted.run_dir)
    deployed = ravel_pytree(policy.agent_state.params["actor"])[0]
    np.testing.assert_array_equal(deployed, ravel_pytree(state.learner_actor)[0])
    assert np.asarray(policy(np.zeros(3))).shape == (1,)


@pytest.mark.slow  # a second tiny run and its resume
def test_interrupted_and_resumed_run_is_bit_identical(uninterrupted, tmp_path):
    check_exact_resume(TINY, uninterrupted, tmp_path)


@pytest.mark.parametrize("section, values, message", [
    ("erl", {"num_elites": 4}, "num_elites=4 must be in"),
    ("erl", {"mutation_prob": 1.5}, "mutation_prob must be in"),
    ("erl", {"buffer_size": 10, "learning_starts": 10}, "must hold one generation"),
    ("erl", {"cross_prob": 0.1}, "cross_prob"),
    ("erl", {"deploy": "best"}, "deploy must be"),
    ("training", {"num_envs": 4}, "does not apply to ERLWorkflow"),
    ("erl", {"batch_size": 401}, "erl.batch_size=401 exceeds erl.buffer_size=400"),
    ("erl", {"learning_starts": 401}, "erl.learning_starts=401 exceeds erl.buffer_size=400"),
    # the section's tau is the one used: an agent.tau would be ignored
    ("agent", {"tau": 0.5}, "'agent.tau' is not an agent key of ERL: set 'erl.tau'"),
])
def test_config_errors_name_the_key(section, values, message):
    cfg = copy.deepcopy(TINY)
    cfg[section] = {**cfg[section], **values}
    with pytest.raises(ConfigError, match=message):
        ERLWorkflow.build_from_config(cfg, recorders=[])


@pytest.mark.slow  # about 1.5 min on 2 cores (one compile, 5 seeds x 15 generations of 2200 env steps)
def test_erl_learns_pendulum():
    """configs/erl_pendulum.yaml (10 actors and the learner, 15 generations = 33k env steps, 2000
    TD3 steps per generation): the deployed learner's greedy return (10 episodes) after
    training, measured 2026-12-03 at load ~4 on 2 cores with init(PRNGKey(seed)): seeds 0, 1, 2
    end at -128, -154, -148 from -1237, -1287, -1258; held-out seeds 100-104: -152, -146, -193,
    -115, -170. At least 4 of seeds 0-4 must reach -400 and gain 400 over their initial actor."""
    check_learns_pendulum(ERLWorkflow, "erl_pendulum")
