"""The custom-network tutorial's example (docs/tutorials/custom-network.md, ``examples/custom_network.py``)
trains through the normal experiment path."""

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from custom_network import ResidualMLP, ResidualPPOWorkflow  # noqa: E402

from evorl.app.experiment import run_experiment  # noqa: E402


@pytest.mark.slow  # ~39 s on 2 cores at load 8-10 (2026-12-03)
def test_custom_network_workflow_trains_and_checkpoints(tmp_path):
    cfg = {**TINY, "workflow_cls": "custom_network.ResidualPPOWorkflow", "training": {**TINY["training"], "num_iterations": 2}}
    result = run_experiment(cfg, output_dir=tmp_path)
    assert isinstance(result.workflow, ResidualPPOWorkflow)
    assert np.isfinite(result.final_metrics["eval/episode_return"])
    # the residual network's own layers, not the default MLP's
    assert set(result.state.agent_state.params["policy"]["params"]) == {"Dense_0", "Dense_1", "Dense_2"}
    assert ResidualMLP(8, 2).width == 8
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["2"]
