"""Watching the other processes of a multi-process run for one that stops without dying.

A process that dies closes its sockets: the others' next collective fails with gloo's
connection error and they leave with :class:`~evorl.distributed.PeerLost`. A process that is
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
:data:`JAX_GRACE_SECONDS` longer (:func:`evorl.distributed.initialize`). A process that ends
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
from typing import Any

#: Exit status of a process whose peer stopped responding (``evorl-train``'s too).
EXIT_PEER_LOST = 5
#: How often each process publishes its counter and reads the others'.
BEAT_SECONDS = 1.0
#: How much longer JAX's own heartbeat timeout is than the watch's, so the watch acts first.
JAX_GRACE_SECONDS = 30
_KEY = "evorl/heartbeat/{}"
_DONE = "done"


def peer_lost_message(who: str, sign: str, run_dir: Any = None) -> str:
    """The one line for a lost peer: who, the sign seen, and how to continue."""
    import jax

    from evorl.run_folder import resume_argument

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
