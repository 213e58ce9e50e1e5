"""Actor processes (``runner.actor_processes=true``): an actor's host environments and its
policy calls in a child process of their own, so that envs whose step holds Python's GIL
(gymnasium's Atari, MuJoCo and pure-Python envs) step in parallel with each other and with
the learner.

:class:`ProcessActorRollout` is :class:`~evorl.engine.actors.HostEnvActorRollout` run in
a child: the actor thread in the learner's process sends ``(acting state, rollout key)`` and
receives the same ``(trajectory [T, B], episode sums)`` as NumPy arrays. The child builds the
``HostEnvActorRollout`` from the same envs, policy, env ids and seeds, so a rollout is the
one a thread would have acted (tested). What crosses the pipe per rollout: the acting state
when its version changed, the key, and the trajectory.

The child is a fresh ``python`` running :func:`main` (not ``multiprocessing``'s spawn,
which would run the user's ``__main__`` again). It starts with the learner process's
``sys.path`` and registered gymnasium envs (an env the user's script registers steps there
too), ``EVORL_ACTOR_PROCESS`` set to the actor's name, and JAX on the CPU (it holds no
accelerator memory). The start of the env step in progress is kept in a shared 8-byte file,
so the learner still ends a run whose env hangs (``runner.env_step_timeout_seconds``); a
child whose learner process died exits within a second; a child that raises or dies ends the
run with its traceback or exit code (:class:`ActorProcessFailed`, reported as the actor's
failure).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

#: The child's program (``python -c``; ``-m`` would import this module twice).
CHILD_COMMAND = "import sys; from evorl.engine.actor_processes import main; sys.exit(main(sys.argv[1:]))"
#: Set to the actor's name (``evorl-actor-K``) in its process's environment variables.
ACTOR_VARIABLE = "EVORL_ACTOR_PROCESS"
#: Seconds :meth:`ProcessActorRollout.close` waits for the child to exit before killing it.
CLOSE_SECONDS = 5.0


class ActorProcessFailed(RuntimeError):
    """The child process of an actor raised (its traceback is in the message) or died."""


def _host_tree(tree: Any) -> Any:
    import jax

    return jax.tree.map(np.asarray, tree)


class ProcessActorRollout:
    """:class:`~evorl.engine.actors.HostEnvActorRollout` (same arguments) in a child
    process; see the module docstring. Starting the child does not wait for it: the first
    call does (the child imports JAX and builds its envs meanwhile)."""

    def __init__(self, envs: list, policy: Any, rollout_length: int, env_ids: np.ndarray, seeds: list[int],
                 name: str = "evorl-actor"):
        import cloudpickle
        import gymnasium

        self.name = name
        # What the child starts from, pickled before it starts (what cannot be sent fails here,
        # with no process to clean up) and read from a file (no child holds up the next one's
        # start): sys.path first, since unpickling the rest may import the user's modules.
        start = pickle.dumps((list(sys.path), cloudpickle.dumps(dict(gymnasium.registry)),
                              cloudpickle.dumps((envs, policy, rollout_length, np.asarray(env_ids), list(seeds)))))
        self._start_file = tempfile.TemporaryFile()
        self._start_file.write(start)
        self._start_file.flush()
        self._clock_file = tempfile.TemporaryFile()
        self._clock_file.write(np.full((1,), np.nan).tobytes())
        self._clock_file.flush()
        self._clock = np.frombuffer(mmap.mmap(self._clock_file.fileno(), 8), np.float64)
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        fds = (to_child_r, from_child_w, self._clock_file.fileno(), self._start_file.fileno())
        env = {**os.environ, "JAX_PLATFORMS": "cpu", ACTOR_VARIABLE: name}
        self._process = subprocess.Popen(
            [sys.executable, "-c", CHILD_COMMAND, *map(str, fds), str(os.getpid())],
            pass_fds=fds, env=env, close_fds=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._send, self._receive = Connection(to_child_w, readable=False), Connection(from_child_r, writable=False)
        self._sent_state: Any = None
        self._lock = threading.Lock()

    @property
    def step_started(self) -> float | None:
        started = float(self._clock[0])
        return None if np.isnan(started) else started

    def __call__(self, agent_state, key):
        """One rollout in the child: ``(trajectory [T, B] or [N, T, B], episode sums)``."""
        acting = None if agent_state is self._sent_state else _host_tree(agent_state)
        with contextlib.suppress(OSError):  # a child that ended has left its traceback in the pipe
            self._send.send(("rollout", acting, np.asarray(key)))
        try:
            reply = self._receive.recv()
        except (EOFError, OSError):
            raise ActorProcessFailed(self._died()) from None
        self._sent_state = agent_state
        if reply[0] == "error":
            raise ActorProcessFailed(f"{self.name}'s process (pid {self._process.pid}) raised:\n{reply[1]}")
        return reply[1], reply[2]

    def _died(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(1.0)
        code = self._process.poll()
        how = "is not answering" if code is None else f"exited with code {code}"
        return (f"{self.name}'s process (pid {self._process.pid}) {how} during a rollout"
                f"{' (killed by a signal)' if code is not None and code < 0 else ''}.")

    def interrupt(self) -> None:
        """Kills the child (an env step that never returns); the waiting call then raises."""
        with contextlib.suppress(ProcessLookupError):
            self._process.kill()

    def close(self) -> None:
        with self._lock:
            if self._process.poll() is None:
                with contextlib.suppress(OSError, ValueError):
                    self._send.send(("close",))
                try:
                    self._process.wait(CLOSE_SECONDS)
                except subprocess.TimeoutExpired:
                    self.interrupt()
                    self._process.wait()
            for conn in (self._send, self._receive):
                conn.close()
            self._clock_file.close()
            self._start_file.close()


# --- the child --------------------------------------------------------------------------
def _exit_with_parent(parent: int) -> None:
    """Ends this process within a second of its parent's end (also inside a stuck env step)."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def _serve(to_child: Connection, from_child: Connection, clock: np.ndarray, start: bytes) -> None:
    import cloudpickle

    sys.path[:], registry, payload = pickle.loads(start)
    import gymnasium
    import jax

    for env_id, spec in cloudpickle.loads(registry).items():
        gymnasium.registry.setdefault(env_id, spec)
    from evorl.engine.actors import HostEnvActorRollout

    rollout = None
    try:
        envs, policy, rollout_length, env_ids, seeds = cloudpickle.loads(payload)
        rollout = HostEnvActorRollout(envs, policy, rollout_length, env_ids, seeds, clock=clock)
        agent_state = None
        while True:
            message = to_child.recv()
            if message[0] == "close":
                return
            _, acting, key = message
            if acting is not None:
                agent_state = jax.device_put(acting)
            trajectory, episodes = rollout(agent_state, jax.numpy.asarray(key))
            from_child.send(("ok", _host_tree(trajectory), _host_tree(episodes)))
    finally:
        if rollout is not None:
            rollout.close()


def main(argv: list[str]) -> int:
    # Ctrl-C reaches the whole process group: the learner's process stops its actors itself
    # (after its current update, with a checkpoint), so the child does not stop on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    to_child_fd, from_child_fd, clock_fd, start_fd, parent = map(int, argv)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    clock = np.frombuffer(mmap.mmap(clock_fd, 8), np.float64)
    to_child, from_child = Connection(to_child_fd, writable=False), Connection(from_child_fd, readable=False)
    with os.fdopen(start_fd, "rb") as f:
        f.seek(0)  # the offset is shared with the parent's copy, left at the end by its write
        start = f.read()
    try:
        _serve(to_child, from_child, clock, start)
    except EOFError:  # the learner's process closed the pipe: nothing to report to
        return 0
    except BaseException as e:  # noqa: BLE001 (every failure is reported to the learner)
        with contextlib.suppress(OSError):
            from_child.send(("error", "".join(traceback.format_exception(e))))
        return 1
    return 0
