"""Third-party log lines that ``evorl-train`` would print for nothing: Hydra sets the root
logger to INFO, so every library's INFO line reached the console.

* matplotlib's ``generated new fontManager``, on the first plot after installing it (its
  font cache);
* the joblib launcher's ``Joblib.Parallel(n_jobs=-1,backend=loky,...) is launching N jobs`` of
  a ``-m`` sweep (Hydra's own ``Launching jobs, sweep output dir`` and the jobs' overrides stay);
* jax's backend probing (``Unable to initialize backend 'tpu'``) and absl's, where orbax logs
  every save.

Warnings and errors of these loggers still show.
"""

from __future__ import annotations

import logging

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
