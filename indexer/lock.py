"""One writer at a time: an exclusive lock on `write.lock`, as Lucene does.

A writer holds it from opening the directory to the end of its build, so a
second one is refused before it can delete the first one's uncommitted
files. The operating system drops the lock when a writer dies, even by
SIGKILL, so a killed build never leaves a directory locked.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

LOCK = "write.lock"


class WriteLock:
    """The lock of the index at `directory`; `wait`: seconds to wait for
    another process's writer to finish (0: refuse at once)."""

    def __init__(self, directory: Path, wait: float = 0.0) -> None:
        self.directory = directory
        self.wait = wait
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (a no-op while held), writing our pid into the file
        so that the writer refused can say who holds it."""
        if self._fd is not None:
            return
        fd = os.open(self.directory / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise ValueError(f"{self.directory} is being written by another process (pid {holder}); "
                                 f"wait for it, or stop it (a stopped build resumes)") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
