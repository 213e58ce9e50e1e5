"""docs/results.md is what benchmarks/results/*.jsonl renders to, and the statistics it reports
(IQM, stratified bootstrap intervals, performance profiles) agree with hand computation and
with rliable."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import rl_stats  # noqa: E402


def test_docs_results_page_is_what_the_data_renders_to(tmp_path):
    import render_results

    written = render_results.render(ROOT / "benchmarks" / "results", tmp_path / "results.md", tmp_path / "results")
    committed = (ROOT / "docs" / "results.md").read_text()
    assert (tmp_path / "results.md").read_text() == committed, (
        "docs/results.md is stale: run `python benchmarks/render_results.py` and commit the page and its figures")
    expected = sorted(p.name for p in written)
    assert sorted(p.name for p in (ROOT / "docs" / "results").glob("*.png")) == expected
    assert "aggregate.png" in expected
    for name in expected:  # every figure the page links to is committed
        assert f"results/{name}" in committed


def test_iqm_hand_computed():
    # 8 scores: k = 2 cut from each end, the mean of the middle 4
    assert rl_stats.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == pytest.approx((3 + 4 + 5 + 6) / 4)
    # 5 scores: k = int(1.25) = 1, the mean of the middle 3
    assert rl_stats.iqm([10.0, 0.0, 1.0, 2.0, 3.0]) == pytest.approx(2.0)
    # 3 scores: k = 0, the plain mean
    assert rl_stats.iqm([1.0, 2.0, 6.0]) == pytest.approx(3.0)
    assert rl_stats.iqm(np.array([[8, 1, 7, 2, 6, 3, 5, 4], [1, 1, 1, 1, 1, 1, 1, 9]]), axis=-1) == pytest.approx([4.5, 1.0])
    with pytest.raises(ValueError, match="no scores"):
        rl_stats.iqm([])


def test_performance_profile_hand_computed():
    scores = np.array([0.0, 0.5, 1.0, 1.5])
    assert rl_stats.performance_profile(scores, [-1.0, 0.0, 0.5, 1.2, 2.0]).tolist() == [1.0, 0.75, 0.5, 0.25, 0.0]


def test_stratified_bootstrap_resamples_within_each_task_and_is_deterministic():
    tasks = [np.array([0.0, 0.0, 0.0]), np.array([10.0, 11.0])]
    samples = rl_stats.stratified_resamples(tasks, reps=500, seed=3)
    assert samples.shape == (500, 5)
    assert np.all(samples[:, :3] == 0.0)  # the first task's runs only come from the first task
    assert set(np.unique(samples[:, 3:])) == {10.0, 11.0}
    assert np.array_equal(samples, rl_stats.stratified_resamples(tasks, reps=500, seed=3))
    # a task whose runs all agree has a zero-width interval
    assert rl_stats.iqm_interval([np.full(5, 1.055)]) == pytest.approx((1.055, 1.055, 1.055))
    with pytest.raises(ValueError, match="at least one run"):
        rl_stats.stratified_resamples([np.array([])])


def test_percentile_interval_hand_computed():
    samples = np.arange(101, dtype=float)  # quantiles of 0..100 are the percentages themselves
    lo, hi = rl_stats.percentile_interval(samples, 0.9)
    assert (lo, hi) == pytest.approx((5.0, 95.0))


@pytest.mark.skipif(importlib.util.find_spec("rliable") is None,
                    reason="rliable is not installed (the bench extra: pip install -e \".[bench]\")")
def test_statistics_agree_with_rliable():
    from rliable import library as rly
    from rliable import metrics

    rng = np.random.default_rng(0)
    scores = rng.normal(loc=[0.2, 0.8, 1.0, 1.3], scale=0.3, size=(10, 4))  # [runs, tasks]
    tasks = [scores[:, j] for j in range(scores.shape[1])]
    assert rl_stats.iqm(scores) == pytest.approx(metrics.aggregate_iqm(scores))

    point, interval = rly.get_interval_estimates(
        {"x": scores}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=5000,
        random_state=np.random.RandomState(0))
    ours = rl_stats.iqm_interval(tasks, reps=5000, seed=0)
    assert ours[0] == pytest.approx(point["x"][0])
    # different random streams: the percentile endpoints agree to Monte Carlo error
    assert ours[1] == pytest.approx(interval["x"][0, 0], abs=0.02)
    assert ours[2] == pytest.approx(interval["x"][1, 0], abs=0.02)

    taus = np.linspace(0.0, 2.0, 21)
    profile, profile_ci = rly.create_performance_profile({"x": scores}, taus, reps=2000)
    ours_point, ours_lo, ours_hi = rl_stats.profile_interval(tasks, taus, reps=2000)
    np.testing.assert_allclose(ours_point, profile["x"])
    np.testing.assert_allclose(ours_lo, profile_ci["x"][0], atol=0.05)
    np.testing.assert_allclose(ours_hi, profile_ci["x"][1], atol=0.05)


def test_run_py_records_round_trip_into_a_measurement(tmp_path):
    """What run.py appends is what the page reads: every evaluation, the final one marked, the
    standard error from the episodes' spread, and run.py's verdict recomputed from them."""
    import results_data
    from run import append_records, evaluation_records
    from suites import Benchmark

    bench = Benchmark("ppo_cartpole", seeds=(100, 101), target=475.0)
    fields = {"suite": "configs", "env": "gymnax/CartPole-v1", "algorithm": "PPO", "budget_env_steps": 1000,
              "target": 475.0, "random_return": 20.0, "eval_episodes": 16, "commit": "abc", "settings": {},
              "recorded_at": "2026-01-01T00:00:00Z", "machine": {"load_1min": 1.0}}
    curves = {100: [(250, 1.0, 480.0, 4.0), (500, 2.0, 500.0, 0.0), (750, 3.0, 500.0, 0.0)],  # reaches 475 at 25%
              101: [(250, 1.0, 100.0, 8.0), (500, 2.0, 200.0, 8.0), (750, 3.0, 490.0, 8.0)]}  # first at 75%: late
    path = tmp_path / "configs.jsonl"
    for seed, curve in curves.items():
        records = evaluation_records(bench, fields, seed, curve, (1000, 4.0, 500.0, 0.0))
        assert [r["final"] for r in records] == [False, False, False, True]
        assert records[0]["return_stderr"] == pytest.approx(curve[0][3] / 16 ** 0.5)
        append_records(path, records)
    m = results_data.from_evaluations(results_data.load_records(tmp_path))["ppo_cartpole"]
    assert m.seeds == [100, 101] and m.final == [500.0, 500.0] and m.first_reach == [250, 750]
    assert m.seed_passed() == [True, False] and m.passed_text == "1/2" and not m.passes
    assert m.curves[101] == [(250, 100.0), (500, 200.0), (750, 490.0)]
