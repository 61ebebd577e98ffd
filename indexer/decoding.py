"""Stage 2 without a float16 copy: vector ids decoded back to float32 from
the shard's stage-1 index or its standalone codes.

Decoding is most of such a query's stage 2, so it is arranged to be cheap:
4-bit codes decode a byte (a pair of codes) at a time through one 8-bit
pair codebook a searcher shares across shards (`CodesDecoder`: one gather
a byte), and a rotation in front of the codes is applied
to the few query vectors instead of being undone on every candidate.
Stage 2 decodes a block of rows at a time and multiplies it while it is
in cache (`retriever.scoring.decoded_similarities`); where each code's
scale is stored, only its residual is decoded (`CodesDecoder.products`).
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .codes import _four_bit, _on_quantizer_of
from .faiss_setup import apply_threads, faiss
from .hnsw import HnswIndex

if TYPE_CHECKING:  # torch is imported where stage 2 decodes: reading an index's records needs none of it
    import torch


def decoder(index: Any, codes: np.ndarray | None = None, norm: float | None = None,
            scales: np.ndarray | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """Vector ids -> the index's float32 reconstructions of those vectors:
    what stage 2 re-scores when the shard keeps no float16 copy. With a
    shard's standalone `codes`, `index` is their codec and the rows of the
    ids are decoded (centroid plus quantised residual, behind any transform);
    else an IVF index gets its id -> (list, offset) map here, once, in memory
    (8 bytes a vector, not stored), and Flat and HNSW give the vectors they
    hold.

    `norm`: every vector indexed had this length (`common_norm` of the
    training sample), so reconstructions are scaled back to it. Quantisation
    shortens a vector by an amount that varies from vector to vector, and
    MaxSim would then rank documents partly by that error rather than by
    their direction alone. Codes stored with their `scales` (`codes.scaled`)
    are multiplied by them, which is the same rescaling measured once.

    FAISS decodes with OpenMP in the caller's thread: `set_threads`' value
    is applied there first, as `search` does."""
    raw = _decoder(index, codes)

    def decode(ids: np.ndarray) -> np.ndarray:
        apply_threads()
        return raw(ids)

    if norm is None:
        return decode
    if scales is not None:
        return lambda ids: np.multiply(decode(ids), scales[ids][:, None], dtype=np.float32)

    def rescaled(ids: np.ndarray) -> np.ndarray:
        import torch

        x = decode(ids)
        # In place, by torch: a query decodes thousands of rows, and numpy's
        # norm and divide (new arrays each) cost several times more.
        to_length(torch.from_numpy(x), norm)
        return x

    return rescaled


def to_length(rows: torch.Tensor, norm: float) -> torch.Tensor:
    """`rows` scaled in place to length `norm` each (on the device they lie on)."""
    import torch

    return rows.mul_(torch.linalg.vector_norm(rows, dim=1, keepdim=True).clamp_min_(1e-12).reciprocal_().mul_(norm))


def common_norm(sample: np.ndarray, tolerance: float = 0.01) -> float | None:
    """The length all of `sample`'s vectors share (within `tolerance`, relative:
    float16 storage rounds them), or None where lengths differ."""
    lengths = np.linalg.norm(sample, axis=1)
    if not len(lengths):
        return None
    median = float(np.median(lengths))
    return round(median, 6) if median > 0 and np.abs(lengths / median - 1).max() <= tolerance else None


def _decoder(index: Any, codes: np.ndarray | None) -> Callable[[np.ndarray], np.ndarray]:
    if isinstance(index, HnswIndex):
        return lambda ids: np.asarray(index.index.get_items(ids), dtype=np.float32).reshape(len(ids), -1)
    # A downcast wrapper (and a sub-index's) does not own its C++ index:
    # every closure below holds `index`, which does.
    typed = faiss.downcast_index(index)
    if isinstance(typed, faiss.IndexPreTransform):
        # FAISS undoes the transform (OPQ's rotation) one vector at a time
        # in reconstruct_batch: decode the inner codes, then undo it for all
        # at once. Standalone codes past the transform are the inner index's.
        inner = _decoder(typed.index, codes)

        def undo(ids: np.ndarray, owner: Any = index) -> np.ndarray:
            xt = np.ascontiguousarray(inner(ids), dtype=np.float32)
            x = np.empty((len(ids), typed.d), dtype=np.float32)
            typed.reverse_chain(len(ids), faiss.swig_ptr(xt), faiss.swig_ptr(x))
            return x

        return undo
    if codes is not None:
        codec = _byte_codec(typed) or typed
        return lambda ids, owner=index: codec.sa_decode(np.ascontiguousarray(codes[ids]))
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:
        ivf = None  # Flat, HNSW of FAISS: reconstructs by id as it is
    if ivf is not None and ivf.direct_map.type == faiss.DirectMap.NoMap:
        ivf.make_direct_map(True)
    return lambda ids: index.reconstruct_batch(np.ascontiguousarray(ids, dtype=np.int64))


def _byte_codec(index: Any) -> "faiss.IndexIVFPQ | None":
    """An 8-bit IVF-PQ that decodes the 4-bit codes of the IVF-PQ `index` to
    the same vectors, or None for any other index. FAISS packs two 4-bit
    codes into a byte, the first in its low half: a byte names a pair of
    centroids of adjacent sub-quantizers, and the 256 pairs make an 8-bit
    codebook over twice the dimensions. FAISS decodes 8-bit codes about
    twice as fast as 4-bit ones, and stage 2 decodes every candidate."""
    if not _four_bit(index) or index.pq.M % 2:
        return None
    codec = _on_quantizer_of(index, index.pq.M // 2, 8)  # the caller keeps `index` alive
    faiss.copy_array_to_vector(_byte_book(index.pq).ravel(), codec.pq.centroids)
    return codec


def _byte_book(pq: Any) -> np.ndarray:
    """(bytes a code, 256, dimensions a byte) float32: the sub-vector each
    value of each byte of a PQ code decodes to. An 8-bit code's byte is one
    centroid; a 4-bit code's byte names a pair of centroids of adjacent
    sub-quantizers, the first in its low half (as FAISS packs them)."""
    book = faiss.vector_to_array(pq.centroids).reshape(pq.M, pq.ksub, pq.dsub)
    if pq.nbits == 8:
        return np.ascontiguousarray(book, dtype=np.float32)
    byte = np.arange(256)
    return np.ascontiguousarray(np.concatenate([book[0::2][:, byte & 15], book[1::2][:, byte >> 4]], axis=2), dtype=np.float32)


class CodesDecoder:
    """Standalone IVF-PQ codes of 4 or 8 bits decoded by table lookups, by
    numpy on the CPU or by torch on `device` (a GPU): each byte of a code
    names one of 256 sub-vectors of its place (`_byte_book`), gathered as
    one element, plus its list's centroid, then scaled to `norm` as
    `decoder` scales them. The rows are the floats FAISS's `sa_decode`
    gives, faster: stage 2 decodes a few thousand rows at a time, where
    FAISS copies a sub-vector at a time. Behind an orthonormal rotation
    the codes decode in the rotated space, as `scoring_decoder`'s do (the
    query is rotated instead). On a device the rows' bytes are gathered
    from the memory-mapped codes on the CPU (a code is about 100 bytes,
    its decoded vector 1.5 kB), so only codes cross to it, and the vectors
    never come back: stage 2 multiplies them there
    (`retriever.scoring.decoded_similarities`, through `products`). Built once per codec and
    shared by the shards whose codes it reads; ValueError for a codec it
    does not decode (FAISS's decoder does)."""

    def __init__(self, codec: Any, norm: float | None, device: "str | torch.device | None" = None) -> None:
        import torch

        typed = faiss.downcast_index(codec)
        if isinstance(typed, faiss.IndexPreTransform) and _rotation(typed) is None:
            raise ValueError("tables decode codes behind an orthonormal rotation only (OPQ's), not another transform")
        inner = faiss.downcast_index(typed.index) if isinstance(typed, faiss.IndexPreTransform) else typed
        if type(inner) is not faiss.IndexIVFPQ or inner.pq.nbits not in (4, 8) or (inner.pq.nbits == 4 and inner.pq.M % 2):
            raise ValueError(f"tables decode IVF-PQ codes of 4 or 8 bits, not {type(inner).__name__}")
        self.device = None if device is None else torch.device(device)
        book = _byte_book(inner.pq)  # (bytes a code, 256, dimensions a byte)
        self.code_bytes, self.width = book.shape[0], book.shape[0] * book.shape[2]
        self.list_bytes = int(inner.coarse_code_size())
        centroids = inner.quantizer.reconstruct_n(0, inner.nlist) if inner.by_residual else np.zeros((inner.nlist, inner.d), np.float32)
        centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        self.norm = norm
        self._seen = threading.local()  # the thread's last query and its centroid products (`_centroid_products`)
        if self.device is None:
            self.table = book.reshape(-1).view(np.dtype((np.void, 4 * book.shape[2])))  # a sub-vector is one element
            # Each byte's place in the table, added to the codes: two-byte indices where they fit gather faster.
            self.offsets = np.arange(self.code_bytes, dtype=np.uint16 if self.code_bytes <= 256 else np.intp) * 256
            self.centroids = centroids
        else:
            self.table = torch.from_numpy(book.reshape(-1, book.shape[2])).to(self.device)
            self.offsets = (torch.arange(self.code_bytes, dtype=torch.int64) * 256).to(self.device)
            self.centroids = torch.from_numpy(centroids).to(self.device)

    def __call__(self, rows: np.ndarray, scales: np.ndarray | None = None) -> "np.ndarray | torch.Tensor":
        """(n, list bytes + code bytes) uint8 standalone codes -> (n, d)
        float32: a numpy array, or a tensor on the device; multiplied by
        their stored `scales` where given, else scaled to `norm`."""
        import torch

        if self.device is None:
            rows = np.ascontiguousarray(rows)
            x = self._residuals(rows)
            x += self.centroids.take(self._lists(rows), axis=0)
            if scales is not None:
                x *= scales[:, None]
            elif self.norm is not None:
                to_length(torch.from_numpy(x), self.norm)
            return x
        raw = torch.from_numpy(np.ascontiguousarray(rows)).to(self.device, non_blocking=True).long()
        x = self._residuals_on_device(raw)
        x += self.centroids[sum(raw[:, i] << (8 * i) for i in range(self.list_bytes))]
        if scales is not None:
            return x.mul_(torch.from_numpy(np.ascontiguousarray(scales)).to(self.device)[:, None])
        return x if self.norm is None else to_length(x, self.norm)

    def products(self, queries: "torch.Tensor", rows: np.ndarray, scales: np.ndarray | None, out: "torch.Tensor") -> None:
        """`out` (m, n), on the CPU, := the inner products of `queries` (m, d)
        with the vectors `rows` decode to, without decoding them whole: a
        row is its list's centroid plus its residual, so a product is the
        residual's (the one gather a byte) plus the centroid's, looked up
        from this query's products with the lists' centroids (`_centroid_products`,
        each list's made once a query, whichever shard asks), times the
        row's stored scale. Rows of vectors that had a common norm but no
        stored scale (codes written before scales were) are decoded whole
        and scaled to it, as `__call__` does."""
        import torch

        if self.norm is not None and scales is None:
            x = self(rows)
            if self.device is None:
                torch.mm(queries, torch.from_numpy(x).T, out=out)
            else:
                out.copy_(self._on_device(queries) @ x.T)
            return
        rows = np.ascontiguousarray(rows)
        lists = self._lists(rows)
        table, q = self._centroid_products(queries, lists)
        if self.device is None:
            torch.mm(q, torch.from_numpy(self._residuals(rows)).T, out=out)
            out += table[:, torch.from_numpy(lists)]
            if scales is not None:
                out *= torch.from_numpy(np.ascontiguousarray(scales))
            return
        raw = torch.from_numpy(rows).to(self.device, non_blocking=True).long()
        p = q @ self._residuals_on_device(raw).T
        p += table[:, torch.from_numpy(lists).to(self.device)]
        if scales is not None:
            p *= torch.from_numpy(np.ascontiguousarray(scales)).to(self.device)
        out.copy_(p)

    def _centroid_products(self, queries: "torch.Tensor", lists: np.ndarray) -> "tuple[torch.Tensor, torch.Tensor]":
        """(this query's (m, nlist) products with the list centroids, at least
        those of `lists` filled; the queries on the device). Kept for the
        thread's last query: the shards of a search share one codec and one
        (rotated) query, and a row's centroid is one of few lists."""
        import torch

        seen = self._seen
        if getattr(seen, "given", None) is not queries and (
                getattr(seen, "queries", None) is None or seen.queries.shape != queries.shape or not torch.equal(seen.queries, queries)):
            seen.queries, seen.on_device = queries.clone(), self._on_device(queries)
            seen.table = torch.empty((len(queries), len(self.centroids)), dtype=torch.float32, device=self.device)
            seen.known = np.zeros(len(self.centroids), dtype=bool)
        missing = np.unique(lists[~seen.known[lists]])
        if len(missing):
            if self.device is None:
                centroids = torch.from_numpy(self.centroids.take(missing, axis=0))
                seen.table[:, torch.from_numpy(missing)] = seen.on_device @ centroids.T
            else:
                at = torch.from_numpy(missing).to(self.device)
                seen.table[:, at] = seen.on_device @ self.centroids[at].T
            seen.known[missing] = True
        seen.given = queries  # the blocks of one product share the tensor: no need to compare it again
        return seen.table, seen.on_device

    def _on_device(self, queries: "torch.Tensor") -> "torch.Tensor":
        return queries if self.device is None else queries.to(self.device)

    def _lists(self, rows: np.ndarray) -> np.ndarray:
        return sum(rows[:, i].astype(np.intp) << (8 * i) for i in range(self.list_bytes))

    def _residuals(self, rows: np.ndarray) -> np.ndarray:
        return self.table.take(rows[:, self.list_bytes :] + self.offsets).view(np.float32).reshape(len(rows), self.width)

    def _residuals_on_device(self, raw: "torch.Tensor") -> "torch.Tensor":
        import torch

        return torch.nn.functional.embedding(raw[:, self.list_bytes :] + self.offsets, self.table).reshape(len(raw), self.width)

    def reader(self, codes: np.ndarray, scales: np.ndarray | None = None) -> "CodesReader":
        """One shard's codes (and their stored scales) read through these tables."""
        return CodesReader(self, codes, scales)


class CodesReader:
    """Vector ids of one shard -> their decoded rows (`__call__`), or their
    inner products with a query's vectors (`products`, what stage 2 asks)."""

    def __init__(self, tables: CodesDecoder, codes: np.ndarray, scales: np.ndarray | None) -> None:
        self.tables, self.codes, self.scales = tables, codes, scales

    def __call__(self, ids: np.ndarray) -> "np.ndarray | torch.Tensor":
        return self.tables(self.codes[ids], None if self.scales is None else self.scales[ids])

    def products(self, queries: "torch.Tensor", ids: np.ndarray, out: "torch.Tensor") -> None:
        self.tables.products(queries, self.codes[ids], None if self.scales is None else self.scales[ids], out)


def decoding_codec(codec: Any) -> Any:
    """`codec`, with a 4-bit IVF-PQ (behind its transform, if any) swapped
    for the 8-bit codec of its code pairs (`_byte_codec`), which decodes the
    same codes to the same vectors. A searcher builds it once for every
    shard whose codes share `codec`, instead of a pair codebook a shard
    (M/2 x 256 x 2 dsub floats each, and a large index has hundreds of
    shards). Any other codec
    comes back as it is. `codec` must outlive the result, which routes
    through its quantizer and transform."""
    typed = faiss.downcast_index(codec)
    behind = faiss.downcast_index(typed.index) if isinstance(typed, faiss.IndexPreTransform) else typed
    byte = _byte_codec(behind)
    if byte is None:
        return codec
    if behind is typed:
        byte.referenced_objects = [codec]
        return byte
    swapped = faiss.IndexPreTransform(byte)
    for i in reversed(range(typed.chain.size())):
        swapped.prepend_transform(typed.chain.at(i))  # not owned: `codec` keeps its transforms
    swapped.referenced_objects = [byte, codec]  # as FAISS's own wrappers keep what they point to
    return swapped


def scoring_decoder(index: Any, codes: np.ndarray | None = None, norm: float | None = None, scales: np.ndarray | None = None
                    ) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray] | None]:
    """(decode, rotate) for stage 2: inner products of `rotate(queries)` with
    `decode(ids)` equal those of the queries with `decoder(index, codes, norm, scales)(ids)`.
    Behind an orthonormal map without bias (OPQ's rotation, or its
    projection to fewer dimensions: `OPQ80_320`), the codes are decoded in
    the mapped space and the query's few vectors are mapped instead of
    un-mapping every candidate vector (A has orthonormal rows, so
    Aq . c = q . A'c): FAISS's reverse_chain
    costs a dim x dim product per candidate vector, most of a multi-vector
    query's stage 2, against one per query vector here. `rotate` is None
    where nothing is rotated."""
    typed = None if isinstance(index, HnswIndex) else faiss.downcast_index(index)
    a = _rotation(typed)
    if a is not None:
        # A standalone code past the transform is the inner index's; A has
        # orthonormal rows, so A'c is as long as c: lengths hold on both sides.
        inner = decoder(typed.index, codes, norm, scales)

        def decode(ids: np.ndarray, owner: Any = index) -> np.ndarray:  # `owner` keeps the C++ index alive
            return inner(ids)

        return decode, _rotate_by(a)
    return decoder(index, codes, norm, scales), None


def _rotate_by(a: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """q -> q A' for a query's few vectors, by torch: numpy's BLAS splits
    even a product this small over every core (whatever `set_threads`
    says), and where the cores are busy (a server's other requests, another
    process) its threads wait for them: milliseconds for microseconds of work."""
    import torch

    at = torch.from_numpy(np.ascontiguousarray(a.T))
    return lambda q: (torch.from_numpy(np.ascontiguousarray(q, dtype=np.float32)) @ at).numpy()


def _rotation(typed: Any) -> np.ndarray | None:
    """The (d_out, d_in) matrix of `typed`'s transform where it is one linear
    map with orthonormal rows and no bias (OPQ's rotation, or its projection
    to fewer dimensions); else None."""
    if not isinstance(typed, faiss.IndexPreTransform) or typed.chain.size() != 1:
        return None
    lt = faiss.downcast_VectorTransform(typed.chain.at(0))
    if isinstance(lt, faiss.LinearTransform) and lt.is_orthonormal and not lt.have_bias and lt.d_out <= lt.d_in:
        return faiss.vector_to_array(lt.A).reshape(lt.d_out, lt.d_in).astype(np.float32)
    return None
