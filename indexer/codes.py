"""Standalone codes: a shard kept as each vector's IVF list number and PQ
codes, with no 8-byte id beside them (store="codes"), and the stage-1
index rebuilt from them in memory at load.

A shard's codes share one trained codec; the IVF-PQ it rebuilds borrows
the codec's coarse quantizer instead of copying it, and 4-bit codes are
converted to FAISS's fast-scan layout for stage 1.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from . import mapped
from .faiss_setup import faiss

CODES_FILE = "index.codes"  # a shard's standalone codes (store="codes" over IVF): uint8 .npy (V, row_bytes)
SCALE_BYTES = 4  # a scaled code's last bytes: its scale, little-endian float32 (`scaled`)


def holds_codes(path: str | Path) -> bool:
    """Whether a shard's index file (a manifest's name for it, or its path) is standalone codes."""
    return Path(path).name == CODES_FILE


def _four_bit(index: Any) -> bool:
    """Whether `index` (downcast) is a plain IVF-PQ of 4-bit codes: what
    `codes_factory` chooses where the budget holds them, and what
    `fast_scan`, `decoding._byte_codec` and the OPQ training (`trainer`)
    treat apart."""
    return type(index) is faiss.IndexIVFPQ and index.pq.nbits == 4


def encode(codec: faiss.Index, vectors: np.ndarray) -> np.ndarray:
    """Standalone codes (uint8 (n, codec.sa_code_size())): the IVF list number in
    the fewest bytes that hold it, then the vector's codes, behind any transform."""
    return codec.sa_encode(np.ascontiguousarray(vectors, dtype=np.float32))


def row_bytes(codec: faiss.Index, scaled: bool) -> int:
    """Bytes a row of a shard's codes file takes: the codec's code, and its scale where the codes are `scaled`."""
    return codec.sa_code_size() + (SCALE_BYTES if scaled else 0)


def scaled(codes: np.ndarray, decoded: np.ndarray, norm: float) -> np.ndarray:
    """`codes` with each row's scale after it: `norm` / |the vector the row
    decodes to| (`decoded`), the factor that takes its reconstruction back
    to the length every indexed vector had. Stage 2 multiplies a row's
    products by it instead of measuring the decoded vector's length at
    every query, and so never needs the decoded vector whole: the residual's
    product plus its list centroid's (`decoding.CodesDecoder`)."""
    lengths = np.linalg.norm(np.asarray(decoded, dtype=np.float32), axis=1)
    scales = (np.float32(norm) / np.maximum(lengths, np.float32(1e-12))).astype("<f4")
    return np.concatenate([codes, scales.view(np.uint8).reshape(len(codes), SCALE_BYTES)], axis=1)


def read_codes(path: Path, codec: faiss.Index, scaled: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """A shard's standalone codes, memory-mapped, as (codes (V, code size),
    scales (V,) float32 or None), both views of the one file's rows: stage
    2 gathers a row's code and its scale together."""
    rows, size = mapped.byte_rows(path, row_bytes(codec, scaled), "standalone codes"), codec.sa_code_size()
    return rows[:, :size], (rows[:, size:].view("<f4")[:, 0] if scaled else None)


def index_from_codes(codec: faiss.Index, codes: np.ndarray, rows: int = 1 << 16) -> faiss.Index:
    """Stage 1 over a shard's standalone codes: the trained `codec` with its
    inverted lists filled from them, ids 0..V-1 in row order. The ids live in
    memory only (8 bytes a vector, rebuilt at each load in about a second per
    million vectors); on disk a vector is its list number and its codes.

    An IVF-PQ codec (every default codes factory) lends each shard's index
    its coarse quantizer and rotation, which the index keeps alive, rather
    than a copy of them each: a copy is nlist x dim floats (1.5 MB at 1,024
    lists of 384 dims, 100 MB at 65,536), and an index has a shard per
    10,000 documents. Other IVF codecs (IVF-Flat, scalar quantisers) are
    cloned whole."""
    if codes.shape[1] != codec.sa_code_size():
        raise ValueError(f"codes of {codes.shape[1]} bytes for a codec of {codec.sa_code_size()}: the index is damaged")
    typed = faiss.downcast_index(codec)
    wrapped = isinstance(typed, faiss.IndexPreTransform) and typed.chain.size() == 1
    trained = faiss.downcast_index(typed.index) if wrapped else typed
    if type(trained) is not faiss.IndexIVFPQ:
        index = faiss.clone_index(codec)
        ivf = faiss.extract_index_ivf(index)
        _fill(ivf, codes, rows)
        index.ntotal = ivf.ntotal  # a transform's wrapper counts its own vectors
        return index
    # FAISS's clone would copy the quantizer: a new IVF-PQ shares it, with the codec's codebooks.
    ivf = _on_quantizer_of(trained, trained.pq.M, trained.pq.nbits)
    ivf.pq = trained.pq
    _fill(ivf, codes, rows)
    stage1 = fast_scan(ivf)  # which keeps `ivf` alive where it converts it
    stage1.referenced_objects = [*getattr(stage1, "referenced_objects", ()), codec]  # the shared quantizer's owner
    if not wrapped:
        return stage1
    out = faiss.IndexPreTransform(typed.chain.at(0), stage1)  # owns neither: `codec` keeps the rotation alive
    out.ntotal = stage1.ntotal
    out.referenced_objects = [codec, stage1]
    return out


def _fill(ivf: "faiss.IndexIVF", codes: np.ndarray, rows: int) -> None:
    """Add `codes` (standalone: list number, then the vector's codes) to `ivf`'s lists, ids in row order."""
    for start in range(0, len(codes), rows):
        part = np.ascontiguousarray(codes[start : start + rows])
        ivf.add_sa_codes(part, np.arange(start, start + len(part), dtype=np.int64))


def fast_scan(ivf: "faiss.IndexIVFPQ") -> faiss.Index:
    """The filled IVF-PQ `ivf` for stage 1: where its codes are 4-bit, in
    FAISS's fast-scan layout (blocks of 32 codes that SIMD scans with
    in-register lookup tables), searched by the same codes; else `ivf`.

    The codes are filled into a plain IVF-PQ first and converted: FAISS
    1.15.1 has no safe way to add codes to a fast-scan index (its
    add_sa_codes packs them wrongly, and a fast-scan codec read back from
    its file decodes through a null pointer). The fast index
    uses `ivf`'s coarse quantizer, which it does not own, and keeps `ivf`
    (its lists emptied) alive."""
    if not _four_bit(ivf):
        return ivf
    fast = faiss.IndexIVFPQFastScan(ivf, 32)
    fast.own_fields = False  # the quantizer is `ivf`'s (or whoever `ivf` shares it with)
    # The plain lists are a second copy of every code: let them go.
    empty = faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size)
    empty.this.disown()  # FAISS owns it now, not Python
    ivf.replace_invlists(empty, True)
    fast.orig_invlists = None  # FAISS keeps the plain lists' address, for debugging searches (implem 1, 2)
    fast.referenced_objects = [ivf]
    return fast


def _on_quantizer_of(index: "faiss.IndexIVFPQ", m: int, nbits: int) -> "faiss.IndexIVFPQ":
    """An empty, trained IVF-PQ of `m` codes of `nbits` that routes and
    takes residuals as `index` does, through `index`'s own coarse
    quantizer (not a copy, not owned: `index` must outlive it). Its
    codebooks are the caller's to set."""
    ivf = faiss.IndexIVFPQ(index.quantizer, index.d, index.nlist, m, nbits, index.metric_type)
    ivf.by_residual, ivf.is_trained = index.by_residual, True
    return ivf
