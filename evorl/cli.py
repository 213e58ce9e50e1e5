"""Command-line entry points (``scripts/train.py`` wraps :func:`train` with Hydra)."""

from __future__ import annotations

import time
from typing import Any

from evorl.config import ConfigError, to_plain


def train(cfg: Any) -> dict[str, float]:
    """Builds the workflow ``cfg.workflow_cls`` names, trains it, prints the final evaluation."""
    import jax

    from evorl.workflows import resolve_workflow_cls

    start = time.perf_counter()
    cfg = to_plain(cfg)
    if "workflow_cls" not in cfg:
        raise ConfigError("config needs 'workflow_cls' (e.g. evorl.workflows.PPOWorkflow).")
    workflow_cls = resolve_workflow_cls(cfg["workflow_cls"])
    workflow = workflow_cls.build_from_config(cfg)
    state = workflow.init(jax.random.PRNGKey(workflow.config.seed))
    state = workflow.learn(state)
    final = workflow.evaluate(state)
    print(
        f"[{workflow.name()}] final evaluation over {workflow.config.training.eval_episodes} episodes: "
        f"return {final['eval/episode_return']:.2f} +- {final['eval/episode_return_std']:.2f} "
        f"(min {final['eval/episode_return_min']:.1f}, max {final['eval/episode_return_max']:.1f}); "
        f"compile {workflow.compile_seconds:.1f}s, total {time.perf_counter() - start:.1f}s",
        flush=True,
    )
    return final
