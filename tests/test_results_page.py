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


def _run_py_measurement(tmp_path, final_std, best_curve):
    import results_data
    from run import append_records, evaluation_records
    from suites import Benchmark

    bench = Benchmark("cemrl_pendulum", seeds=(100,), target=-400.0)
    fields = {"suite": "configs", "env": "gymnax/Pendulum-v1", "algorithm": "CEM-RL", "budget_env_steps": 1000,
              "target": -400.0, "random_return": -1200.0, "eval_episodes": 16, "commit": "abc", "settings": {},
              "recorded_at": "2026-01-01T00:00:00Z", "machine": {"load_1min": 1.0}}
    append_records(tmp_path / "configs.jsonl", evaluation_records(bench, fields, 100, best_curve, (1000, 4.0, -300.0, final_std)))
    return results_data.from_evaluations(results_data.load_records(tmp_path))["cemrl_pendulum"]


def test_final_standard_error_and_collapse_band_from_run_py_records(tmp_path):
    """The page's s.e. is the final evaluation's std over sqrt(episodes); the collapse band is
    run.py's rule in return units: the final return may fall (1 - 0.9) x (best - random)
    below the best before the run counts as collapsed."""
    import render_results

    m = _run_py_measurement(tmp_path, 40.0, [(500, 1.0, -200.0, 30.0)])
    assert m.final_stderr == [pytest.approx(40.0 / 4)] and m.eval_episodes == [16]
    assert m.collapse_band() == [pytest.approx(0.1 * (-200.0 + 1200.0))]
    # the band agrees with the verdict: -300 is 100 below the best, exactly the band's edge
    assert m.seed_passed() == [True]
    assert render_results.stderr_text(m) == "10 (16 episodes)"
    assert render_results.band_text(m) == "100; wider than the s.e. on 1/1"


def test_standard_error_not_recorded_is_said_not_invented(tmp_path):
    import render_results
    import results_data

    m = _run_py_measurement(tmp_path, None, [(500, 1.0, -200.0, None)])
    assert m.final_stderr == [None]
    assert render_results.stderr_text(m) == "not recorded"
    assert render_results.band_text(m) == "100"
    assert results_data.final_stderr({"return_std": 8.0, "eval_episodes": 4}) == pytest.approx(4.0)
    assert results_data.final_stderr({"return_std": 8.0}) is None
    summary = results_data.measurement_per_config(results_data.load_records(ROOT / "benchmarks" / "results"))["config"]
    assert summary.final_stderr is None and render_results.stderr_text(summary) == "not recorded"


def test_every_shipped_config_has_one_row_measured_or_not_and_why():
    import results_data

    page = (ROOT / "docs" / "results.md").read_text()
    held_out = page.split("## Held-out pass rate per config")[1].split("## Beside published peers")[0]
    measured = results_data.measurement_per_config(results_data.load_records(ROOT / "benchmarks" / "results"),
                                                   results_data.load_minatar(ROOT / "benchmarks" / "results"))
    configs = results_data.shipped_configs()
    for c in configs:
        rows = [line for line in held_out.splitlines() if line.startswith(f"| `{c.name}` |")]
        assert len(rows) == 1, c.name
        if c.name not in measured:
            assert f"not measured: {results_data.unmeasured_reason(c)}" in rows[0]
    unmeasured = sum(c.name not in measured for c in configs)
    assert f"{len(configs)} shipped configs and presets" in held_out and f"; {unmeasured} not measured: " in held_out


@pytest.mark.parametrize("line, reason", [
    ("not measured (a GPU-scale config: hours on this CPU; brax's published settings)", "GPU/TPU scale (hours on the CPU)"),
    ("final greedy return >= 1000 (not checked by a set; seed 0 ended at 1888)", "measured off the held-out set (its header gives the figure)"),
    ("final greedy return >= 800 (checked by `benchmarks/run.py cpu`)", "measured off the held-out set (its header gives the figure)"),
    ("not measured (NSGA-II has no return target: its hypervolume is measured)", "no return target"),
    ("not measured (MinAtar Breakout's tuned config is ppo_minatar_breakout.yaml)", "superseded by a tuned config"),
    ("not measured (for reasons of its own)", "other (its header says why)"),
])
def test_unmeasured_reason_reads_the_header_line(line, reason):
    import results_data

    assert results_data.unmeasured_reason(results_data.ShippedConfig("x", "On-policy", line, None)) == reason


def test_published_budget_and_value_are_the_figure_text_s():
    """The structured budget and value of each published figure are the ones its text states."""
    import re

    import results_data

    published = [r for r in results_data.load_records(ROOT / "benchmarks" / "results") if r["kind"] == "published"]
    assert published
    for p in published:
        value = re.escape(f"{p['value']:g}")
        assert re.search(rf"(?<![\d.]){value}(?![\d])", p["figure"].replace("500.0", "500")), p
        if p["budget_env_steps"] is None:
            assert "not stated" in p["figure"]
        else:
            n = p["budget_env_steps"]
            stated = f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"
            assert p["figure"].startswith(f"{stated} env steps"), p


def test_evorl_figure_at_the_peer_s_budget():
    import results_peers
    from results_data import Measurement

    m = Measurement(name="x", env="e", algorithm="PPO", seeds=[1, 2], budget=1_024_000, final=[500.0, 500.0], target=475.0,
                    curves={1: [(90_000, 300.0), (99_000, 350.0), (102_400, 400.0), (501_760, 490.0)], 2: [(102_400, 200.0), (501_760, 480.0)]})
    at = results_peers.at_budget(m, 100_000)
    assert at.returns == [350.0, 200.0] and at.env_steps == 102_400  # each seed's evaluation nearest 100k and at.equal.startswith("yes: evorl's periodic")
    assert results_peers.at_budget(m, 1_000_000).returns == [500.0, 500.0]  # within 5%: the final evaluation
    assert results_peers.at_budget(m, 300_000).equal.startswith("no: ")  # no evaluation near 300k
    assert results_peers.at_budget(m, None).equal == "peer's budget not stated"
    assert results_peers.at_budget(m, 5_000_000).equal == "no: evorl's figure is at 1,024,000 env steps (fewer)"


def test_a_published_figure_inside_the_interval_is_not_called_below():
    import results_peers

    returns = [12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 9.0, 20.0]
    point, lo, hi = rl_stats.iqm_interval([np.asarray(returns)])
    assert results_peers.published_verdict(returns, point) == ">= peer"
    assert results_peers.published_verdict(returns, (point + hi) / 2) == results_peers.WITHIN_CI
    assert results_peers.published_verdict(returns, hi + 0.1) == "**below peer**"


def test_minatar_runs_judged_only_with_every_agent_s_evaluations():
    import results_data

    row = {"game": "breakout", "env": "Breakout-MinAtar", "final_returns": [30.0, 10.0], "eval_episodes": 128,
           "eval_standard_error": 1.5, "budget_env_steps": 1000, "target": 20.0, "seed": 66001, "machine": "m",
           "backend": "tpu", "curve": [{"env_steps": 500, "per_agent": [25.0, 5.0]}]}
    m = results_data.from_minatar([row])["ppo_minatar_breakout"]
    assert m.judged and m.passed_text == "1/2" and m.first_reach == [500, None] and m.best == [30.0, 10.0]
    assert m.final_stderr == [1.5, 1.5] and m.seeds_label == "2 agents, keys split from seed 66001"
    pooled = {**row, "curve": [{"env_steps": 500, "mean": 15.0, "min": 5.0, "max": 25.0}]}
    m = results_data.from_minatar([pooled])["ppo_minatar_breakout"]
    assert not m.judged and not m.passes and m.note.startswith("not judged")
    untargeted = {**row, "game": "seaquest", "env": "Seaquest-MinAtar", "target": None}
    m = results_data.from_minatar([untargeted])["ppo_minatar_seaquest"]
    assert m.target is None and not m.judged and m.note.startswith("not judged: the config's header states no target; its s.e. is one figure")


def test_a_minatar_target_stated_after_a_run_never_judges_that_run():
    import results_data
    from minatar_published import OBSERVATIONS
    from suites import config_target, target_file

    stated = config_target(target_file("ppo_minatar_asterix")).value
    assert stated is not None
    row = {"game": "asterix", "env": "Asterix-MinAtar", "final_returns": [30.0, 30.0], "eval_episodes": 128,
           "eval_standard_error": 0.3, "budget_env_steps": 1000, "target": None, "seed": 66001, "machine": "m",
           "backend": "tpu", "observations": OBSERVATIONS, "curve": [{"env_steps": 500, "per_agent": [30.0, 30.0]}]}
    m = results_data.from_minatar([row])["ppo_minatar_asterix"]
    assert m.target == stated and not m.judged and "stated after this run" in m.note
    # a run made with the target stated is judged by the target it ran with
    m = results_data.from_minatar([{**row, "target": stated}])["ppo_minatar_asterix"]
    assert m.judged and m.passed_text == "2/2"
