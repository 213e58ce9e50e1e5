"""NSGA-II: non-dominated sorting and crowding distance against plain-Python references on
random points (ties, duplicates, non-finite rows), the 2-D hypervolume by hand, tournament and
selection; bad-input errors; env reward terms; exact resume and a short learning check."""

import copy
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.config import ConfigError
from evorl.rl.multi_objective import (
    binary_tournament, crowding_distance, environmental_selection, hypervolume_2d, non_dominated_ranks,
)

HALFCHEETAH = {"env_name": "halfcheetah", "env_type": "brax", "backend": "spring", "episode_length": 10}
TINY_NSGA2 = {
    "workflow_cls": "evorl.workflows.NSGA2Workflow",
    "seed": 1,
    "env": HALFCHEETAH,
    "agent": {"actor_hidden_layer_sizes": [8]},
    "nsga2": {"objectives": ["reward_run", "reward_ctrl"], "reference_point": [-10.0, -10.0], "population_size": 8,
              "sigma": 0.05, "crossover_prob": 0.5},
    "training": {"num_iterations": 6, "eval_interval": 1, "eval_episodes": 2},
    "checkpoint": {"save_interval": 2, "max_to_keep": None},
    "logging": {"recorders": [], "plot": True},
}


# --- plain-Python references --------------------------------------------------------------
def py_dominates(a, b):
    return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))


def py_ranks(points):
    """O(N^2) per front: peel the members no remaining member dominates; non-finite rows last."""
    pts = [p if all(math.isfinite(v) for v in p) else [-math.inf] * len(p) for p in points]
    ranks, remaining, rank = [None] * len(pts), set(range(len(pts))), 0
    while remaining:
        front = {i for i in remaining if not any(py_dominates(pts[j], pts[i]) for j in remaining)}
        for i in front:
            ranks[i] = rank
        remaining -= front
        rank += 1
    return ranks


def py_crowding(points, ranks):
    """Deb's crowding distance per front; members equal in an objective keep index order."""
    dist = [0.0] * len(points)
    for r in set(ranks):
        members = [i for i in range(len(points)) if ranks[i] == r]
        for m in range(len(points[0])):
            order = sorted(members, key=lambda i: (points[i][m], i))
            lo, hi = points[order[0]][m], points[order[-1]][m]
            for pos, i in enumerate(order):
                if pos in (0, len(order) - 1):
                    dist[i] = math.inf
                elif hi > lo and math.isfinite(hi - lo):
                    gap = (points[order[pos + 1]][m] - points[order[pos - 1]][m]) / (hi - lo)
                    dist[i] += gap if math.isfinite(gap) else 0.0
    return dist


def random_points(seed, num=40, num_obj=2):
    rng = np.random.default_rng(seed)
    pts = rng.integers(0, 6, size=(num, num_obj)).astype(np.float32)  # small integers: many ties and duplicates
    pts[rng.choice(num, 3, replace=False), rng.integers(0, num_obj)] = [np.nan, np.inf, -np.inf]
    return pts


@pytest.mark.parametrize("seed,num_obj", [(0, 2), (1, 2), (2, 3)])
def test_ranks_and_crowding_equal_plain_python(seed, num_obj):
    pts = random_points(seed, num_obj=num_obj)
    ranks = np.asarray(non_dominated_ranks(jnp.asarray(pts)))
    expected = py_ranks(pts.tolist())
    np.testing.assert_array_equal(ranks, expected)
    sanitized = [p if all(math.isfinite(v) for v in p) else [-math.inf] * num_obj for p in pts.tolist()]
    np.testing.assert_allclose(np.asarray(crowding_distance(jnp.asarray(pts), jnp.asarray(ranks))),
                               py_crowding(sanitized, expected), rtol=1e-6)


def test_non_finite_objectives_rank_last_and_never_on_the_front():
    pts = jnp.asarray([[1.0, 2.0], [np.nan, 100.0], [100.0, np.inf], [0.0, 0.0], [-5.0, -5.0]])
    ranks = np.asarray(non_dominated_ranks(pts))
    assert ranks[0] == 0 and ranks[1] == ranks[2] > ranks[4] > ranks[3]
    assert list(np.asarray(environmental_selection(pts, 3))) == [0, 3, 4]


def test_hypervolume_2d_by_hand():
    ref = jnp.asarray([0.0, 0.0])
    # the union of [0,3]x[0,1], [0,2]x[0,2], [0,1]x[0,3]: 3 + 2 + 1 = 6; a dominated point, a
    # duplicate, a point below the reference and a NaN add nothing
    pts = jnp.asarray([[3.0, 1.0], [1.0, 3.0], [2.0, 2.0], [1.0, 1.0], [2.0, 2.0], [-1.0, 5.0], [np.nan, 9.0]])
    assert float(hypervolume_2d(pts, ref)) == pytest.approx(6.0)
    assert float(hypervolume_2d(jnp.asarray([[1.0, 4.0]]), jnp.asarray([-1.0, 2.0]))) == pytest.approx(4.0)
    assert float(hypervolume_2d(jnp.asarray([[-1.0, -1.0]]), ref)) == 0.0


def test_tournament_prefers_lower_rank_then_larger_crowding():
    ranks = jnp.asarray([0, 1, 0, 2])
    distance = jnp.asarray([1.0, np.inf, 3.0, 0.0])
    picks = np.asarray(binary_tournament(jax.random.PRNGKey(0), ranks, distance, 4000))
    drawn = np.asarray(jax.random.randint(jax.random.PRNGKey(0), (4000, 2), 0, 4))
    better = lambda a, b: b if (ranks[b], -distance[b]) < (ranks[a], -distance[a]) else a  # noqa: E731
    np.testing.assert_array_equal(picks, [better(a, b) for a, b in drawn])


def test_selection_keeps_whole_fronts_then_the_least_crowded():
    pts = jnp.asarray([[0.0, 4.0], [1.0, 3.0], [1.5, 2.5], [3.0, 1.0], [4.0, 0.0], [0.0, 0.0]])
    kept = set(np.asarray(environmental_selection(pts, 4)).tolist())
    # crowding: 1: 0.375 + 0.375, 2: 0.5 + 0.5, 3: 0.625 + 0.625; the ends inf
    assert kept == {0, 4, 3, 2}


# --- config and env errors ----------------------------------------------------------------
@pytest.mark.parametrize("nsga2,message", [
    ({"objectives": ["reward_run"], "reference_point": [0.0]}, "at least 2 reward terms"),
    ({"objectives": ["reward_run", "reward_ctrl"], "reference_point": [0.0]}, "needs one per objective"),
    ({"objectives": ["reward_run", "reward_fly"], "reference_point": [0.0, 0.0]}, "reward_fly not among"),
])
def test_bad_nsga2_input_is_one_clear_error(nsga2, message):
    from evorl.workflows import NSGA2Workflow

    with pytest.raises(ConfigError, match=message):
        NSGA2Workflow.build_from_config({**TINY_NSGA2, "nsga2": nsga2}, recorders=[])


def test_env_without_reward_terms_is_refused():
    from evorl.workflows import NSGA2Workflow

    cfg = {**TINY_NSGA2, "env": {"env_name": "CartPole-v1", "env_type": "gymnax"}}
    with pytest.raises(ConfigError, match="declares no reward terms"):
        NSGA2Workflow.build_from_config(cfg, recorders=[])


@pytest.mark.slow
def test_brax_reward_terms_sum_to_the_reward():
    from evorl.envs.brax_env import BraxEnv

    env = BraxEnv("halfcheetah", num_envs=2, episode_length=5, backend="spring")
    assert env.reward_terms == ("reward_ctrl", "reward_run")
    state = env.reset(jax.random.PRNGKey(0))
    state, terms = env.step_with_terms(state, jnp.full((2,) + env.action_space.shape, 0.3))
    np.testing.assert_allclose(np.sum(terms, axis=1), state.reward, rtol=1e-5, atol=1e-6)


# --- runs ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    from evorl.app.experiment import run_experiment

    return run_experiment(copy.deepcopy(TINY_NSGA2), output_dir=tmp_path_factory.mktemp("nsga2_run"))


@pytest.mark.slow
def test_interrupted_and_resumed_nsga2_run_is_bit_identical(uninterrupted, tmp_path):
    from test_checkpoint_resume import InterruptAt, Interrupted, assert_states_identical

    from evorl.app.experiment import run_experiment
    from evorl.app.run_folder import read_jsonl

    with pytest.raises(Interrupted):
        run_experiment(copy.deepcopy(TINY_NSGA2), output_dir=tmp_path, recorders=[InterruptAt(3)])
    resumed = run_experiment({**copy.deepcopy(TINY_NSGA2), "resume": str(tmp_path)})
    assert int(resumed.state.iteration) == 6
    assert_states_identical(resumed.state, uninterrupted.state)
    assert resumed.final_metrics == uninterrupted.final_metrics
    fronts = [r["front"] for r in read_jsonl(tmp_path / "pareto_front.jsonl")]
    assert fronts == [r["front"] for r in read_jsonl(uninterrupted.run_dir / "pareto_front.jsonl")]
    assert len(fronts) == 6 and (uninterrupted.run_dir / "pareto.png").is_file()


@pytest.mark.slow
def test_hypervolume_grows_over_a_short_run(tmp_path):
    from evorl.app.experiment import run_experiment
    from evorl.app.run_folder import read_jsonl

    cfg = copy.deepcopy(TINY_NSGA2)
    cfg.update(seed=3, env={**HALFCHEETAH, "episode_length": 50},
               training={"num_iterations": 15, "eval_interval": 1, "eval_episodes": 1},
               checkpoint={"enabled": False}, logging={"recorders": [], "plot": False})
    cfg["nsga2"] = {**cfg["nsga2"], "population_size": 16, "reference_point": [-50.0, -50.0]}
    run = run_experiment(cfg, output_dir=tmp_path)
    hv = [r["train/hypervolume"] for r in read_jsonl(run.run_dir / "metrics.jsonl")]
    assert hv[-1] > 1.1 * hv[0]  # the front moves out over 15 generations
