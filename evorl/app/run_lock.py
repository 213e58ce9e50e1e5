"""One writer at a time in a run folder: :class:`RunFolderLock`, an exclusive ``flock`` on
``<run>/run.lock`` (:data:`LOCK_FILE`) holding its holder's pid, host and start time, and
:class:`RunFolderInUse` when another live process holds it. The folder's other files are
:mod:`evorl.app.run_folder`'s."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

LOCK_FILE = "run.lock"


def timestamp() -> str:
    """Now, local time with its UTC offset, to the second (as run.lock and run.json record it)."""
    return datetime.datetime.now(datetime.timezone.utc).astimezone().isoformat(timespec="seconds")


class RunFolderInUse(RuntimeError):
    """Another live process holds the run folder's lock."""


class RunFolderLock:
    """An exclusive ``flock`` on ``<run>/run.lock``, which holds the holder's pid, host and
    start time (for the messages). The kernel drops the lock when its process ends, however
    it ends, so a lock file left by a dead process is free and is taken over. Taken before
    anything is written, released (and the file removed) when the run ends::

        with RunFolderLock(run_dir):
            ...  # write the run folder
    """

    def __init__(self, run_dir: Path | str, announce: bool = True):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None
        #: Print the take-over of a lock left by an ended process when it happens (else the
        #: caller reports :attr:`previous`, e.g. with the rest of what it found).
        self.announce = announce
        #: The record (pid, host, start time) of the ended process whose lock was taken over.
        self.previous: dict | None = None

    def __enter__(self) -> RunFolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise RunFolderInUse(self._in_use_message()) from None
            try:  # the holder before us may have removed the file while we waited for it
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.previous = _holder(os.read(fd, 4096))
        if self.previous and self.announce:
            print(f"evorl: {self.path.parent}: {self.takeover_note()}", file=sys.stderr, flush=True)
        record = {"pid": os.getpid(), "host": platform.node(), "start_time": timestamp()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._fd = fd

    def takeover_note(self) -> str | None:
        """What :meth:`acquire` found: the lock of an ended process taken over (or None)."""
        if not self.previous:
            return None
        return f"taking over the lock of {_describe(self.previous)}, which has ended (its run stopped without releasing it)"

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # while still locked: no one else has taken it
        os.close(self._fd)
        self._fd = None

    def _in_use_message(self) -> str:
        holder = None
        for _ in range(20):  # the holder writes its record just after locking
            with contextlib.suppress(OSError):
                holder = _holder(self.path.read_bytes())
            if holder:
                break
            time.sleep(0.05)
        who = _describe(holder) if holder else "another process (its run.lock does not say which)"
        return (f"{self.path.parent} is in use by {who}: only one run may write a run folder. Wait for it to "
                f"end or stop it, or choose another folder.")


def _holder(text: bytes) -> dict | None:
    try:
        holder = json.loads(text)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) and "pid" in holder else None


def _describe(holder: dict) -> str:
    return f"process {holder['pid']} on {holder.get('host')} (started {holder.get('start_time')})"
