"""FAISS for the whole indexer: the library, or a stand-in where it is
missing, and the OpenMP thread count its searches and decodes run with.

FAISS is an extra (GPU machines want one FAISS build, not two), so what
needs no index still runs without it, and the first use of an index says
what to install.
"""
from __future__ import annotations

from typing import Any


_NO_FAISS = "propdex needs FAISS, a core dependency that is missing here: pip install faiss-cpu (or 'propdex[gpu]' on a CUDA machine)"


class _NoFaiss:
    """Stands in for the module where FAISS is missing, so that what needs no
    index (`propdex train`, the bench's encode section) runs there too, and
    the first use of an index says what to install."""

    def __getattr__(self, name: str) -> Any:
        raise ImportError(_NO_FAISS)


try:
    import faiss
except ImportError:  # faiss is an extra, so that GPU machines get one FAISS build, not two
    faiss = _NoFaiss()


def require_faiss() -> None:
    """Fail before any work where FAISS is missing (a writer would encode first)."""
    if isinstance(faiss, _NoFaiss):
        raise ImportError(_NO_FAISS)


_threads: int | None = None  # set_threads' value; None: OpenMP's default (every core)


def set_threads(n: int) -> None:
    """FAISS's OpenMP threads for this process (a search's own parallelism;
    concurrent searches want 1 each, or they spin against each other).

    OpenMP keeps the setting per thread, and a thread that never made it
    starts from the core count: a searcher's shard pool and a server's
    request threads would search with every core whatever was set here. So
    the value is kept, and each thread that searches applies it
    (`apply_threads`)."""
    global _threads
    if n < 1:
        raise ValueError(f"threads must be at least 1, got {n}")
    _threads = n
    faiss.omp_set_num_threads(n)


def apply_threads() -> None:
    """Make `set_threads`' value hold in the calling thread (nothing where it was never called)."""
    if _threads is not None:
        faiss.omp_set_num_threads(_threads)


def threads() -> int | None:
    """`set_threads`' value (None where it was never called): hnswlib takes
    its thread count per call, where FAISS keeps one per thread."""
    return _threads
