"""The processes of a multi-process run: ``jax.distributed`` started (:func:`initialize`),
process 0 as the one that writes (:func:`is_main_process`), whole arrays gathered to the host
(:func:`host_copy`), and a lost peer recognised (:func:`peer_lost`) or watched for.

Watching the other processes for one that stops without dying:

A process that dies closes its sockets: the others' next collective fails with gloo's
connection error and they leave with :class:`~evorl.engine.processes.PeerLost`. A process that is
stopped (SIGSTOP, a debugger, its host cut off) sends nothing: the others' collectives wait
forever, and JAX's coordination service, once it misses the process's heartbeats, aborts
every process with a C++ stack trace (exit 134; its callback for this cannot be used from
Python in jaxlib 0.10), leaving ``run.json`` saying ``running``.

:class:`PeerWatch` acts first. Every process publishes a counter in the coordination
service's key-value store each :data:`BEAT_SECONDS` and reads the others'. A counter that
has not moved for ``timeout`` seconds, or a store that has not answered for that long (process
0, which holds it, is the stopped one), means a lost peer: the handler of the run in progress
records it (``run.json`` failed, half-written checkpoint folders removed), then the process
prints one line and leaves with :data:`EXIT_PEER_LOST`. JAX's own heartbeat timeout is set
:data:`JAX_GRACE_SECONDS` longer (:func:`evorl.engine.processes.initialize`). A process that ends
normally marks its counter ``done`` (``atexit``), so the others never wait for it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: Exit status of a process whose peer stopped responding (``evorl-train``'s too).
EXIT_PEER_LOST = 5
#: How often each process publishes its counter and reads the others'.
BEAT_SECONDS = 1.0
#: How much longer JAX's own heartbeat timeout is than the watch's, so the watch acts first.
JAX_GRACE_SECONDS = 30
_KEY = "evorl/heartbeat/{}"
_DONE = "done"


def resume_argument(run_dir: Path | str | None) -> str:
    """What continues a stopped run: ``resume=<its absolute path>`` (``resume=<run folder>``
    when the folder is not known)."""
    return f"resume={os.path.abspath(run_dir)}" if run_dir is not None else "resume=<run folder>"


def peer_lost_message(who: str, sign: str, run_dir: Any = None) -> str:
    """The one line for a lost peer: who, the sign seen, and how to continue."""
    import jax

    count, index = jax.process_count(), jax.process_index()
    return (f"{who} stopped responding ({sign}); process {index} stops too. Start all {count} processes "
            f"again with {resume_argument(run_dir)} to continue from the newest complete checkpoint.")


def process_name(other: int) -> str:
    """How the message names process ``other``: ``process 1 of 2``."""
    import jax

    return f"process {other} of {jax.process_count()}"


class PeerWatch:
    """Publishes this process's heartbeat and watches the others' (see the module docstring).
    ``client`` is JAX's coordination client (``key_value_set`` / ``key_value_try_get``)."""

    def __init__(self, client: Any, process_index: int, num_processes: int, timeout: float):
        self.client, self.index, self.timeout = client, process_index, timeout
        self.peers = [i for i in range(num_processes) if i != process_index]
        now = time.monotonic()
        self._seen = {p: (None, now) for p in self.peers}  # last value and when it last changed
        self._answered = now  # when the store last answered
        self._counter = 0
        self._stopped = threading.Event()
        #: The run in progress: its folder (for the message) and what records its failure.
        self.run_dir: Path | None = None
        self.on_lost: Callable[[str], None] | None = None

    def start(self) -> "PeerWatch":
        for target, name in ((self._beat, "evorl-heartbeat"), (self._watch, "evorl-peer-watch")):
            threading.Thread(target=target, name=name, daemon=True).start()
        atexit.register(self.finish)
        return self

    def finish(self) -> None:
        """This process ends normally: the others stop watching it."""
        self._stopped.set()
        with contextlib.suppress(Exception):
            self.client.key_value_set(_KEY.format(self.index), _DONE, allow_overwrite=True)

    # --- the two threads ---------------------------------------------------------------
    def _beat(self) -> None:
        """Publishes the counter and reads the others' (a stopped process 0 blocks it: the
        watch then sees the store silent)."""
        while not self._stopped.wait(BEAT_SECONDS):
            try:
                self._counter += 1
                self.client.key_value_set(_KEY.format(self.index), str(self._counter), allow_overwrite=True)
                values = {p: self._read(p) for p in self.peers}
            except Exception:  # the service is gone (a dead process 0): the collectives report it
                continue
            now = time.monotonic()
            self._answered = now
            for p, value in values.items():
                if value != self._seen[p][0]:
                    self._seen[p] = (value, now)

    def _read(self, peer: int) -> str | None:
        try:
            return self.client.key_value_try_get(_KEY.format(peer))
        except Exception:  # not published yet
            return None

    def _watch(self) -> None:
        while not self._stopped.wait(BEAT_SECONDS):
            lost = self.lost(time.monotonic())
            if lost is not None:
                self.leave(lost)

    def lost(self, now: float) -> str | None:
        """The message for a lost peer at time ``now``, or None while all answer."""
        silent = int(self.timeout)
        if now - self._answered > self.timeout:
            who = process_name(0) if self.index != 0 else "the coordination service"
            return peer_lost_message(who, f"no heartbeat for {silent} s", self.run_dir)
        for p, (value, changed) in self._seen.items():
            if value != _DONE and now - changed > self.timeout:
                return peer_lost_message(process_name(p), f"no heartbeat for {silent} s", self.run_dir)
        return None

    def leave(self, message: str) -> None:
        """Records the failure (the run's handler), prints ``message`` and ends the process."""
        if self.on_lost is not None:
            with contextlib.suppress(Exception):
                self.on_lost(message)
        print(f"evorl: {message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(EXIT_PEER_LOST)


_watch: dict[str, PeerWatch | None] = {"current": None}


def start_watch(client: Any, process_index: int, num_processes: int, timeout: float) -> PeerWatch:
    _watch["current"] = PeerWatch(client, process_index, num_processes, timeout).start()
    return _watch["current"]


@contextlib.contextmanager
def watching_run(run_dir: Path | None, on_lost: Callable[[str], None]):
    """While a run trains: a lost peer is reported with ``run_dir``'s ``resume=`` and
    ``on_lost(message)`` records it. A no-op in a single-process run."""
    watch = _watch["current"]
    if watch is None:
        yield
        return
    watch.run_dir, watch.on_lost = run_dir, on_lost
    try:
        yield
    finally:
        watch.run_dir, watch.on_lost = None, None


def initialize(cfg) -> bool:
    """Starts ``jax.distributed`` for a :class:`~evorl.config.DistributedConfig` that asks for
    several processes (once per process, before any JAX computation), and the watch of the
    other processes' heartbeats (:mod:`evorl.engine.processes`). Returns whether this
    process is part of a multi-process run. On the CPU, collectives use gloo."""
    import jax

    if not cfg.multi_process:
        return jax.process_count() > 1
    if _initialized["done"]:
        return True
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    kwargs = dict(
        heartbeat_timeout_seconds=cfg.heartbeat_timeout_seconds,
        initialization_timeout=cfg.initialization_timeout_seconds,
    )
    if not cfg.auto:
        kwargs.update(coordinator_address=cfg.coordinator_address, num_processes=cfg.num_processes,
                      process_id=cfg.process_id)
    # JAX's own watch aborts with a C++ stack trace: ours (peer_watch) acts first
    kwargs["heartbeat_timeout_seconds"] = cfg.heartbeat_timeout_seconds + JAX_GRACE_SECONDS
    jax.distributed.initialize(**kwargs)
    _initialized["done"] = True
    from jax._src.distributed import global_state  # the coordination client (no public handle)

    start_watch(global_state.client, jax.process_index(), jax.process_count(), cfg.heartbeat_timeout_seconds)
    return True


_initialized = {"done": False}


def host_copy(x: Any) -> np.ndarray:
    """A NumPy copy of the whole array on the host. An array split across processes (e.g.
    their environments) is gathered first, so every process gets the same, complete array."""
    import jax
    import numpy as np

    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.array(x)


class PeerLost(RuntimeError):
    """Another process of a multi-process run stopped responding (it died, or its host did), so
    the collectives cannot go on. JAX cannot shut down cleanly after this (its shutdown barrier
    waits for the lost process, then aborts): leave the process with ``os._exit``, as
    ``evorl-train`` does."""


#: Parts of the messages of errors of the collectives (gloo on CPUs, NCCL on GPUs) and of the
#: coordination service, and the signs among them that a peer is gone, the most telling first.
COLLECTIVE_ERRORS = ("Gloo", "NCCL", "coordination service", "heartbeat")
PEER_LOST_SIGNS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "heartbeat timeout",
                   "Socket closed")


def peer_lost(error: BaseException | None, run_dir: Any = None) -> PeerLost | None:
    """The :class:`PeerLost` that ``error`` means, or None: in a multi-process run, an error of a
    collective (JAX raises them as ``JaxRuntimeError`` or ``ValueError``) that names a lost
    connection or missed heartbeats; or an error raised because of one (orbax's checkpoint
    thread raises a ``TimeoutError`` from the coordination service's error), so the chain of
    causes is read too. Its message names the ``resume=`` of ``run_dir``, the run's folder."""
    import jax

    if error is None or jax.process_count() == 1:
        return None
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        chain.append(str(error))
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    text = next((t for t in chain if any(name in t for name in COLLECTIVE_ERRORS)
                 and any(s in t for s in PEER_LOST_SIGNS)), None)
    if text is None:
        return None
    sign = next(s for s in PEER_LOST_SIGNS if s in text)
    count, index = jax.process_count(), jax.process_index()
    who = process_name(1 - index) if count == 2 else f"one of the other {count - 1} processes (of {count})"
    return PeerLost(peer_lost_message(who, sign, run_dir))


def is_main_process() -> bool:
    """Process 0 writes logs and checkpoints; the others only compute."""
    import jax

    return jax.process_index() == 0
