"""A reader's slow step spread over worker processes, records kept in order.

Rendering wikitext is pure Python and holds the GIL: on one core a whole
English Wikipedia takes hours to read, longer than a GPU takes to encode it.
`ordered` runs a reader's per-record step in worker processes, a batch at a
time, and yields the results in the order of their inputs, so a build reads
the same records in the same order (what a resumed build counts on) however
many workers there are. At most `ahead` batches a worker are in flight, so
memory stays bounded on a stream of any length.
"""
from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Workers at most: past this, reading keeps up with any encoder and only costs memory.
MAX_WORKERS = 16
START = "fork" if sys.platform == "linux" else "spawn"  # how workers start (`ordered`)


def workers() -> int:
    """The cores this process may run on, up to MAX_WORKERS (1: read in this process)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, MAX_WORKERS))


def ordered(step: Callable[[T], R], items: Iterable[T], n_workers: int, batch: int = 32, ahead: int = 4) -> Iterator[R]:
    """`step` over `items` in `n_workers` processes, results in the items'
    order. `step` must be picklable (a module's function, or a partial of
    one). Workers are forked on Linux, as PyTorch's DataLoader forks its
    own, so a user's script needs no `if __name__ == "__main__"` guard (a
    spawned worker would run the script again); they only parse text, never
    touching the GPU or OpenMP their parent may hold. Elsewhere they are
    spawned. An error of `items` itself (a damaged file that says so at its
    end) is raised after the results of every item before it, as a loop in
    one process would; closing the iterator early cancels what is still
    queued. The thread that starts reading should finish it: a forked
    worker dies with the thread that forked it (`_started`)."""
    pool = ProcessPoolExecutor(n_workers, mp_context=multiprocessing.get_context(START), initializer=_started,
                               initargs=(os.getpid(),))
    pending: deque[Future[list[R]]] = deque()
    chunk: list[T] = []
    error: Exception | None = None
    try:
        try:
            for item in items:
                chunk.append(item)
                if len(chunk) == batch:
                    pending.append(pool.submit(_each, step, chunk))
                    chunk = []
                    if len(pending) >= n_workers * ahead:
                        yield from pending.popleft().result()
        except Exception as e:  # answer the items read before it, then raise it
            error = e
        if chunk:
            pending.append(pool.submit(_each, step, chunk))
        while pending:
            yield from pending.popleft().result()
        if error is not None:
            raise error
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _each(step: Callable[[T], R], chunk: list[T]) -> list[R]:
    return [step(item) for item in chunk]


def _started(parent: int) -> None:
    """A worker's first step: what it inherited from a fork is frozen out of
    its garbage collector (scanning the parent's objects would copy their
    pages and cost time), and it dies with its parent."""
    gc.freeze()
    _die_with_parent(parent)


def _die_with_parent(parent: int) -> None:
    """A worker ends when the process that started it ends, killed too
    (Linux's PR_SET_PDEATHSIG, which watches the forking thread): a forked
    worker holds both ends of its queue, so it would otherwise wait on it
    for ever after a killed build."""
    if sys.platform != "linux":
        return
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(0)
