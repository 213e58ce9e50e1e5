"""Every config in configs/ is valid for its workflow (parsed, not built: no compilation)."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from evorl.config import ConfigError
from evorl.workflows import resolve_workflow_cls

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_config_is_valid(path):
    cfg = OmegaConf.to_container(OmegaConf.load(path))
    assert cfg.pop("defaults", None) is not None, "each config is standalone: defaults: [_self_]"
    try:
        workflow_cls = resolve_workflow_cls(cfg["workflow_cls"])
    except ConfigError:
        pytest.skip(f"{cfg['workflow_cls']} is not available on this branch yet")
    config = workflow_cls.parse_config(cfg)
    tc = config.training
    assert (tc.num_envs * tc.rollout_length) % tc.num_minibatches == 0
