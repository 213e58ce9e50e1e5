"""NSGA-II: non-dominated sorting and crowding distance against plain-Python references on
random points (ties, duplicates, non-finite rows), the 2-D hypervolume by hand, tournament and
selection; survivors re-scored (the running mean against a plain mean, a lucky score on a
noisy toy objective regressing to its mean); bad-input errors; env reward terms; exact resume
and a short learning check."""

import copy
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evorl.config import ConfigError
from evorl.envs.spaces import Box
from evorl.envs.vec_env import VectorEnv
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


# --- survivors re-scored --------------------------------------------------------------------
class NoisyTermsEnv(VectorEnv):
    """One-step episodes whose two reward terms are pure noise ``N(0, 1)``, drawn from the
    step's key and the action's bits: every policy's expected objectives are ``(0, 0)``, so
    any stored score above that is luck, and two policies played on the same environment
    seeds (as one generation plays them) still draw independent noise."""

    reward_terms = ("noise_a", "noise_b")
    obs_space = Box(low=np.zeros(1), high=np.ones(1))
    action_space = Box(low=-np.ones(1), high=np.ones(1))
    env_name = "noisy_terms"

    def __init__(self, num_envs=1):
        super().__init__(num_envs, episode_length=1)

    def _reset_one(self, key):
        return jnp.ones((1,)), jnp.zeros((2,))

    def _step_one(self, key, _, action):
        noise = jax.random.normal(jax.random.fold_in(key, jax.lax.bitcast_convert_type(action[0], jnp.int32)), (2,))
        return jnp.ones((1,)), noise, jnp.sum(noise), jnp.ones((), bool)

    def _reward_terms_one(self, noise):
        return noise


def noisy_generation(mode, population_size=8):
    """A jitted generation on :class:`NoisyTermsEnv` and a state whose members are scored, the
    first of them stored with a lucky score of 6 (six standard deviations) from 1 episode."""
    from evorl.algorithms.es import make_mlp_es_agent
    from evorl.algorithms.nsga2 import NSGA2Config, init_nsga2_state, make_generation

    env = NoisyTermsEnv()
    nsga2 = NSGA2Config(objectives=("noise_a", "noise_b"), reference_point=(-10.0, -10.0),
                        population_size=population_size, sigma=0.1, rescore_survivors=mode)
    nsga2.validate("nsga2")
    agent = make_mlp_es_agent(env.action_space, env.obs_space, actor_hidden_layer_sizes=(4,))
    generation = jax.jit(make_generation(env, agent, nsga2))
    state, _ = generation(init_nsga2_state(agent, nsga2, jax.random.PRNGKey(5)))
    state = state.replace(objectives=state.objectives.at[0].set(6.0), episodes=state.episodes.at[0].set(1))
    return generation, state


def find_member(state, params):
    """The stored objectives and episode count of the member with these parameters (None if gone)."""
    rows = np.nonzero(np.all(np.asarray(state.population) == np.asarray(params), axis=1))[0]
    return (np.asarray(state.objectives)[rows[0]], int(state.episodes[rows[0]])) if len(rows) else None


@pytest.mark.parametrize("mode", ["mean", "latest", "never"])
def test_rescore_equals_the_plain_mean_of_every_episode(mode):
    from evorl.algorithms.nsga2 import rescore

    rng = np.random.default_rng(0)
    draws = rng.normal(size=(6, 4, 2)).astype(np.float32)  # [generations, N, K], E = 3 episodes each
    objectives, episodes = jnp.full((4, 2), -jnp.inf), jnp.zeros((4,), jnp.int32)
    objectives, episodes = rescore("mean", objectives, episodes, jnp.asarray(draws[0]), 3)  # first scoring
    for fresh in draws[1:]:
        objectives, episodes = rescore(mode, objectives, episodes, jnp.asarray(fresh), 3)
    expected = {"mean": draws.mean(axis=0), "latest": draws[-1], "never": draws[0]}[mode]
    np.testing.assert_allclose(np.asarray(objectives), expected, rtol=1e-5, atol=1e-6)
    assert np.asarray(episodes).tolist() == [{"mean": 18, "latest": 3, "never": 3}[mode]] * 4


@pytest.mark.slow  # many NSGA-II generations on noisy returns
def test_a_lucky_survivor_regresses_to_its_mean_when_rescored():
    generations = 4
    # scored once, the lucky member dominates everything and keeps its score for ever
    generation, state = noisy_generation("never")
    lucky = state.population[0]
    for _ in range(generations):
        state, metrics = generation(state)
    score, episodes = find_member(state, lucky)
    assert score.tolist() == [6.0, 6.0] and episodes == 1
    frozen = float(metrics["hypervolume"])
    # re-scored, its stored score is the mean of every episode it played: the lucky one's weight
    # falls as 1 / (k + 1), the fresh draws' sum stays within 4 standard deviations
    generation, state = noisy_generation("mean")
    for k in range(1, generations + 1):
        state, metrics = generation(state)
        score, episodes = find_member(state, lucky)
        assert episodes == 1 + k
        assert np.all(score <= (6.0 + 4.0 * np.sqrt(k)) / (1 + k))
    assert 0 < float(metrics["hypervolume"]) < frozen  # the recorder follows the re-measured scores
    assert float(metrics["front_episodes"]) > 1
    # re-scored outright, the lucky score is gone after one generation
    generation, state = noisy_generation("latest")
    state, _ = generation(state)
    assert find_member(state, lucky) is None or np.all(find_member(state, lucky)[0] < 6.0)


def test_unknown_rescore_mode_is_one_clear_error():
    from evorl.workflows import NSGA2Workflow

    with pytest.raises(ConfigError, match="Unknown nsga2.rescore_survivors 'sometimes'; valid: mean, latest, never"):
        NSGA2Workflow.parse_config({**TINY_NSGA2, "nsga2": {**TINY_NSGA2["nsga2"], "rescore_survivors": "sometimes"}})


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
