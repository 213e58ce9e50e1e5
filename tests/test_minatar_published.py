"""benchmarks/minatar_published.py judges each agent of a many-seed run by run.py's rule."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from minatar_published import verdicts  # noqa: E402


def test_each_agent_is_judged_by_target_margin_and_collapse():
    curve = [{"env_steps": s, "per_agent": r} for s, r in [
        (200, [5.0, 5.0, 5.0, 5.0]), (600, [21.0, 5.0, 30.0, 12.0]), (800, [22.0, 21.0, 40.0, 15.0])]]
    row = {"target": 20.0, "budget_env_steps": 1000, "curve": curve, "final_returns": [23.0, 24.0, 21.0, 19.0]}
    v = verdicts(row)
    assert [x["passed"] for x in v] == [True, False, False, False]
    assert v[0]["first_reach"] == 0.6
    assert v[1]["first_reach"] == 0.8  # reached only after 70% of the budget: late
    assert v[2]["best"] == 40.0  # 21 < 0.9 x 40: collapsed, though above the target
    assert v[3]["first_reach"] is None  # never reached
