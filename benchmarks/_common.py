"""Helpers for the benchmark scripts: load a config from ``configs/``, train, collect metrics."""

from pathlib import Path

import jax
from omegaconf import OmegaConf

from evorl.workflows import resolve_workflow_cls

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


class MetricsLog:
    """A recorder that keeps every logged metrics dict."""

    def __init__(self):
        self.rows = []

    def init(self, config):
        pass

    def write(self, metrics, step):
        self.rows.append(dict(metrics))

    def close(self):
        pass


def load_config(name: str, **training) -> dict:
    """``configs/<name>.yaml`` without Hydra's ``defaults`` list, ``training`` keys overridden."""
    cfg = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"{name}.yaml"))
    cfg.pop("defaults", None)
    cfg["training"].update(training)
    return cfg


def parse_value(text: str):
    """A ``key=value`` override's value read as evorl's YAML configs are (OmegaConf's YAML
    loader: ``3e-4`` is a float, where PyYAML's ``safe_load`` reads it as text)."""
    return OmegaConf.to_container(OmegaConf.create(f"v: {text}"))["v"]


def build(cfg: dict, recorders=None):
    return resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=recorders)


def train(cfg: dict, seed: int | None = None):
    """Trains; returns ``(workflow, final state, logged metrics rows)``."""
    log = MetricsLog()
    workflow = build(cfg, recorders=[log])
    state = workflow.init(jax.random.PRNGKey(cfg.get("seed", 0) if seed is None else seed))
    state = workflow.learn(state)
    return workflow, state, log.rows
