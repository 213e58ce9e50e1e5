"""What ``evorl-train`` does to its command line before Hydra reads it (see :mod:`evorl.app.cli`):
plain ``key=value`` overrides may add keys, an unknown ``--config-name`` is one line, and the
Hydra settings of a run folder without ``.hydra/`` or a log file; and the config of
``resume=<run>``: that run's own, this command's overrides on top."""

from __future__ import annotations

import re
import sys

from evorl.app.cli_errors import plain_config
from evorl.app.config_groups import GROUPS, config_names
from evorl.config.errors import did_you_mean
from evorl.config.experiment import (  # noqa: F401  (importable from here too)
    IDENTITY_KEYS, check_resume_identity, check_resume_override, check_resume_override_kind, resume_elsewhere,
)
from evorl.config.training import RUN_LENGTH_KEYS

_PLAIN_OVERRIDE = re.compile(r"^[A-Za-z_][\w.\-]*=")


def allow_new_keys(argv: list[str]) -> list[str]:
    """Turns plain ``key=value`` overrides into Hydra's ``++key=value`` (add or override).

    A config file lists only the keys it changes, so Hydra alone would reject overriding
    any other valid key (``training.eval_interval=5``). Unknown keys are not lost: evorl's
    own validation rejects them with the closest valid key. ``hydra.*`` keys and config group
    choices (``algo=a2c``, ``env=acrobot``) are left alone.
    """
    return [
        f"++{arg}" if _PLAIN_OVERRIDE.match(arg) and not arg.startswith("hydra.")
        and arg.split("=", 1)[0] not in GROUPS else arg
        for arg in argv
    ]


#: Hydra's command-line options that take the next argument as their value.
VALUE_OPTIONS = frozenset({"--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd", "--cfg", "-c",
                           "--package", "-p", "--experimental-rerun"})
#: ``--info``'s optional value.
INFO_CHOICES = frozenset({"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"})


def overrides_last(args: list[str]) -> list[str]:
    """``args`` (the command line after the program) with the options and their values first,
    in their order, and then the overrides, in theirs.

    Hydra parses its command line with ``argparse``, which takes the overrides as one run of
    positional arguments. ``seed=1 --cfg job`` followed by the settings evorl appends would be
    two runs, and the second one is refused as "unrecognized arguments". So would
    ``algo=sac --config-name X seed=1``, typed by hand. With the overrides gathered at the
    end, both mean what they say."""
    options, overrides, takes_value = [], [], False
    for arg in args:
        if takes_value or arg.startswith("-"):
            options.append(arg)
            takes_value = not takes_value and arg in VALUE_OPTIONS
        elif options and options[-1] in ("--info", "-i") and arg in INFO_CHOICES:
            options.append(arg)
        else:
            overrides.append(arg)
    return options + overrides


def option_value(argv: list[str], *names: str) -> str | None:
    """The value of the command-line option ``--name=value`` or ``--name value`` (the last one)."""
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
            elif arg == name and i + 1 < len(argv):
                value = argv[i + 1]
    return value


def check_config_name(argv: list[str]) -> None:
    """An unknown ``--config-name`` (of evorl's own configs) is one line naming the closest
    names, then every valid one, exit status 2 (Hydra would print its search path)."""
    name = option_value(argv, "--config-name", "-cn")
    if name is None or option_value(argv, "--config-path", "-cp", "--config-dir", "-cd") is not None:
        return
    names = config_names()
    if name.removesuffix(".yaml") not in names:
        print(f"evorl: unknown config name {name!r}.{did_you_mean(name.removesuffix('.yaml'), names)} "
              f"Valid: {', '.join(names)} "
              f"(or a config group: {'; '.join(f'{g}=<name>' for g in GROUPS if g != 'tuned')}).",
              file=sys.stderr, flush=True)
        sys.exit(2)


def hydra_settings(argv: list[str]) -> list[str]:
    """The Hydra overrides ``evorl-train`` adds to the command line: the job's name (else
    Hydra names the job after this module), no ``.hydra/`` folder and no log file in the run
    folder (see :mod:`evorl.app.cli`), and for ``resume=<run>`` Hydra's run folder set to that
    run (else Hydra would create an unused ``outputs/<date>/<time>``)."""
    given = {arg.lstrip("+").split("=", 1)[0] for arg in argv}
    extra = []
    if "hydra.job.name" not in given:
        extra.append("hydra.job.name=train")
    if "hydra.output_subdir" not in given:
        extra.append("hydra.output_subdir=null")
    if "hydra/job_logging" not in given:
        extra.append("hydra/job_logging=stdout")
    resume = [arg.split("=", 1)[1] for arg in argv if arg.lstrip("+").startswith("resume=")]
    if resume and resume[-1] and "hydra.run.dir" not in given:
        from evorl.app.run_folder import run_folder_of

        folder = run_folder_of(resume[-1])  # a file of a run folder stands for the folder
        if folder.is_dir() and resume[-1].lower() not in ("true", "false", "null"):  # else: the error, then no folder
            extra.append(f"hydra.run.dir={folder}")
    return extra


def resume_config(run_dir: str, overrides: list[str]) -> dict:
    """The config saved in ``run_dir`` with the command-line ``overrides`` applied on top."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from evorl.app.run_folder import load_run_config, run_folder_of

    run_dir = str(run_folder_of(run_dir))  # resume=<run>/run.json: that run's folder
    cfg = OmegaConf.create(load_run_config(run_dir))
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        check_resume_override(run_dir, key, override.value())
        if key.startswith("hydra.") or key == "resume":
            continue
        check_resume_override_kind(override.is_delete() or override.is_sweep_override(), override.input_line)
        OmegaConf.update(cfg, key, override.value(), force_add=True)
        run_length = [f"training.{k}" for k in RUN_LENGTH_KEYS]
        if key in run_length and override.value() is not None:  # the run's length, set the other way
            OmegaConf.update(cfg, next(k for k in run_length if k != key), None, force_add=True)
    return {**plain_config(cfg), "resume": run_dir}


