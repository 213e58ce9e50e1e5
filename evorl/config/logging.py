"""The ``logging:`` config section (:mod:`evorl.app.recorders` makes the recorders it names)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from evorl.config.errors import ConfigError, install_hint, require

#: The recorders ``logging.recorders`` may name.
RECORDERS = ("console", "jsonl", "csv", "tensorboard", "wandb")


@dataclass(frozen=True)
class LoggingConfig:
    """The ``logging:`` section. ``metrics.jsonl`` is always written when there is a run
    folder (plots and resume read it); ``recorders`` adds the others."""

    #: Where metrics go besides ``metrics.jsonl``: any of ``console``, ``csv``, ``tensorboard``, ``wandb``.
    recorders: tuple[str, ...] = ("console", "csv")
    #: Console style: ``auto`` (a live bar on a terminal, plain lines otherwise), ``bar``, ``lines``.
    console: str = "auto"
    #: Write ``learning_curve.png`` into the run folder at the end of training.
    plot: bool = True
    #: The Weights & Biases project (with the ``wandb`` recorder).
    wandb_project: str = "evorl"
    #: The Weights & Biases run group (null: none).
    wandb_group: str | None = None

    def validate(self, where: str) -> None:
        for name in self.recorders:
            require(name in RECORDERS, f"Unknown recorder {name!r} in {where}.recorders; valid: {', '.join(RECORDERS)}.")
        require(self.console in ("auto", "bar", "lines"),
                f"{where}.console must be one of auto, bar, lines; got {self.console!r}.")


#: The optional recorders: the module each imports and the extra that installs it.
OPTIONAL_RECORDERS = {"tensorboard": ("tensorboardX", "tensorboard"), "wandb": ("wandb", "wandb")}


def check_recorder_packages(logging: LoggingConfig) -> None:
    """A ``ConfigError`` naming the extra to install when a recorder in ``logging.recorders``
    lacks its package: run before compilation, not when the recorders start after it."""
    for name in logging.recorders:
        if name not in OPTIONAL_RECORDERS:
            continue
        module, extra = OPTIONAL_RECORDERS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"logging.recorders names {name!r}, which needs {module}: "
                              f"{install_hint(extra)}.")
