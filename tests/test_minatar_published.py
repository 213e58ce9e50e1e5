"""benchmarks/minatar_published.py judges each agent of a many-seed run by run.py's rule."""

import sys
from pathlib import Path

import pytest

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


def test_a_control_without_sticky_actions_is_its_own_row(tmp_path):
    from minatar_published import render

    base = {"game": "freeway", "env": "Freeway-MinAtar", "agents": 2, "budget_env_steps": 1000, "target": None,
            "curve": [{"env_steps": 500, "per_agent": [1.0, 2.0]}], "eval_standard_error": 0.5,
            "machine": "m", "wall_s": 10.0, "compile_s": 1.0, "seed": 7}
    rows = [{**base, "final_returns": [50.0, 52.0]},  # recorded before the field existed: the config's 0.1
            {**base, "final_returns": [57.0, 59.0], "repeat_action_probability": 0.0}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    table = render(str(path)).splitlines()
    assert table[2].startswith("| Freeway-MinAtar | 2 |") and "51.0" in table[2]
    assert table[3].startswith("| Freeway-MinAtar (sticky actions 0) | 2 |") and "58.0" in table[3]
    assert "the config had no target" in table[2]


def test_the_run_a_target_was_read_from_and_the_run_that_judges_it_both_show(tmp_path):
    from minatar_published import TARGETS_SEED, render

    base = {"game": "asterix", "env": "Asterix-MinAtar", "agents": 2, "budget_env_steps": 1000,
            "curve": [{"env_steps": 500, "per_agent": [20.0, 20.0]}], "eval_standard_error": 0.5,
            "machine": "m", "wall_s": 10.0, "compile_s": 1.0, "backend": "tpu"}
    rows = [{**base, "seed": TARGETS_SEED + 1, "target": 18.0, "final_returns": [30.0, 31.0]},  # judging, written last
            {**base, "seed": TARGETS_SEED, "target": None, "final_returns": [28.0, 29.0]},
            {**base, "seed": TARGETS_SEED + 1, "target": 18.0, "final_returns": [32.0, 33.0]}]  # its rerun replaces it
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    table = render(str(path)).splitlines()
    assert f"seed {TARGETS_SEED} |" in table[2] and "the config had no target" in table[2]
    assert f"seed {TARGETS_SEED + 1} |" in table[3] and "32.5" in table[3] and ">= 18: 2/2" in table[3]
    assert table[4] == ""  # two runs, two rows


def test_another_algorithm_s_run_is_its_config_s_not_ppo_s(tmp_path):
    import results_data
    from minatar_published import render

    base = {"game": "breakout", "env": "Breakout-MinAtar", "agents": 2, "budget_env_steps": 1000, "target": None,
            "curve": [{"env_steps": 500, "per_agent": [1.0, 2.0]}], "eval_standard_error": 0.5,
            "machine": "m", "wall_s": 10.0, "compile_s": 1.0, "seed": 7, "eval_episodes": 128}
    rows = [{**base, "final_returns": [30.0, 32.0]},  # recorded before the field existed: PPO
            {**base, "final_returns": [7.0, 9.0], "algo": "a2c"}]
    measured = results_data.from_minatar(rows)
    assert measured["ppo_minatar_breakout"].final == [30.0, 32.0]
    assert measured["a2c_minatar_breakout"].final == [7.0, 9.0] and measured["a2c_minatar_breakout"].algorithm == "A2C"
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    table = render(str(path)).splitlines()
    assert table[2].startswith("| Breakout-MinAtar | 2 |") and "| 28.0 |" in table[2]  # PPO beside the published PPO
    assert table[3].startswith("| Breakout-MinAtar (A2C) | 2 |") and "| - |" in table[3]  # no published A2C figure


def test_a_control_on_the_peer_s_terms_is_its_own_row_and_not_the_config_s(tmp_path):
    import results_data
    from minatar_published import render

    base = {"game": "freeway", "env": "Freeway-MinAtar", "agents": 2, "budget_env_steps": 1000, "target": None,
            "curve": [{"env_steps": 500, "per_agent": [1.0, 2.0]}], "eval_standard_error": 0.5,
            "machine": "m", "wall_s": 10.0, "compile_s": 1.0, "seed": 7, "eval_episodes": 128}
    rows = [{**base, "final_returns": [50.0, 52.0], "repeat_action_probability": 0.1},
            {**base, "final_returns": [57.0, 59.0], "repeat_action_probability": 0.0, "eval_deterministic": False},
            {**base, "final_returns": [40.0, 42.0], "repeat_action_probability": 0.1, "eval_deterministic": False},
            {**base, "final_returns": [60.0, 62.0], "repeat_action_probability": 0.0, "eval_deterministic": False,
             "value_clip_epsilon": 0.2},
            {**base, "final_returns": [58.0, 58.0], "repeat_action_probability": 0.1, "matmul_precision": "highest"}]
    # the config's measurement is its greedy run by MinAtar's rules, whichever row came last
    assert results_data.from_minatar(rows)["ppo_minatar_freeway"].final == [50.0, 52.0]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in rows))
    table = render(str(path)).splitlines()
    assert table[2].startswith("| Freeway-MinAtar | 2 |") and "51.0" in table[2]
    assert table[5].startswith("| Freeway-MinAtar (sticky actions 0) (sampled actions in evaluation) | 2 |")
    assert "58.0 [" in table[5]
    assert table[3].startswith("| Freeway-MinAtar (highest matmul precision) | 2 |") and "58.0 [" in table[3]
    assert table[4].startswith("| Freeway-MinAtar (sampled actions in evaluation) | 2 |") and "41.0" in table[4]
    assert table[6].startswith(
        "| Freeway-MinAtar (sticky actions 0) (sampled actions in evaluation) (value clipping 0.2) | 2 |")


def test_freeway_on_a_tpu_with_gymnax_s_boolean_scatters_is_shown_miscomputed_and_never_judged(tmp_path):
    import results_data
    from minatar_published import OBSERVATIONS, render

    base = {"game": "freeway", "env": "Freeway-MinAtar", "agents": 2, "budget_env_steps": 1000, "target": 45.0,
            "curve": [{"env_steps": 500, "per_agent": [46.0, 47.0]}], "eval_standard_error": 0.5,
            "machine": "m", "wall_s": 10.0, "compile_s": 1.0, "seed": 7, "eval_episodes": 128, "backend": "tpu"}
    before = {**base, "final_returns": [50.0, 52.0]}  # no ``observations``: gymnax's scatters
    assert "ppo_minatar_freeway" not in results_data.from_minatar([before])
    assert "ppo_minatar_freeway" in results_data.from_minatar([{**before, "backend": "cpu"}])  # the CPU's are right
    after = {**base, "final_returns": [58.0, 60.0], "observations": OBSERVATIONS}
    assert results_data.from_minatar([before, after])["ppo_minatar_freeway"].final == [58.0, 60.0]
    assert results_data.from_minatar([after, before])["ppo_minatar_freeway"].final == [58.0, 60.0]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(__import__("json").dumps(r) + "\n" for r in (before, after)))
    table = render(str(path)).splitlines()
    assert table[2].startswith("| Freeway-MinAtar | 2 |") and "59.0" in table[2] and ">= 45: 2/2" in table[2]
    assert table[3].startswith("| Freeway-MinAtar (observations miscomputed: gymnax's boolean scatters on the TPU) |")
    assert "not judged: the game was miscomputed" in table[3]


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [1, 2])
def test_the_script_records_every_agent_s_evaluations_whatever_the_agent_count(tmp_path, seeds):
    import json
    import subprocess

    out = tmp_path / "rows.jsonl"
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "minatar_published.py"
    done = subprocess.run([sys.executable, str(script), "--games", "breakout", "--seeds", str(seeds), "--iterations", "2",
                           "--eval-episodes", "2", "--out", str(out), "--machine", "test"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    row = json.loads(out.read_text().splitlines()[-1])
    assert len(row["final_returns"]) == seeds and row["agents"] == seeds
    assert row["curve"] and all(len(c["per_agent"]) == seeds for c in row["curve"])
