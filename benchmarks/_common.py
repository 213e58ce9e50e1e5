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


def apply_overrides(cfg: dict, overrides: list[str]) -> dict:
    """``cfg`` with ``section.key=value`` overrides applied (a dotted path of any depth, a
    top-level key too; values read by :func:`parse_value`), as the benchmarks' ``--set``
    options take them."""
    for item in overrides:
        path, equals, value = item.partition("=")
        if not equals or not path:
            raise SystemExit(f"--set takes section.key=value, got {item!r}")
        *parents, leaf = path.split(".")
        node = cfg
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = parse_value(value)
    return cfg


def build(cfg: dict, recorders=None):
    return resolve_workflow_cls(cfg["workflow_cls"]).build_from_config(cfg, recorders=recorders)


def train(cfg: dict, seed: int | None = None):
    """Trains; returns ``(workflow, final state, logged metrics rows)``."""
    log = MetricsLog()
    workflow = build(cfg, recorders=[log])
    state = workflow.init(jax.random.PRNGKey(cfg.get("seed", 0) if seed is None else seed))
    state = workflow.learn(state)
    return workflow, state, log.rows
