"""The A2C and IMPALA configs in ``configs/`` parse and build (no training)."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evorl.workflows import resolve_workflow_cls

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("name", ["a2c_cartpole", "a2c_breakout", "impala_cartpole", "impala_breakout"])
def test_config_builds(name):
    cfg = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"{name}.yaml"))
    cfg.pop("defaults")  # Hydra's
    workflow = resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=[])
    assert workflow.name().lower() == name.split("_")[0]
