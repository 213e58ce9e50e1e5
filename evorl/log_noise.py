"""Third-party log lines that ``evorl-train`` would print for nothing: Hydra sets the root
logger to INFO, so every library's INFO line reached the console.

* matplotlib's ``generated new fontManager``, on the first plot after installing it (its
  font cache);
* the joblib launcher's ``Joblib.Parallel(n_jobs=-1,backend=loky,...) is launching N jobs`` of
  a ``-m`` sweep (Hydra's own ``Launching jobs, sweep output dir`` and the jobs' overrides stay);
* jax's backend probing (``Unable to initialize backend 'tpu'``) and absl's, where orbax logs
  every save;
* MuJoCo MJX's (brax's and playground's physics): ``Failed to import warp`` /
  ``Failed to import mujoco_warp`` printed on import (warp is MJX's optional GPU backend;
  without it MJX runs its JAX one, :func:`import_mjx_quietly`), ``Using JAX default device``
  logged on every model it loads, and brax's warning that it is no longer maintained.

Warnings and errors of these loggers still show.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import sys
import warnings

#: Loggers whose INFO lines are noise on a run's console.
QUIET_LOGGERS = ("matplotlib", "jax._src.xla_bridge", "absl")
JOBLIB_LAUNCHER_LOGGER = "hydra_plugins.hydra_joblib_launcher._core"


class _DropJoblibBanner(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Joblib.Parallel(")


def quiet_third_party_logs() -> None:
    """Raises the loggers of :data:`QUIET_LOGGERS` to WARNING and drops the joblib launcher's
    ``Joblib.Parallel(...)`` line (once per process, however often it is called)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    launcher = logging.getLogger(JOBLIB_LAUNCHER_LOGGER)
    if not any(isinstance(f, _DropJoblibBanner) for f in launcher.filters):
        launcher.addFilter(_DropJoblibBanner())
    root = logging.getLogger()
    if not any(isinstance(f, _DropMjxDeviceLine) for f in root.filters):
        root.addFilter(_DropMjxDeviceLine())
    warnings.filterwarnings("ignore", message="Brax System, piplines and environments are not actively being maintained")


class _DropMjxDeviceLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno < logging.WARNING and str(record.msg).startswith("Using JAX default device"))


#: What MJX prints (to stdout) on import when warp, its optional GPU backend, is not installed.
MJX_IMPORT_NOISE = ("Failed to import warp:", "Failed to import mujoco_warp:")


def import_mjx_quietly() -> None:
    """Imports ``mujoco.mjx`` (once per process; nothing if MuJoCo is not installed) without its
    :data:`MJX_IMPORT_NOISE` lines; anything else it prints still shows."""
    if "mujoco.mjx" in sys.modules:
        return
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            importlib.import_module("mujoco.mjx")
    except ImportError:
        pass  # the env package's own import names what is missing
    finally:
        kept = [line for line in printed.getvalue().splitlines(keepends=True) if not line.startswith(MJX_IMPORT_NOISE)]
        sys.stdout.write("".join(kept))


#: What JaxMARL prints (to stdout) on import when its optional ``jaxrobotarium`` envs are absent.
JAXMARL_IMPORT_NOISE = ("Importing submoduled environments...", "Submoduled environments not found.")


def import_jaxmarl_quietly() -> None:
    """Imports ``jaxmarl`` (once per process; nothing if it is not installed) without its
    :data:`JAXMARL_IMPORT_NOISE` lines; anything else it prints still shows. JaxMARL's MABrax
    module resets ``sys.stdout`` to ``sys.__stdout__`` while it imports, so that one is
    redirected too."""
    if "jaxmarl" in sys.modules:
        return
    printed, real_stdout = io.StringIO(), sys.__stdout__
    try:
        sys.__stdout__ = printed
        with contextlib.redirect_stdout(printed):
            importlib.import_module("jaxmarl")
    except ImportError:
        pass  # import_env_package names the extra that installs it
    finally:
        sys.__stdout__ = real_stdout
        kept = [line for line in printed.getvalue().splitlines(keepends=True)
                if not line.startswith(JAXMARL_IMPORT_NOISE)]
        sys.stdout.write("".join(kept))
