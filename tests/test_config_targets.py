"""Every shipped config states its target in its header, and the benchmark sets check what
the headers promise: a header that names ``benchmarks/run.py <set>`` has an entry in that set
running the config at its own length (no overrides) with the header's target, and every
target-bearing entry of a set agrees with its config's header."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from suites import COMPOSED, CONFIG_DIR, SUITES, config_target, target_file  # noqa: E402

TOP_LEVEL = sorted(p for p in CONFIG_DIR.glob("*.yaml") if p.stem != COMPOSED)
# The composed config's targets live in algo/<algo>.yaml (for CartPole) and tuned/<algo>_<env>.yaml.
GROUP_FILES = sorted([*(CONFIG_DIR / "algo").glob("*.yaml"), *(CONFIG_DIR / "tuned").glob("*.yaml")])


def _groups_of(path: Path) -> dict[str, str]:
    if path.parent.name == "algo":
        return {"algo": path.stem}
    algo, env = path.stem.split("_", 1)
    return {"algo": algo, "env": env}


@pytest.mark.parametrize("path", TOP_LEVEL + GROUP_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_config_header_states_its_target(path):
    target = config_target(path)
    assert target is not None, f"{path.relative_to(CONFIG_DIR)}: no '# Target: ...' line in its header"
    # A target that no set checks says what was measured (or that nothing was) instead.
    if target.suite is None:
        assert "not " in target.line or "measured" in target.line, target.line


NAMING_A_SET = [p for p in TOP_LEVEL + GROUP_FILES if (target := config_target(p)) is not None and target.suite]


def test_the_configs_set_claims_configs_of_every_kind():
    assert len(NAMING_A_SET) >= 10  # the default job and its presets, seed YAMLs, host envs, brax, ES


@pytest.mark.parametrize("path", NAMING_A_SET, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_header_naming_a_set_is_checked_there_at_full_length(path):
    target = config_target(path)
    assert target.suite in SUITES, f"{path.name} names an unknown set {target.suite!r}"
    config, groups = (path.stem, {}) if path.parent == CONFIG_DIR else (COMPOSED, _groups_of(path))
    entries = [b for b in SUITES[target.suite] if b.config == config and not b.overrides
               and target_file(b.config, b.groups) == path]
    assert entries, f"{path.name}: no entry of set {target.suite!r} runs {config} {groups} at its own length"
    for bench in entries:
        assert bench.target == target.value
        if target.suite == "configs":
            assert len(bench.seeds) >= 3, "configs promise 3/3 seeds"


def test_every_target_in_a_set_is_its_configs_header_target():
    for suite, entries in SUITES.items():
        for bench in entries:
            if bench.target is None or bench.overrides:
                continue
            header = config_target(target_file(bench.config, bench.groups))
            assert header is not None and header.value == bench.target, (suite, bench.name)


def test_target_lines_parse(tmp_path):
    from suites import config_target as parse

    cases = {
        "# A header.\n# Target: final greedy return >= -1,000.5 (checked by `benchmarks/run.py cpu`)\nseed: 0\n":
            (-1000.5, "cpu"),
        "# Target: not measured (a GPU-scale config)\nseed: 0\n": (None, None),
        "seed: 0\n# Target: final greedy return >= 1 (below the first key: not the header)\n": None,
    }
    for i, (text, expected) in enumerate(cases.items()):
        (tmp_path / f"{i}.yaml").write_text(text)
        target = parse(tmp_path / f"{i}.yaml")
        assert (target and (target.value, target.suite)) == expected
    (tmp_path / "bad.yaml").write_text("# Target: it learns\nseed: 0\n")
    with pytest.raises(ValueError, match="not measured"):
        parse(tmp_path / "bad.yaml")
