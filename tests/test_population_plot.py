"""population.png: the series drawn from hand-written metrics records equal those records
(CEM-RL's elites from RL; ERL's learner rank on an inverted axis with its injections marked),
a run without fitness metrics is refused naming the missing columns, and a short CEM-RL run
with ``logging.plot`` leaves the figure in its run folder."""

import copy
import json

import numpy as np
import pytest
from test_cemrl import TINY

from evorl.app.experiment import run_experiment
from evorl.app.population_plot import plot_population
from evorl.app.run_folder import METRICS_JSONL, POPULATION_PNG
from evorl.workflows import CEMRLWorkflow, PPOWorkflow

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_records(run_dir, records):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / METRICS_JSONL).write_text("".join(json.dumps(r) + "\n" for r in records))


CEMRL_ROWS = [  # out of step order, one null mean: sorted by step, null read as NaN
    {"step": 160, "wall_time": 2.0, "train/best_actor_return": -900.0, "train/fitness_mean": -1000.0,
     "train/fitness_std": 60.0, "train/elites_from_rl": 2.0, "eval/episode_return": -950.0},
    {"step": 80, "wall_time": 1.0, "train/best_actor_return": -1100.0, "train/fitness_mean": None,
     "train/fitness_std": 40.0, "train/elites_from_rl": 0.5},
    {"step": 240, "wall_time": 3.0, "train/best_actor_return": -700.0, "train/fitness_mean": -800.0,
     "train/fitness_std": 90.0, "train/elites_from_rl": 1.0},
]

ERL_ROWS = [
    {"step": 100, "train/best_actor_return": 10.0, "train/fitness_mean": 5.0, "train/fitness_std": 2.0,
     "train/fitness_min": 1.0, "train/learner_return": 7.0, "train/learner_rank": 3.0, "train/learner_injected": 0.0,
     "train/elites_from_rl": 9.0, "train/population_from_learner": 0.0},
    {"step": 200, "train/best_actor_return": 20.0, "train/fitness_mean": 12.0, "train/fitness_std": 4.0,
     "train/fitness_min": 3.0, "train/learner_return": 21.0, "train/learner_rank": 1.0, "train/learner_injected": 1.0,
     "train/population_from_learner": 0.25},
    {"step": 300, "train/best_actor_return": 25.0, "train/fitness_mean": 18.0, "train/fitness_std": 3.0,
     "train/fitness_min": 9.0, "train/learner_return": 19.0, "train/learner_rank": 2.0, "train/learner_injected": 0.0,
     "train/population_from_learner": 0.5},
]


def test_cemrl_records_drawn_as_logged(tmp_path):
    write_records(tmp_path, CEMRL_ROWS)
    plot = plot_population(tmp_path, tmp_path / "out.png")
    assert (tmp_path / "out.png").read_bytes()[:8] == PNG_MAGIC
    s = plot.series
    np.testing.assert_array_equal(s.steps, [80, 160, 240])
    np.testing.assert_array_equal(s.best, [-1100, -900, -700])
    np.testing.assert_array_equal(s.mean, [np.nan, -1000, -800])
    np.testing.assert_array_equal(s.std, [40, 60, 90])
    assert s.minimum is None and s.learner_return is None
    assert s.rl_metric == "train/elites_from_rl"
    np.testing.assert_array_equal(s.rl_values, [0.5, 2.0, 1.0])
    assert s.injected_steps.size == 0
    fitness_ax, rl_ax = plot.figure.axes
    lines = {line.get_label(): line for line in fitness_ax.get_lines()}
    assert set(lines) == {"mean", "best"}
    np.testing.assert_array_equal(lines["best"].get_ydata(), [-1100, -900, -700])
    assert not rl_ax.yaxis_inverted()
    np.testing.assert_array_equal(rl_ax.get_lines()[0].get_ydata(), [0.5, 2.0, 1.0])


def test_erl_records_rank_inverted_and_injections_marked(tmp_path):
    write_records(tmp_path, ERL_ROWS)
    plot = plot_population(tmp_path, tmp_path / "population.png")
    s = plot.series
    np.testing.assert_array_equal(s.minimum, [1, 3, 9])
    np.testing.assert_array_equal(s.learner_return, [7, 21, 19])
    assert s.rl_metric == "train/learner_rank"  # the rank, not the elites, where both are logged
    np.testing.assert_array_equal(s.rl_values, [3, 1, 2])
    np.testing.assert_array_equal(s.injected_steps, [200])
    np.testing.assert_array_equal(s.from_learner, [0.0, 0.25, 0.5])
    fitness_ax, rl_ax, lineage_ax = plot.figure.axes
    np.testing.assert_array_equal(lineage_ax.get_lines()[0].get_ydata(), [0.0, 0.25, 0.5])
    assert {line.get_label() for line in fitness_ax.get_lines()} == {"mean", "best", "worst", "RL learner"}
    assert rl_ax.yaxis_inverted()
    lines = {line.get_label(): line for line in rl_ax.get_lines()}
    np.testing.assert_array_equal(lines["learner injected"].get_xdata(), [200])
    np.testing.assert_array_equal(lines["learner injected"].get_ydata(), [1])


def test_run_without_fitness_metrics_names_the_missing_columns(tmp_path):
    write_records(tmp_path, [{"step": 10, "train/episode_return": 1.0, "train/fitness_mean": 0.5}])
    with pytest.raises(ValueError, match=r"missing train/best_actor_return, train/fitness_std \("):
        plot_population(tmp_path, tmp_path / "out.png")
    assert not (tmp_path / "out.png").exists()


def test_population_plot_is_declared_by_the_workflow():
    assert CEMRLWorkflow.population_plot is True
    assert PPOWorkflow.population_plot is False


@pytest.mark.slow  # a CEM-RL run of its own
def test_short_cemrl_run_draws_population_png(tmp_path):
    cfg = copy.deepcopy(TINY)
    cfg["training"] = {"num_iterations": 4, "eval_interval": 1, "eval_episodes": 1}
    cfg["checkpoint"] = {"enabled": False}
    cfg["logging"] = {"recorders": [], "plot": True}
    run_dir = tmp_path / "run"
    run_experiment(cfg, output_dir=str(run_dir))
    assert (run_dir / POPULATION_PNG).read_bytes()[:8] == PNG_MAGIC
    plot = plot_population(run_dir, tmp_path / "again.png")
    assert plot.series.steps.tolist() == [80, 160, 240, 320]  # 4 actors x 20 steps per generation
    assert plot.series.rl_metric == "train/elites_from_rl"
    assert np.all((plot.series.rl_values >= 0) & (plot.series.rl_values <= 2))  # 2 elites
    assert np.all(plot.series.best >= plot.series.mean)
