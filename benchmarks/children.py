"""Child processes that never outlive their parent: for the scripts that measure in children.

A TPU is held by one process at a time. A measuring child left running after its parent was
stopped (a timeout, Ctrl-C, ``timeout`` around the whole script) keeps the chip, and every later
process fails with "The TPU is already in use" or libtpu's lockfile error. So each child here
runs in its own process group, which is killed on a timeout and when the parent is terminated.
This module imports no JAX: a parent that only launches children must not open the backend.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

_running: set[subprocess.Popen] = set()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _on_terminate(signum, frame) -> None:
    for proc in list(_running):
        _kill_group(proc)
    sys.exit(128 + signum)


def popen(cmd: list[str], **kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a new process group, killed with its group when this process is
    terminated; :func:`finish` it once it has ended."""
    if signal.getsignal(signal.SIGTERM) is not _on_terminate:
        signal.signal(signal.SIGTERM, _on_terminate)
    proc = subprocess.Popen(cmd, text=True, start_new_session=True, **kwargs)
    _running.add(proc)
    return proc


def kill(proc: subprocess.Popen) -> None:
    """Kill ``proc`` and every process it started."""
    _kill_group(proc)


def finish(proc: subprocess.Popen) -> None:
    _running.discard(proc)


def run(cmd: list[str], timeout: float | None = None, **kwargs) -> tuple[int | None, str, str]:
    """Run ``cmd`` to the end or to ``timeout`` seconds; returns (exit code or None on a
    timeout, stdout, stderr), with what the child printed before a timeout kept."""
    proc = popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return None, out or "", err or ""
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        _running.discard(proc)
