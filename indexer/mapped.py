"""Arrays of .npy files, memory-mapped, handed out as plain ndarrays.

np.load(..., mmap_mode="r") returns an np.memmap, an ndarray subclass whose
every slice and gather runs Python (`__array_finalize__`, `__getitem__`);
stage 2 and BM25 gather from these arrays thousands of times a query. A
base-class view of the same map reads the same pages, lazily, at ndarray
speed. Every reader of a shard's arrays goes through here.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


def load(path: Path, *, mmap: bool = True) -> np.ndarray:
    """The array in `path`, mapped (or read whole when `mmap` is false)."""
    return np.asarray(np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False))


def byte_rows(path: Path, width: int, what: str) -> np.ndarray:
    """A shard's fixed-width rows of bytes (codes, binary codes), mapped and
    checked: any other dtype, rank or width means the file is not the one
    the index committed."""
    rows = load(path)
    if rows.dtype != np.uint8 or rows.ndim != 2 or rows.shape[1] != width:
        raise ValueError(f"{path} holds {rows.dtype} {rows.shape}, not {what} of {width} bytes a row: the index is damaged")
    return rows


def data_offset(path: Path, array: np.ndarray) -> int:
    """Where `array`'s bytes start in its .npy file: the format puts one
    header first and the C-ordered data after it, to the end of the file."""
    return Path(path).stat().st_size - array.nbytes
