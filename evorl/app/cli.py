"""Command-line entry points: ``evorl-train`` (= ``scripts/train.py``, Hydra), and the
``evorl-eval`` / ``evorl-plot`` entry points of ``evorl.app.scripts``.

The configs ship inside the package (``evorl/configs``, which is the repository's
``configs/`` folder), so ``evorl-train`` finds them from any directory. The default config is
composed from the config groups ``algo/``, ``env/`` and ``tuned/`` (see
:mod:`evorl.app.config_groups`). ``evorl-train --help`` prints evorl's own help (config names,
algorithms, env types, the keys of each section: :mod:`evorl.app.cli_help`); ``--list-envs [TYPE]``
lists the environments of each env type.

What a run folder holds is evorl's own files only: Hydra writes no ``.hydra/`` subfolder and
no log file into it (``hydra.output_subdir=null``, ``hydra/job_logging=stdout``): every console
line at a logging point is in ``metrics.jsonl`` and ``metrics.csv`` at full precision, and
``run.json`` records how the run ended, so a ``train.log`` would only repeat them (and was
empty: evorl prints, it does not log). A run that fails before writing anything (a config
error) leaves no empty folder behind, and ``resume=<run>`` runs in that run's folder.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from evorl.app.cli_args import (
    allow_new_keys, check_config_name, check_resume_identity, hydra_settings, option_value, overrides_last,
    resume_config,
)
from evorl.app.cli_errors import (
    hydra_error_line, missing_config_line, plain_config, raised_in, undecodable_config_line, yaml_error_line,
)
from evorl.app.config_groups import CONFIG_DIR as _CONFIG_PATH
from evorl.config import ConfigError
from evorl.config.experiment import check_resume_folder, check_resume_value
from evorl.config.logging import LoggingConfig
from evorl.engine.recording import StartupLines
from evorl.engine.processes import EXIT_PEER_LOST
from evorl.log_noise import quiet_third_party_logs

CONFIG_DIR = str(_CONFIG_PATH)


def train(cfg: Any) -> dict[str, float]:
    """Trains the workflow ``cfg.workflow_cls`` names in its run folder (Hydra's output dir
    unless ``output_dir`` is set) and prints the final evaluation.

    With ``resume=<run folder>`` the config is that run's ``config.yaml`` with this command's
    overrides on top (see :func:`resume_config`).
    """
    quiet_third_party_logs()  # Hydra logs at INFO: jax's backend probing, orbax's saves, matplotlib's font cache
    enable_compilation_cache()
    from evorl.app.experiment import run_experiment

    start = time.perf_counter()
    hydra_dir = _hydra_output_dir()
    try:
        cfg = plain_config(cfg)
        resume = cfg.get("resume")
        check_resume_value(resume)  # resume=true: Hydra reads the word as a boolean
        if resume and isinstance(resume, str):
            resumed = resume_config(resume, _hydra_overrides())
            check_resume_folder(resumed["resume"], hydra_dir is None or Path(hydra_dir).resolve() ==
                                Path(resumed["resume"]).resolve(), f"hydra.run.dir={hydra_dir}")
            cfg = resumed if _hydra_config_name() in (None, "config") else check_resume_identity(cfg, resumed)
        output_dir = cfg.get("output_dir") or hydra_dir
        _current_run["dir"] = cfg.get("resume") or output_dir
        result = run_experiment(cfg, output_dir=output_dir, defaults=False, label=_job_label(cfg))
    finally:  # a config error (or resume=, which writes into its own folder) leaves Hydra's folder empty
        if hydra_dir is not None:
            remove_empty_dirs(Path(hydra_dir), stop_at=Path.cwd())
    workflow, final = result.workflow, result.final_metrics
    episodes = workflow.config.training.eval_episodes
    if "eval/episode_return/std" in final:  # a population: spread across its agents
        alive = workflow.alive_agents()  # frozen (diverged) agents are left out
        agents = f"{workflow.num_agents} agents" if alive is None or alive.all() else \
            f"the {int(alive.sum())} of {workflow.num_agents} agents that did not diverge"
        summary = (f"final evaluation of {agents} x {episodes} episodes: mean return "
                   f"{final['eval/episode_return']:.2f} +- {final['eval/episode_return/std']:.2f} across agents "
                   f"(agents' min {final['eval/episode_return/min']:.1f}, max {final['eval/episode_return/max']:.1f})")
        per_agent = (result.final_per_agent or {}).get("eval/episode_return")
        if per_agent and len(per_agent) <= 16:  # a few seeds: each one's (run.json has them all)
            summary += "; each: " + ", ".join("frozen" if v is None else f"{v:.1f}" for v in per_agent)
    else:
        summary = (f"final evaluation over {episodes} episodes: return {final['eval/episode_return']:.2f} "
                   f"+- {final['eval/episode_return_std']:.2f} (min {final['eval/episode_return_min']:.1f}, "
                   f"max {final['eval/episode_return_max']:.1f})")
    from evorl.engine.processes import is_main_process

    if not is_main_process():  # process 0 reports for all
        return final
    print(
        f"[{_job_label(cfg) or workflow.name()}] {summary}; "
        f"compile {workflow.compile_seconds:.1f}s, total {time.perf_counter() - start:.1f}s"
        + (f"; run folder {result.run_dir}" if result.run_dir else ""),
        flush=True,
    )
    return final


def shows_console(cfg: Any) -> bool:
    """Whether the run of the composed config ``cfg`` (not validated yet) prints to the console:
    it names the ``console`` recorder (the default does) and is process 0 (or one process)."""
    logging, distributed = cfg.get("logging") or {}, cfg.get("distributed") or {}
    return "console" in logging.get("recorders", LoggingConfig.recorders) and distributed.get("process_id") in (None, 0)


#: The run folder of the run this process trains (for a lost peer noticed by another thread).
_current_run: dict[str, Any] = {"dir": None}


def _job_label(cfg: dict) -> str | None:
    """``PPO job 3`` for job 3 of a Hydra multirun (``-m``), whose console lines interleave;
    None (the workflow's name) for a single run."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    from evorl.app.config_groups import ALGO_NODE

    workflow_cls = cfg.get("workflow_cls") or (cfg.get(ALGO_NODE) or {}).get("workflow_cls")
    try:
        from evorl.workflows import resolve_workflow_cls

        name = resolve_workflow_cls(workflow_cls).name()
    except ConfigError:  # reported by the config's validation
        return None
    return f"{name} job {HydraConfig.get().job.num}"


def remove_empty_dirs(path: Path, stop_at: Path) -> None:
    """Removes ``path`` if it is an empty folder, then each parent that is left empty, up to
    (not including) ``stop_at``; a folder outside ``stop_at`` is removed alone, if empty."""
    path, stop_at = path.resolve(), stop_at.resolve()
    inside = stop_at in path.parents
    while path != stop_at and path.is_dir() and not any(path.iterdir()):
        path.rmdir()
        path = path.parent
        if not inside:
            return


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


def _hydra_config_name() -> str | None:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().job.config_name if HydraConfig.initialized() else None


def _hydra_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def _hydra_output_dir() -> str | None:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.output_dir if HydraConfig.initialized() else None


#: Exit status of ``evorl-train`` when training diverged (a bad config or checkpoint: 2).
EXIT_DIVERGED = 3
#: Exit status of ``evorl-train`` when the disk (or quota) was full.
EXIT_NO_SPACE = 4
# EXIT_PEER_LOST (5, from evorl.engine.processes): another process of a multi-process run stopped responding.
#: Exit status of ``evorl-train`` when an actor thread failed or an environment step hung.
EXIT_ACTOR_FAILED = 6


@contextlib.contextmanager
def exit_on_config_error():
    """A bad config, an unusable checkpoint or a run folder in use by another run is the user's
    input, not a crash: one message on stderr and exit status 2. Training that diverged: one
    message and exit status 3; a full disk: one message naming the file and status 4; another
    process that stopped responding: one message and status 5, at once (``os._exit``: JAX's
    shutdown would wait for the lost process, then abort); an actor that raised or an env step
    that hung (asynchronous runner): the actor's traceback and status 6; stopped by SIGTERM /
    SIGINT: one message and status 143 / 130."""
    from evorl.app.checkpoint import CheckpointError
    from evorl.engine.processes import PeerLost
    from evorl.app.run_folder import NoSpaceLeft, RunFolderInUse, is_disk_full
    from evorl.engine.actors import ActorLearnerError
    from evorl.engine.health import TrainingDiverged
    from evorl.engine.host_loop import TrainingInterrupted

    previous_hook = threading.excepthook
    threading.excepthook = _quiet_about_lost_peers(previous_hook)
    try:
        yield
    except ConfigError as e:
        print(f"evorl: config error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except CheckpointError as e:
        print(f"evorl: checkpoint error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except RunFolderInUse as e:
        print(f"evorl: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except ImportError as e:  # an optional extra that is not installed, named by its message
        if "pip install" not in str(e):
            raise
        print(f"evorl: missing package: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except TrainingDiverged as e:
        print(f"evorl: {e}", file=sys.stderr, flush=True)
        sys.exit(EXIT_DIVERGED)
    except OSError as e:
        if not is_disk_full(e):
            raise
        error = e if isinstance(e, NoSpaceLeft) else NoSpaceLeft(e.filename or "a file it did not name")
        print(f"evorl: {error}", file=sys.stderr, flush=True)
        sys.exit(EXIT_NO_SPACE)
    except PeerLost as e:
        _leave_peer_lost(e)
    except ActorLearnerError as e:
        print(f"evorl: {e}", file=sys.stderr, flush=True)
        sys.exit(EXIT_ACTOR_FAILED)
    except TrainingInterrupted as e:  # by a signal: the shell's status for it (128 + its number)
        print(f"evorl: {e}", file=sys.stderr, flush=True)
        sys.exit(128 + signal.Signals[e.reason] if e.reason in signal.Signals.__members__ else 1)
    finally:
        threading.excepthook = previous_hook


#: Seconds a process waits, after a background thread saw a lost peer, for its main thread
#: to notice too (and record the failure in run.json) before it leaves on its own.
PEER_LOST_GRACE_SECONDS = 10.0
_leaving = threading.Lock()


def _leave_peer_lost(error: BaseException) -> None:
    """One line and exit status 5, at once (``os._exit``: JAX's shutdown would wait for the lost
    process, then abort); whichever thread comes first, the line is printed once."""
    _leaving.acquire()  # never released: the process ends here
    print(f"evorl: {error}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(EXIT_PEER_LOST)


def _quiet_about_lost_peers(default_hook):
    """A ``threading.excepthook`` for a run: a background thread that fails because a peer
    process was lost (orbax's checkpoint thread waits at a barrier with it) prints no
    traceback; the main thread, whose collectives fail too, reports it in one line. Should the
    main thread not notice within ``PEER_LOST_GRACE_SECONDS``, the process leaves anyway."""
    from evorl.engine.processes import peer_lost

    def hook(args) -> None:
        error = peer_lost(args.exc_value, _current_run["dir"])
        if error is None:
            default_hook(args)
            return
        timer = threading.Timer(PEER_LOST_GRACE_SECONDS, _leave_peer_lost, args=(error,))
        timer.daemon = True
        timer.start()
    return hook


@contextlib.contextmanager
def reader_may_stop_early():
    """``evorl-train --help | head``: a reader that stops before the end of the output is not
    an error (exit 0, no BrokenPipeError traceback)."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        sys.exit(0)


def exit_without_teardown(status: int = 0) -> None:
    """Ends the process now that its work is done: runs the exit handlers (logging's, which
    closes Hydra's log file; ``jax.distributed``'s; W&B's), flushes the output streams and
    exits with ``status`` without the interpreter's teardown of every module, which took
    ~0.8 s after the default job (its imports: jax, gymnax, matplotlib, scipy), measured on a
    2-core CPU with ``benchmarks/cold_start.py``. With another non-daemon thread alive it exits
    normally, waiting for that thread.
    For command-line entry points only: it ends the whole process."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if others:
        sys.exit(status)
    atexit._run_exitfuncs()  # what the normal exit runs first (CPython's, stable since 3.0)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError):  # a reader gone, a closed stream
            stream.flush()
    os._exit(status)


def print_untuned_note() -> None:
    """The composed config's ``algo=`` x ``env=`` choice without a measured target, in one
    line on stderr (:func:`~evorl.app.config_groups.untuned_note`)."""
    from hydra.core.hydra_config import HydraConfig

    from evorl.app.config_groups import untuned_note

    if HydraConfig.initialized() and HydraConfig.get().job.config_name == "config":
        note = untuned_note(HydraConfig.get().runtime.choices)
        if note:
            print(f"evorl: {note}", file=sys.stderr, flush=True)


def train_command() -> None:
    """The ``evorl-train`` command (and ``scripts/train.py``): :func:`train_main`, then
    :func:`exit_without_teardown` once it returns (errors exit as usual). SIGINT / SIGTERM
    outside the training loop (starting up, compiling, the final evaluation) end it with one
    line and the shell's status for the signal (:mod:`evorl.app.stop_signals`)."""
    from evorl.app.stop_signals import StoppedOutsideTraining, pending_signal, stopping_outside_training

    with stopping_outside_training():
        try:
            train_main()
            stopped = pending_signal()  # one whose exception Python swallowed after training
            if stopped is not None:
                raise stopped
        except StoppedOutsideTraining as e:
            print(f"evorl: {e}", file=sys.stderr, flush=True)
            sys.exit(e.status)
    exit_without_teardown(0)


def train_main() -> None:
    """``evorl-train [--config-name=NAME] [key=value ...] [-m key=a,b ...]``."""
    started = []  # the task runs: Hydra has composed the config and created its run folder
    main = _hydra_task(started)
    args = sys.argv[1:]
    if _answered_help_or_list_envs(args):
        return
    check_config_name(args)
    sys.argv = [sys.argv[0], *overrides_last(allow_new_keys(sys.argv[1:]))]
    sys.argv += hydra_settings(sys.argv[1:])
    _run_hydra_task(main, args, started)


def _hydra_task(started: list) -> Callable[[], None]:
    """Hydra's entry point over the composed config: :func:`train` it, its config errors in one
    line; ``started`` gets an entry once the task runs."""
    import hydra

    @hydra.main(config_path=CONFIG_DIR, config_name="config", version_base=None)
    def main(cfg) -> None:
        started.append(True)
        print_untuned_note()
        # the first line comes before JAX's seconds of importing (nothing imported it so far)
        with StartupLines(prefix="[evorl] ", enabled=shows_console(cfg)).phase("importing JAX and the workflows",
                                                                             "imported"):
            import evorl.app.experiment  # noqa: F401
        with exit_on_config_error():
            train(cfg)

    return main


def _answered_help_or_list_envs(args: list[str]) -> bool:
    """``--help`` prints the help (True); ``--list-envs`` lists the envs and exits with its status."""
    from evorl.app.cli_help import LIST_ENVS_OPTION, help_text, list_envs_main

    with reader_may_stop_early():
        if "--help" in args or "-h" in args:
            print(help_text(), flush=True)
            return True
        if LIST_ENVS_OPTION in args:
            status = list_envs_main(args[args.index(LIST_ENVS_OPTION) + 1:])
    if LIST_ENVS_OPTION in args:
        sys.exit(status)
    return False


def _run_hydra_task(main: Callable[[], None], args: list[str], started: list) -> None:
    """Runs Hydra's ``main``; an error composing the config or creating its run folder (before
    the task starts) is one ``evorl: config error:`` line and exit status 2."""
    import yaml
    from hydra.errors import CompactHydraException, MissingConfigException

    from evorl.app.run_folder import is_disk_full

    # Hydra prints errors raised while it composes the config (a YAML syntax error in a config
    # file) as tracebacks and exits 1; let them reach us instead, to report them in one line.
    user_full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    quiet_third_party_logs()  # the joblib launcher's Joblib.Parallel(...) line of a -m sweep
    try:
        main()
    except yaml.MarkedYAMLError as e:
        print(f"evorl: config error: {yaml_error_line(e)}", file=sys.stderr, flush=True)
        sys.exit(2)
    except MissingConfigException as e:  # algo=ppo2: one line with the valid options
        if user_full_error:
            raise
        print(f"evorl: config error: {missing_config_line(e)}", file=sys.stderr, flush=True)
        sys.exit(2)
    except UnicodeDecodeError as e:  # a config file in another encoding
        if started:
            raise
        folders = [option_value(args, *names) for names in (("--config-path", "-cp"), ("--config-dir", "-cd"))]
        line = undecodable_config_line(e, [Path(f) for f in folders if f] + [_CONFIG_PATH])
        print(f"evorl: config error: {line}", file=sys.stderr, flush=True)
        sys.exit(2)
    except OSError as e:  # before the task: reading a config file, or creating Hydra's run folder
        if started or is_disk_full(e):
            raise
        problem = (f"cannot create the run folder {e.filename}: {e.strerror or e}. Choose another hydra.run.dir."
                   if raised_in(e, "run_job") else f"cannot read {e.filename}: {e.strerror or e}.")
        print(f"evorl: config error: {problem}", file=sys.stderr, flush=True)
        sys.exit(2)
    except CompactHydraException as e:  # Hydra's own errors about the command line, in one line
        if user_full_error:
            raise
        message = str(e) + (f"\n{e.__cause__}" if e.__cause__ is not None else "")
        print(f"evorl: config error: {hydra_error_line(message)}", file=sys.stderr, flush=True)
        sys.exit(2)
    finally:
        if user_full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
