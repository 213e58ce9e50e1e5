"""Every config in configs/ is valid for its workflow: each parses (no compilation), and the
A2C and IMPALA configs also build (no training)."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evorl.workflows import resolve_workflow_cls

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
CONFIGS = sorted(CONFIG_DIR.glob("*.yaml"))


def load(path: Path) -> dict:
    cfg = OmegaConf.to_container(OmegaConf.load(path))
    assert cfg.pop("defaults", None) is not None, "each config is standalone: defaults: [_self_]"
    return cfg


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_is_valid(path):
    cfg = load(path)
    config = resolve_workflow_cls(cfg["workflow_cls"]).parse_config(cfg)
    tc = config.training
    assert (tc.num_envs * tc.rollout_length) % tc.num_minibatches == 0


@pytest.mark.parametrize("name", ["a2c_cartpole", "a2c_breakout", "impala_cartpole", "impala_breakout"])
def test_config_builds(name):
    cfg = load(CONFIG_DIR / f"{name}.yaml")
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    assert workflow.name().lower() == name.split("_")[0]
