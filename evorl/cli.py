"""Command-line entry points (``scripts/train.py`` wraps :func:`train` with Hydra)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
from typing import Any

from evorl.config import ConfigError, to_plain


def train(cfg: Any) -> dict[str, float]:
    """Builds the workflow ``cfg.workflow_cls`` names, trains it, prints the final evaluation."""
    # Hydra logs at INFO; jax's backend probing ("Unable to initialize backend 'tpu'") is noise.
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    import jax

    enable_compilation_cache()

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


def enable_compilation_cache() -> str | None:
    """Turns on JAX's persistent compilation cache, so a repeated run skips XLA compilation.

    Directory: ``$EVORL_COMPILATION_CACHE`` (``0`` or ``off`` disables it), else
    ``$XDG_CACHE_HOME/evorl/xla`` (``~/.cache/evorl/xla``). Returns the directory used.
    """
    import jax

    setting = os.environ.get("EVORL_COMPILATION_CACHE", "")
    if setting.lower() in ("0", "off", "false", "no"):
        return None
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = setting or os.path.join(cache_home, "evorl", "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    return path


_PLAIN_OVERRIDE = re.compile(r"^[A-Za-z_][\w.\-]*=")


def allow_new_keys(argv: list[str]) -> list[str]:
    """Turns plain ``key=value`` overrides into Hydra's ``++key=value`` (add or override).

    A config file lists only the keys it changes, so Hydra alone would reject overriding
    any other valid key (``training.eval_interval=5``). Unknown keys are not lost: evorl's
    own validation rejects them with the closest valid key. ``hydra.*`` keys are left alone.
    """
    return [
        f"++{arg}" if _PLAIN_OVERRIDE.match(arg) and not arg.startswith("hydra.") else arg
        for arg in argv
    ]


@contextlib.contextmanager
def exit_on_config_error():
    """A bad config is the user's input, not a crash: one line on stderr and exit status 2."""
    try:
        yield
    except ConfigError as e:
        print(f"evorl: config error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
