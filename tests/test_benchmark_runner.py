"""benchmarks/run.py's bookkeeping: when a target is first reached, and the table's cells."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from run import FirstReached, Result, aggregate, markdown_table, score_matrix  # noqa: E402


def test_first_reached_records_the_first_evaluation_at_the_target():
    rec = FirstReached(20.0)
    rec.write({"train/episode_return": 25.0}, 100)  # no evaluation in this record
    rec.write({"eval/episode_return": 19.9}, 200)
    assert rec.reached is None
    rec.write({"eval/episode_return": 20.0}, 300)
    rec.write({"eval/episode_return": 30.0}, 400)
    assert rec.reached[0] == 300 and rec.reached[1] >= 0
    assert rec.evaluations == [19.9, 20.0, 30.0]
    rec.start()  # next seed
    assert rec.reached is None and rec.evaluations == []
    none = FirstReached(None)
    none.write({"eval/episode_return": 1e9}, 1)
    assert none.reached is None


def result(per_seed, best, target=475.0, random=25.0, **kw) -> Result:
    return Result(name="x", env="gymnax/CartPole-v1", algorithm="IMPALA", env_steps=512_000, seeds=len(per_seed),
                  wall_s=10.0, compile_s=6.0, steps_per_s=51200.0, eval_return_mean=0.0, eval_return_std=0.0,
                  target=target, per_seed=per_seed, best_per_seed=best, random_return=random,
                  **{"first_reached": [(102_400, 5.0)] * len(per_seed), **kw})


def test_table_reports_each_seed():
    r = Result(name="x", env="gymnax/Breakout-MinAtar", algorithm="PPO", env_steps=3_276_800, seeds=2,
               wall_s=200.0, compile_s=9.0, steps_per_s=16384.0, eval_return_mean=17.5, eval_return_std=10.5,
               target=20.0, per_seed=[28.0, 7.0], first_reached=[(1_638_400, 150.2), None],
               best_per_seed=[28.0, 21.0], random_return=1.0)
    row = markdown_table([r], "t").splitlines()[-1]
    # seed 2 collapsed: its best (21) met the target, its final score 6/19 < 0.9 x 20/19
    assert "| 17.5 ± 10.5 | 28.0, 7.0 | 28.0, 21.0 | no, yes | 1.0 | 20 | 1/2 | 1.64M steps (50%) / 150 s; never |" in row


def test_collapse_counts_a_seed_that_fell_from_its_best_as_failing():
    # normalised scores: (R - 25) / 450; 0.9 x best is the line
    r = result([500.0, 480.0, 9.0, 480.0, 500.0], [500.0, 500.0, 500.0, 480.0, 500.0])
    assert r.collapsed == [False, False, True, False, False]  # 480 is 455/475 = 0.958 of 500's score
    assert r.passed == [True, True, False, True, True] and r.met == "4/5" and r.ok
    assert not result([500.0, 9.0, 9.0, 500.0, 500.0], [500.0] * 5).ok  # 3/5 < 80%
    low = result([460.0] * 5, [480.0] * 5)  # no collapse (0.958 of best) but below the target
    assert low.collapsed == [False] * 5 and low.met == "0/5"


def test_a_seed_that_first_reached_the_target_late_or_only_at_its_final_evaluation_fails():
    # 512k env steps: 70% is 358,400
    r = result([500.0] * 5, [500.0] * 5, first_reached=[(102_400, 5.0), (358_400, 9.0), (409_600, 9.0), None,
                                                         (51_200, 1.0)])
    assert r.late == [False, False, True, True, False]
    assert r.passed == [True, True, False, False, True] and r.met == "3/5" and not r.ok


def test_collapse_of_negative_returns_is_judged_on_the_normalised_score():
    # Acrobot: random -500, target -100; best -70 (score 1.075), final -90 (score 1.025): no collapse
    r = result([-90.0], [-70.0], target=-100.0, random=-500.0)
    assert r.collapsed == [False] and r.passed == [True]
    r = result([-200.0], [-70.0], target=-100.0, random=-500.0)  # score 0.75 < 0.9 x 1.075
    assert r.collapsed == [True]


def test_aggregate_is_the_iqm_of_the_normalised_scores():
    pytest.importorskip("rliable", reason="rliable is the bench extra (pip install -e '.[bench]')")
    a = result([475.0, 475.0, 25.0, 475.0], [475.0] * 4)  # scores 1, 1, 0, 1
    b = result([250.0] * 4, [250.0] * 4, random=25.0)  # scores 0.5 each
    names, matrix = score_matrix([a, b])
    assert matrix.shape == (4, 2)
    point, low, high = aggregate([a, b], reps=200)
    # IQM of the 8 scores (0, .5 x4, 1 x3): the middle half, sorted, is .5, .5, .5, 1
    assert point == pytest.approx(np.mean([0.5, 0.5, 0.5, 1.0]))
    assert low <= point <= high


def test_aggregate_without_rliable_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "rliable", None)
    text = aggregate([result([475.0], [475.0])])
    assert isinstance(text, str) and "rliable is not installed" in text
