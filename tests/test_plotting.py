"""Learning curves: IQM and bootstrap band over seeds, common grids, tick labels, a run's own curve."""

import json

import numpy as np
import pytest
import yaml

from evorl.app.plotting import (
    EVAL_RETURN,
    TRAIN_RETURN,
    bootstrap_ci,
    group_runs,
    iqm,
    plot_runs,
    short_count,
    time_unit,
)
from evorl.app.run_folder import CURVE_PNG


def write_run(run_dir, steps, wall_time, eval_return, train_return=None, seed=0, learning_rate=5e-4, config=None,
              resumed_at=()):
    run_dir.mkdir(parents=True)
    config = config or {"workflow_cls": "evorl.workflows.PPOWorkflow", "seed": seed, "env": {"env_name": "CartPole-v1"},
                        "training": {"learning_rate": learning_rate}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    train_return = [None] * len(steps) if train_return is None else train_return
    number = lambda v: None if v is None else float(v)  # noqa: E731
    lines = [json.dumps({"step": number(s), "wall_time": number(t), **({"resumed": True} if k in resumed_at else {}),
                         EVAL_RETURN: number(e), TRAIN_RETURN: number(r)})
             for k, (s, t, e, r) in enumerate(zip(steps, wall_time, eval_return, train_return))]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def test_iqm_against_hand_computed_values():
    # 8 runs: drop the 2 lowest (1, 2) and the 2 highest (7, 100), average 3, 4, 5, 6
    assert iqm(np.array([5.0, 100.0, 1.0, 3.0, 7.0, 2.0, 6.0, 4.0])) == 4.5
    # 5 runs: floor(5/4) = 1 dropped at each end
    assert iqm(np.array([0.0, 10.0, 20.0, 30.0, 1000.0])) == 20.0
    # fewer than 4 runs: nothing dropped, the mean; NaN (a run without data there) ignored
    np.testing.assert_allclose(iqm(np.array([[1.0, 1.0], [2.0, np.nan], [6.0, 3.0]])), [3.0, 2.0])
    assert np.isnan(iqm(np.array([np.nan, np.nan])))


def test_iqm_matches_scipy_trim_mean():
    stats = pytest.importorskip("scipy.stats")
    values = np.random.default_rng(1).normal(size=(11, 7))
    np.testing.assert_allclose(iqm(values), stats.trim_mean(values, 0.25, axis=0))


def reference_bootstrap(values, reps, seed, confidence=0.95):
    """The same resampling as bootstrap_ci, one point and one resample at a time."""
    runs, points = values.shape
    u = np.random.default_rng(seed).random((reps, runs))  # the same uniform draws, in the same order
    low, high = np.full(points, np.nan), np.full(points, np.nan)
    for g in range(points):
        present = [v for v in values[:, g] if not np.isnan(v)]
        n = len(present)
        if n < 2:
            continue
        resampled = []
        for r in range(reps):
            draw = sorted(present[int(u[r, i] * n)] for i in range(n))
            resampled.append(np.mean(draw[n // 4:n - n // 4]))
        tail = 100 * (1 - confidence) / 2
        low[g], high[g] = np.percentile(resampled, [tail, 100 - tail])
    return low, high


def test_bootstrap_matches_a_plain_loop():
    values = np.random.default_rng(2).normal(size=(6, 5))
    values[0, 1] = values[2, 1] = np.nan  # 4 runs with data at point 1
    values[1:, 4] = np.nan  # 1 run at point 4: no band
    low, high = bootstrap_ci(values, reps=300, seed=3, block=64)
    ref_low, ref_high = reference_bootstrap(values, reps=300, seed=3)
    np.testing.assert_allclose(low, ref_low)
    np.testing.assert_allclose(high, ref_high)
    assert np.isnan(low[4]) and np.all(low[:4] < iqm(values)[:4]) and np.all(iqm(values)[:4] < high[:4])


def test_band_stays_inside_the_runs_range(tmp_path):
    # CartPole-like: returns capped at 500, few seeds, one seed stuck low. A Student t band over
    # 3 seeds at the last point (500, 500, 20) reaches 340 + 4.303 * 277 / sqrt(3) = 1028.
    rng = np.random.default_rng(0)
    steps = np.arange(1, 11) * 10_000
    runs = [write_run(tmp_path / str(seed), steps, steps / 1e4, np.minimum(500, rng.uniform(0, 600, 10)), seed=seed)
            for seed in range(3)]
    for run_dir, last in zip(runs, (500, 500, 20)):
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        record = json.loads(lines[-1]) | {EVAL_RETURN: last}
        (run_dir / "metrics.jsonl").write_text("\n".join(lines[:-1] + [json.dumps(record)]) + "\n")
    plot = plot_runs(runs, tmp_path / "curves.png", metrics=EVAL_RETURN)
    for curve in plot.curves:
        band = curve.counts >= 2
        assert band.all()
        low_ok = curve.low[band] >= np.nanmin(curve.runs, axis=0)[band] - 1e-9
        high_ok = curve.high[band] <= np.nanmax(curve.runs, axis=0)[band] + 1e-9
        assert low_ok.all() and high_ok.all()
        assert curve.high.max() <= 500 + 1e-9


def test_group_with_non_overlapping_wall_times_keeps_every_group(tmp_path):
    # group lr=0.001: seed 0 logged from 3 s to 4 s (fast compile), seed 1 from 5 s to 6 s,
    # at different env steps; group lr=0.0005 overlaps. Cut to their common range, the first
    # group used to become one point (invisible).
    runs = [
        write_run(tmp_path / "a0", [100, 200, 300], [3.0, 3.5, 4.0], [10, 20, 30], seed=0, learning_rate=1e-3),
        write_run(tmp_path / "a1", [150, 300], [5.0, 6.0], [15, 35], seed=1, learning_rate=1e-3),
        write_run(tmp_path / "b0", [100, 200, 300], [3.0, 4.0, 5.0], [1, 2, 3], seed=0),
        write_run(tmp_path / "b1", [100, 200, 300], [3.5, 4.5, 5.5], [2, 3, 4], seed=1),
    ]
    plot = plot_runs(runs, tmp_path / "curves.png")
    by_key = {(c.group, c.panel): c for c in plot.curves}
    assert set(by_key) == {(g, p) for g in ("learning_rate=0.001", "learning_rate=0.0005")
                           for p in ("env steps", "wall time")}
    assert len(plot.curves) == 4  # several groups: the evaluation return only

    wall = by_key["learning_rate=0.001", "wall time"]
    np.testing.assert_allclose(wall.x, [3.0, 3.5, 4.0, 5.0, 6.0])
    np.testing.assert_array_equal(wall.counts, [1, 1, 1, 1, 1])
    np.testing.assert_allclose(wall.center, [10, 20, 30, 15, 35])
    assert np.isnan(wall.low).all()  # no point has 2 runs: no band
    steps = by_key["learning_rate=0.001", "env steps"]
    np.testing.assert_allclose(steps.x, [100, 150, 200, 300])
    np.testing.assert_array_equal(steps.counts, [1, 2, 2, 2])
    # seed 1 interpolated at step 200: 15 + (35 - 15) * 50 / 150
    np.testing.assert_allclose(steps.center, [10, 15, (20 + 15 + 20 / 3) / 2, (30 + 35) / 2])
    # seeds that logged at the same env steps are aligned point by point, at their median time
    both = by_key["learning_rate=0.0005", "wall time"]
    np.testing.assert_allclose(both.x, [3.25, 4.25, 5.25])
    np.testing.assert_array_equal(both.counts, [2, 2, 2])
    np.testing.assert_allclose(both.center, [1.5, 2.5, 3.5])
    assert np.all((both.low >= [1, 2, 3]) & (both.high <= [2, 3, 4]))
    for ax in plot.figure.axes:
        labels = ax.get_legend_handles_labels()[1]
        assert len(labels) == 2 and all("mean of 2 seeds, 95% CI" in label for label in labels)
    # drawn: no point of the wall-time panel has both seeds, so the whole curve is the faint line
    drawn = [line.get_ydata() for line in plot.figure.axes[1].get_lines()]
    assert any(np.array_equal(y, [10, 20, 30, 15, 35]) for y in drawn)


def test_wall_time_line_is_broken_at_a_resume(tmp_path):
    # resumed before the third record (at 20 s: its 12 s include the resumed process's start
    # and compilation); the training return is not logged there, so its break is at the fourth
    run = write_run(tmp_path / "run", [100, 200, 300, 400], [4.0, 8.0, 20.0, 22.0], [10, 20, 30, 40],
                    train_return=[1, 2, None, 4], resumed_at=(2,))
    plot = plot_runs([run], tmp_path / "curve.png")
    by_key = {(c.metric, c.panel): c for c in plot.curves}
    wall = by_key[EVAL_RETURN, "wall time"]
    np.testing.assert_allclose(wall.x, [4.0, 8.0, 14.0, 20.0, 22.0])
    np.testing.assert_allclose(wall.center, [10, 20, np.nan, 30, 40])
    train = by_key[TRAIN_RETURN, "wall time"]
    np.testing.assert_allclose(train.x, [4.0, 8.0, 15.0, 22.0])
    np.testing.assert_allclose(train.center, [1, 2, np.nan, 4])
    # the drawn line has the gap; the env-steps panel is not broken
    drawn = [line.get_ydata() for line in plot.figure.axes[1].get_lines()]
    assert any(len(y) == 5 and np.isnan(y[2]) and np.isfinite(np.delete(y, 2)).all() for y in drawn)
    np.testing.assert_allclose(by_key[EVAL_RETURN, "env steps"].center, [10, 20, 30, 40])

    # seeds aligned by logging point: broken where either resumed, at the median times
    seeds = [write_run(tmp_path / f"s{seed}", [100, 200, 300], times, [seed, seed + 1, seed + 2], seed=seed,
                       resumed_at=resumed)
             for seed, times, resumed in ((0, [1.0, 2.0, 9.0], (2,)), (1, [1.0, 3.0, 4.0], ()))]
    wall = next(c for c in plot_runs(seeds, tmp_path / "seeds.png").curves if c.panel == "wall time")
    np.testing.assert_allclose(wall.x, [1.0, 2.5, 4.5, 6.5])
    np.testing.assert_array_equal(wall.counts, [2, 2, 0, 2])


def test_env_step_ticks_are_short_labels(tmp_path):
    assert [short_count(x) for x in (0, 500, 100_000, 120_000, 1_000_000, 1_500_000, 2e9)] == [
        "0", "500", "100k", "120k", "1M", "1.5M", "2B"]
    steps = np.linspace(0, 1_000_000, 40)
    run = write_run(tmp_path / "run", steps, steps / 1e4, np.linspace(0, 500, 40))
    plot = plot_runs([run], tmp_path / "curve.png")
    ax = plot.figure.axes[0]
    low, high = ax.get_xlim()
    labels = ax.xaxis.get_major_formatter().format_ticks([t for t in ax.get_xticks() if low <= t <= high])
    assert labels == ["0", "200k", "400k", "600k", "800k", "1M"]
    assert ax.get_xlabel() == "env steps" and plot.figure.axes[1].get_xlabel() == "wall time [s] since each run's start"
    assert [time_unit(t)[0] for t in (100, 1000, 100_000)] == ["s", "min", "h"]


def test_run_curve_shows_training_and_evaluation_return(tmp_path):
    run = write_run(tmp_path / "run", [1024, 2048, 3072], [2.0, 2.5, 3.0], [9, 150, 500], train_return=[20, None, 300])
    plot = plot_runs([run], tmp_path / "learning_curve.png")
    assert sorted((c.metric, c.panel) for c in plot.curves) == sorted(
        (m, p) for m in (EVAL_RETURN, TRAIN_RETURN) for p in ("env steps", "wall time"))
    train = next(c for c in plot.curves if c.metric == TRAIN_RETURN and c.panel == "env steps")
    np.testing.assert_allclose(train.x, [1024, 3072])  # the chunk where no episode ended is left out
    for ax in plot.figure.axes:
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert set(lines) == {"evaluation return (greedy policy): PPO CartPole-v1",
                              "training return (episodes ended in rollouts): PPO CartPole-v1"}
        styles = {label.partition(" ")[0]: line.get_linestyle() for label, line in lines.items()}
        assert styles == {"evaluation": "-", "training": "--"}
    assert ax.get_ylabel() == "episode return"

    untrained = write_run(tmp_path / "untrained", [1024], [1.0], [9])  # no training return logged at all
    assert {c.metric for c in plot_runs([untrained], tmp_path / "u.png").curves} == {EVAL_RETURN}


def test_a_sampled_evaluation_is_labelled_as_such(tmp_path):
    run = write_run(tmp_path / "run", [1024, 2048], [1.0, 2.0], [9, 150], train_return=[20, 30])
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["training"]["eval_deterministic"] = False
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    plot = plot_runs([run], tmp_path / "learning_curve.png")
    labels = {line.get_label() for line in plot.figure.axes[0].get_lines()}
    assert "evaluation return (sampled actions): PPO CartPole-v1" in labels


def composed_config(algo, env, seed=0, **training):
    """The config.yaml ``evorl-train algo=<algo> env=<env>`` writes: every key, the algorithm's
    and the env's defaults included."""
    from evorl.app.config_groups import default_config, select_algorithm
    from evorl.app.experiment import resolved_config
    from evorl.workflows import resolve_workflow_cls

    cfg, _ = select_algorithm(default_config(algo, env))
    cfg["training"].update(training)
    return {**resolved_config(resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg)), "seed": seed}


def test_a_sweep_over_algorithms_and_envs_is_labelled_by_them(tmp_path):
    """``-m algo=ppo,a2c env=cartpole,acrobot``: the jobs differ in dozens of keys (each
    algorithm's and env's defaults), yet each curve is named by its algorithm and env, not by
    its job number."""
    sweep = [("ppo", "cartpole"), ("ppo", "acrobot"), ("a2c", "cartpole"), ("a2c", "acrobot")]
    runs = [write_run(tmp_path / "multirun" / str(job), [100, 200], [1, 2], [10, 20], config=composed_config(a, e))
            for job, (a, e) in enumerate(sweep)]
    groups = group_runs(runs)
    assert groups == {"PPO CartPole-v1": [runs[0]], "PPO Acrobot-v1": [runs[1]], "A2C CartPole-v1": [runs[2]],
                      "A2C Acrobot-v1": [runs[3]]}
    labels = plot_runs(runs, tmp_path / "curves.png").figure.axes[0].get_legend_handles_labels()[1]
    assert sorted(labels) == sorted(groups)


def test_a_sweep_over_algorithms_and_a_key_is_labelled_by_both_with_seeds_grouped(tmp_path):
    """``-m algo=ppo,a2c training.learning_rate=0.001,0.0003 seed=0,1``: the learning rate
    differs within an algorithm, so the label names it; the seeds are one curve."""
    runs, expected = [], {}
    for algo in ("ppo", "a2c"):
        for lr in (1e-3, 3e-4):
            for seed in (0, 1):
                config = composed_config(algo, "cartpole", seed=seed, learning_rate=lr)
                runs.append(write_run(tmp_path / f"{len(runs)}", [100, 200], [1, 2], [10, 20], config=config))
                expected.setdefault(f"{algo.upper()}, learning_rate={lr}", []).append(runs[-1])
    assert group_runs(runs) == expected


def test_too_many_differing_keys_name_each_run_by_its_folder_below_the_common_parent(tmp_path):
    configs = [{"workflow_cls": "evorl.workflows.PPOWorkflow", "env": {"env_name": "CartPole-v1"},
                "training": {"a": i, "b": i, "c": i, "d": i}} for i in range(2)]
    runs = [write_run(tmp_path / sweep / "0", [1], [1], [1], config=c) for sweep, c in zip(("x", "y"), configs)]
    assert list(group_runs(runs)) == ["x/0", "y/0"]  # not both "0", which would group them as seeds


def test_evorl_plot_writes_the_run_folders_plot_name_and_counts_runs(tmp_path, monkeypatch, capsys):
    from evorl.app.scripts.plot import main

    run = write_run(tmp_path / "run", [100, 200], [1, 2], [10, 20])
    monkeypatch.chdir(tmp_path)
    main([str(run)])
    assert CURVE_PNG == "learning_curve.png" and (tmp_path / CURVE_PNG).stat().st_size > 10_000
    assert capsys.readouterr().out == f"{CURVE_PNG} (1 run)\n"
    write_run(tmp_path / "run2", [100, 200], [1, 2], [10, 30], seed=1)
    main([str(run), str(tmp_path / "run2"), "-o", "both.png"])
    assert capsys.readouterr().out == "both.png (2 runs)\n"


@pytest.mark.parametrize("groups", [1, 6])
def test_wide_tick_labels_keep_every_label_inside_the_figure(tmp_path, groups):
    """Returns of -12345 (an MPE or MABrax run) have wide tick labels: the y label stays inside
    the figure (fixed margins cut it), the panels apart and the legend below the x labels."""
    runs = [write_run(tmp_path / f"run{g}", [0, 1e5, 2e5], [0, 10, 20], [-12345.6 - g, -11234.5, -9876.5],
                      [-12000.1, -11000.2, -10000.3], learning_rate=1e-4 * (g + 1)) for g in range(groups)]
    figure = plot_runs(runs, tmp_path / CURVE_PNG).figure
    renderer = figure.canvas.get_renderer()
    box = lambda artist: artist.get_window_extent(renderer)  # noqa: E731
    left, right = figure.axes
    for ax in (left, right):
        assert box(ax.yaxis.label).x0 >= 0 and box(ax.yaxis.label).y0 >= 0
        assert max(box(t).x1 for t in ax.get_yticklabels()) <= box(ax).x0
    assert box(right.yaxis.label).x0 > box(left).x1  # the panels apart
    legend = box(figure.legends[0])
    assert legend.y0 >= 0 and legend.y1 <= min(box(ax.xaxis.label).y0 for ax in (left, right))
