"""benchmarks/run.py's bookkeeping: when a target is first reached, and the table's cells."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from run import FirstReached, Result, markdown_table  # noqa: E402


def test_first_reached_records_the_first_evaluation_at_the_target():
    rec = FirstReached(20.0)
    rec.write({"train/episode_return": 25.0}, 100)  # no evaluation in this record
    rec.write({"eval/episode_return": 19.9}, 200)
    assert rec.reached is None
    rec.write({"eval/episode_return": 20.0}, 300)
    rec.write({"eval/episode_return": 30.0}, 400)
    assert rec.reached[0] == 300 and rec.reached[1] >= 0
    rec.start()  # next seed
    assert rec.reached is None
    none = FirstReached(None)
    none.write({"eval/episode_return": 1e9}, 1)
    assert none.reached is None


def test_table_reports_each_seed():
    r = Result(name="x", env="gymnax/Breakout-MinAtar", algorithm="PPO", env_steps=3_276_800, seeds=2,
               wall_s=200.0, compile_s=9.0, steps_per_s=16384.0, eval_return_mean=17.5, eval_return_std=10.5,
               target=20.0, per_seed=[28.0, 7.0], first_reached=[(2_457_600, 150.2), None])
    row = markdown_table([r], "t").splitlines()[-1]
    assert "| 17.5 ± 10.5 | 28.0, 7.0 | 20 | 1/2 | 2.46M steps / 150 s; never |" in row  # every seed must reach it
