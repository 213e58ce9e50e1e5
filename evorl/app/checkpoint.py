"""Checkpoints of the whole training state with orbax, and the checks that make resuming safe.

A checkpoint is ``<run>/checkpoints/<iteration>/`` with two items: ``state`` (the training
state pytree: parameters, optimiser state, observation statistics, env state, PRNG key,
counters) and ``meta`` (format version, evorl version, iteration, the experiment config, and
the SHA-256 of every leaf of the state as saved).

orbax checks the checksums of its index (OCDBT b-tree nodes) but not of the array data:
bytes changed in a data file restore as other numbers without an error. So every restore
recomputes the leaves' SHA-256 and compares them with the ones recorded at the save before
the state is used. (Checkpoints written before the checksums were recorded restore unchecked.)

Saves are atomic: orbax writes into a temporary folder and renames it into place only when
every file is written, so a process killed mid-save leaves the previous checkpoints intact
and the half-written folder is never listed as a checkpoint. Saves are asynchronous: the
state is copied to host memory, then written by a background thread while training goes on.

Resuming takes the newest complete checkpoint. If it cannot be read (corrupt files) or does
not fit the config (another format version, workflow, env, agent or training setup), the
run stops with an error naming the checkpoint and the differences: it is never silently
skipped, and nothing in the run folder is changed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from evorl.app.run_folder import checkpoint_dir  # noqa: F401  (its old home)
from evorl.app.run_folder import NoSpaceLeft, is_disk_full, writing
from evorl.config.checkpoint import CheckpointConfig
from evorl.engine.processes import host_copy
from evorl.rl.state_roles import fields_with_role

#: 2: the hyperparameters in the state are named as in the config (``gamma``, IMPALA's
#: ``gae_lambda``; version 1 had ``discount`` and ``vtrace_lambda``). 3: a replay buffer's
#: arrays are stored in rows of one transition per environment (``[capacity / num_envs,
#: num_envs, ...]``; version 2's were flat ``[capacity, ...]``).
FORMAT_VERSION = 3
#: The config sections that define the training trajectory: a resumed run must match the
#: checkpoint's in all of them except :data:`RESUMABLE_CHANGES`.
TRAJECTORY_KEYS = ("workflow_cls", "seed", "env", "agent", "training", "pbt")
#: Keys that may differ (a longer run, other logging; the state does not depend on them,
#: except that ``num_iterations``, or ``total_env_steps`` that sets it, sets the learning-rate
#: annealing of the iterations to come).
RESUMABLE_CHANGES = ("training.num_iterations", "training.total_env_steps", "training.eval_interval",
                     "training.eval_episodes", "training.eval_deterministic")


# orbax refuses to write arrays with no elements, and environment states have some (mjx's
# ``act`` for a model without actuator activations). They carry no data, only a shape that the
# restore template knows, so one element stands in for them on disk.
def _writable(x: np.ndarray) -> np.ndarray:
    return np.zeros((1,), x.dtype) if x.size == 0 else x


def _on_disk(leaf: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((1,) if leaf.size == 0 else leaf.shape, leaf.dtype)


def _refill(leaf: Any, restored: Any) -> Any:
    return np.zeros(leaf.shape, leaf.dtype) if leaf.size == 0 else restored


def config_fields(state: Any) -> tuple[str, ...]:
    """The fields of the state dataclass ``state`` with the ``from_config`` role: set from the
    run's config at every start, so a checkpoint neither holds nor restores them (a resumed
    run's may differ, see :data:`RESUMABLE_CHANGES`)."""
    if not dataclasses.is_dataclass(state):
        return ()
    return fields_with_role(state, "from_config")


def without_config_fields(state: Any) -> Any:
    """``state`` with its :func:`config_fields` left out (None)."""
    names = config_fields(state)
    return state.replace(**dict.fromkeys(names)) if names else state


def leaf_checksums(tree: Any) -> dict[str, str]:
    """``{leaf path: SHA-256 of its bytes}`` of a pytree of host arrays, as saved on disk."""
    return {jax.tree_util.keystr(path): hashlib.sha256(np.ascontiguousarray(leaf).data).hexdigest()
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


class _DropDiskFullLogs(logging.Filter):
    """orbax logs a background save that failed, with its traceback, up to four times before
    it raises the error in the training thread; a full disk is reported once, there."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (is_disk_full(record.getMessage()) or (error is not None and is_disk_full(error)))


_DISK_FULL_LOGS = _DropDiskFullLogs()


class _DropUnreadLeafTasks(logging.Filter):
    """A restore that fails on one leaf of ``directory`` (a truncated manifest) leaves orbax's
    reads of the other leaves failing in tasks nobody awaits; asyncio logs each one when it is
    collected ("Task exception was never retrieved", a traceback each). The first failure is
    already reported, in one line: these follow from it."""

    def __init__(self, directory: Path):
        super().__init__()
        self.directory = str(directory)

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (record.getMessage().startswith("Task exception was never retrieved")
                    and self.directory in str(error if error is not None else record.getMessage()))


def _is_closed_event_loop(error: BaseException | None) -> bool:
    return isinstance(error, RuntimeError) and str(error) == "Event loop is closed"


def _quiet_closed_event_loops(default_hook):
    """A ``sys.unraisablehook`` that drops ``RuntimeError: Event loop is closed``: once a
    save or restore fails (a full disk, a truncated manifest), orbax closes its asyncio loop
    while TensorStore's threads still deliver the results of the other writes to it, and
    each delivery printed a traceback (hundreds of lines before the one-line error). They
    follow from the error already reported; anything else goes to ``default_hook``."""

    def hook(unraisable) -> None:
        if not _is_closed_event_loop(unraisable.exc_value):
            default_hook(unraisable)

    hook.quiets_closed_event_loops = True
    return hook


def _install_quiet_closed_event_loops() -> None:
    if not getattr(sys.unraisablehook, "quiets_closed_event_loops", False):
        sys.unraisablehook = _quiet_closed_event_loops(sys.unraisablehook)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be restored (corrupt, or made by an incompatible run)."""


def config_differences(saved: Any, current: Any, prefix: str = "") -> list[str]:
    """``key: saved -> current`` for every leaf that differs between two nested dicts."""
    if isinstance(saved, dict) and isinstance(current, dict):
        out = []
        for key in sorted(set(saved) | set(current), key=str):
            out += config_differences(saved.get(key), current.get(key), f"{prefix}{key}.")
        return out
    norm = lambda v: list(v) if isinstance(v, tuple) else v  # noqa: E731  (YAML/JSON turn tuples into lists)
    return [] if norm(saved) == norm(current) else [f"{prefix[:-1]}: {saved!r} (checkpoint) -> {current!r} (now)"]


def _saved_whole(state: Any) -> Any:
    return state


def _nothing_to_refill(restored: Any, template: Any) -> Any:
    return restored


class Checkpointer:
    """Saves the training state every ``save_interval`` iterations into ``directory``.

    ``without_buffer(state)`` is the state without what ``checkpoint.save_buffer: false``
    leaves out (an off-policy run's replay buffer); when a checkpoint was written so, whatever
    the current config says, a restore reads that part of the state and
    ``refill_buffer(restored, template)`` puts the template's (a fresh, empty buffer) back.
    The workflow supplies both (``state_without_buffer``, ``state_with_buffer_of``)."""

    def __init__(self, directory: Path | str, config: CheckpointConfig, eval_interval: int,
                 num_iterations: int, run_config: dict, without_buffer: Callable[[Any], Any] = _saved_whole,
                 refill_buffer: Callable[[Any, Any], Any] = _nothing_to_refill):
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.save_buffer = config.save_buffer
        self.without_buffer = without_buffer
        self.refill_buffer = refill_buffer
        self.directory = Path(directory).absolute()
        self.interval = config.save_interval or eval_interval
        self.num_iterations = num_iterations
        self.run_config = run_config
        self._in_flight: int | None = None  # the step of the save that may still be being written
        logging.getLogger("absl").addFilter(_DISK_FULL_LOGS)
        _install_quiet_closed_event_loops()
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=config.max_to_keep, create=False,
                                                 enable_async_checkpointing=True),
        )

    # --- saving -------------------------------------------------------------------------
    def maybe_save(self, state: Any, iteration: int) -> bool:
        if iteration % self.interval and iteration != self.num_iterations:
            return False
        self.save(state, iteration)
        return True

    @property
    def holds_buffer(self) -> bool:
        """Whether the states saved have a part ``checkpoint.save_buffer: false`` leaves out."""
        return self.without_buffer is not _saved_whole

    def save(self, state: Any, iteration: int, with_buffer: bool | None = None) -> None:
        """Saves ``state`` as checkpoint ``iteration``; ``with_buffer=False`` leaves its buffer
        out (and says so in the metadata, as ``checkpoint.save_buffer: false`` would) whatever the
        config says: the state may be one without it already."""
        from evorl import __version__

        with_buffer = self.save_buffer if with_buffer is None else with_buffer
        run_config = self.run_config
        state = without_config_fields(state)
        if not with_buffer:
            state = self.without_buffer(state)
            run_config = {**run_config, "checkpoint": {**(run_config.get("checkpoint") or {}), "save_buffer": False}}
        # Host copies: the training loop donates (reuses) the device buffers of ``state``
        # while the background thread is still writing.
        host_state = jax.tree.map(lambda x: _writable(host_copy(x)), state)
        meta = {"format_version": FORMAT_VERSION, "evorl_version": __version__,
                "iteration": iteration, "config": run_config, "sha256": leaf_checksums(host_state)}
        self.wait()  # for the previous save: an error of its background thread is raised here
        with self._writing(iteration):
            self.directory.mkdir(parents=True, exist_ok=True)
            self.manager.save(iteration, args=self._ocp.args.Composite(
                state=self._ocp.args.StandardSave(host_state), meta=self._ocp.args.JsonSave(meta)))
        self._in_flight = iteration

    def wait(self) -> None:
        """Waits for the save in flight (a full disk raises :class:`~evorl.app.run_folder.NoSpaceLeft`)."""
        step, self._in_flight = self._in_flight, None
        if step is not None:
            with self._writing(step):
                self.manager.wait_until_finished()

    @contextlib.contextmanager
    def _writing(self, step: int):
        """A full disk while saving ``step``: its half-written temporary folder is deleted (it
        would never be used, and the space lets run.json record the failure)."""
        try:
            with writing(self.directory / str(step)):
                yield
        except NoSpaceLeft:
            for partial in self.directory.glob(f"{step}.orbax-checkpoint-tmp*"):
                shutil.rmtree(partial, ignore_errors=True)
            raise

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self.manager.close()

    # --- restoring ----------------------------------------------------------------------
    def steps(self) -> list[int]:
        """Complete checkpoints, oldest first (half-written temporary folders excluded)."""
        self.manager.reload()
        return sorted(self.manager.all_steps())

    def read_meta(self, step: int) -> dict:
        try:
            meta = self.manager.restore(step, args=self._ocp.args.Composite(meta=self._ocp.args.JsonRestore())).meta
        except Exception as e:  # orbax raises many types for unreadable files
            raise self._corrupt(step, _first_line(e)) from None
        if not isinstance(meta, dict) or "format_version" not in meta:
            raise self._corrupt(step, "no evorl metadata")
        return meta

    def restore(self, template: Any, step: int | None = None) -> tuple[Any, dict]:
        """The state of checkpoint ``step`` (default: the newest), shaped like ``template``.

        Raises :class:`CheckpointError` if there is no checkpoint, it cannot be read, or it was
        made by a run whose config does not fit this one (see :data:`RESUMABLE_CHANGES`).
        """
        steps = self.steps()
        if not steps:
            raise CheckpointError(f"No complete checkpoint in {self.directory}.")
        step = steps[-1] if step is None else step
        if step not in steps:
            raise CheckpointError(f"No checkpoint {step} in {self.directory}; complete checkpoints: {steps}.")
        meta = self.read_meta(step)
        self.check_compatible(meta, step)
        full_template, template = template, without_config_fields(template)
        if not self.buffer_saved(meta):  # refilled below with the template's empty buffer
            template = self.without_buffer(template)
        abstract = jax.tree.map(_on_disk, template)
        try:
            restored = self.manager.restore(step, args=self._ocp.args.Composite(
                state=self._ocp.args.StandardRestore(abstract))).state
        except Exception as e:
            logging.getLogger("asyncio").addFilter(_DropUnreadLeafTasks(self.directory))
            raise self._corrupt(step, _first_line(e)) from None
        self._verify_checksums(meta, restored, step)
        restored = jax.tree.map(_refill, template, restored)
        _check_same_structure(template, restored, self.directory / str(step))
        self._check_iteration(meta, restored, step)
        if not self.buffer_saved(meta):
            restored = self.refill_buffer(restored, full_template)
        names = config_fields(full_template)  # this run's, from its config
        if names:
            restored = restored.replace(**{name: getattr(full_template, name) for name in names})
        return restored, meta

    @staticmethod
    def buffer_saved(meta: dict) -> bool:
        """Whether the checkpoint of ``meta`` holds the replay buffer (``checkpoint.save_buffer``)."""
        return (meta.get("config", {}).get("checkpoint") or {}).get("save_buffer", True)

    def _check_iteration(self, meta: dict, restored: Any, step: int) -> None:
        """The iteration in the metadata (which a resume trusts: it drops the metrics logged
        after it) must be the checkpoint's own and, where the state counts iterations, the
        state's (which its checksums vouch for)."""
        counter = getattr(restored, "iteration", None)
        reached = int(np.max(np.asarray(counter))) if counter is not None else None
        said = meta.get("iteration")
        conflicts = ([f"it is checkpoint {step}"] if said != step else []) + (
            [f"its state is at iteration {reached}"] if reached is not None and reached != said else [])
        if conflicts:
            raise self._corrupt(step, f"its metadata says iteration {said}, but {' and '.join(conflicts)}: the "
                                      f"metadata was edited or damaged")

    def check_compatible(self, meta: dict, step: int) -> None:
        where = self.directory / str(step)
        if meta["format_version"] != FORMAT_VERSION:
            raise CheckpointError(
                f"Checkpoint {where} has format version {meta['format_version']}; this evorl "
                f"({_version()}) reads version {FORMAT_VERSION}. Resume it with evorl {meta.get('evorl_version')}."
            )
        allowed = tuple(f"{k}:" for k in RESUMABLE_CHANGES)
        saved, current = ({k: c.get(k) for k in TRAJECTORY_KEYS} for c in (meta.get("config", {}), self.run_config))
        if saved["pbt"] is None and not (current["pbt"] or {}).get("enabled"):
            saved["pbt"] = current["pbt"]  # made before the pbt section existed: without PBT
        diffs = [d for d in config_differences(saved, current) if not d.startswith(allowed)]
        if diffs:
            raise CheckpointError(
                f"Checkpoint {where} was made with a different config, so it cannot be resumed "
                f"exactly:\n  " + "\n  ".join(diffs)
                + "\nResume with the run's own config (its config.yaml), changing at most: "
                + ", ".join(RESUMABLE_CHANGES) + "."
            )

    def _verify_checksums(self, meta: dict, restored: Any, step: int) -> None:
        """Refuses a state whose leaves differ from the SHA-256s recorded at its save (a
        checkpoint written before they were recorded has none: nothing to compare)."""
        if "sha256" not in meta:
            return
        saved, now = meta["sha256"], leaf_checksums(restored)
        differ = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
        if differ:
            shown = ", ".join(differ[:3]) + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
            raise self._corrupt(step, f"the data of {len(differ)} of its {len(now)} arrays does not match the "
                                      f"SHA-256 recorded when it was saved: {shown}; its files were changed or "
                                      f"damaged on disk")

    def _corrupt(self, step: int, problem: str) -> CheckpointError:
        older = [s for s in self.steps() if s < step]
        hint = (f" The older complete checkpoint(s) {older} may still be good: move {self.directory / str(step)} "
                f"out of the way to resume from {older[-1]}.") if older else ""
        return CheckpointError(f"Checkpoint {self.directory / str(step)} cannot be read ({problem}). "
                               f"It was not used and nothing was changed.{hint}")


def _first_line(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def _check_same_structure(template: Any, restored: Any, where: Path) -> None:
    bad = [
        f"{jax.tree_util.keystr(path)}: {a.shape} {a.dtype} (expected) vs {b.shape} {b.dtype} (checkpoint)"
        for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(template), jax.tree.leaves(restored))
        if a.shape != b.shape or a.dtype != b.dtype
    ]
    if len(jax.tree.leaves(template)) != len(jax.tree.leaves(restored)) or bad:
        raise CheckpointError(f"Checkpoint {where} does not fit this workflow's state:\n  " + "\n  ".join(bad))


def _version() -> str:
    from evorl import __version__

    return __version__
