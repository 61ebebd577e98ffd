"""The binary store (store="binary"): every vector kept as its B-bit code alone.

A shard's vectors are one file, `BITS_FILE`: a row a vector, its IVF list
number (where the index has lists) and its packed code, B/8 bytes. The
index's one trained file, `CODEC_FILE`, holds the hashing heads (the
linear map whose signs are the bits: `encoders.hashing`) and the binary
IVF's centroids.

Stage 1 over a corpus small enough to scan ranks every code by the
asymmetric score stage 2 uses (the float query's head scores against the
code's +-1 vector), in FAISS's 4-bit fast-scan PQ: B/4 sub-quantizers whose
16 centroids are the +-1 patterns of their 4 bits, so a packed code is its
own PQ code and the scan reads the same B/8 bytes a Hamming scan would.
Over lists (IndexBinaryIVF) it ranks the query's sign code by Hamming
distance, a hit scoring the cosine of the two +-1 vectors, 1 - 2 h / B.
Either way stage 1's estimates add up as MaxSim's do. Both indexes are
filled from the rows at load: ids live in memory only.

Stage 2 scores the float query against the codes themselves: the query's
side is its heads' scores, unit length (`HashCodec.query`), the document's
side its code as a +-1/sqrt(B) vector (`hashing.signs`). No float copy of a
document vector is kept anywhere.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from propdex.encoders.hashing import FITTED, METHODS, HashCodec, check_bits, initial, learned_name, load_learned, lsh, pca, sign_table, signs

from . import mapped
from .factory import _lists, list_bytes
from .faiss_setup import apply_threads, faiss

CODEC_FILE = "trained.hashing"  # safetensors: weight, bias (the heads), centroids (BIVF's lists)
BITS_FILE = "index.bits"  # a shard's rows: uint8 .npy (V, list bytes + B/8)
BITS = 256  # the default code: 32 bytes a vector
SCAN_BELOW = 1 << 19  # codes; under this, stage 1 scans every code (BFlat)


def holds_bits(path: str | Path) -> bool:
    """Whether a shard's index file (a manifest's name for it, or its path) is binary rows."""
    return Path(path).name == BITS_FILE


def default_factory(n_vectors: int) -> str:
    """FAISS's binary factory string for `n_vectors` codes: a scan of every
    code below SCAN_BELOW, else about 4 sqrt(N) lists, as the float16
    store's stage 1 has. A scan loses no neighbour to a list it did not
    probe, and with the few probes a multi-vector query makes, IVF over a
    few hundred thousand codes misses many that MaxSim needs; but a scan
    scores every code for every query vector, while lists cost about 1/256
    of them. The threshold is where the scan's cost stops being small beside
    the rest of a query: at 2^19 codes and ~32 query vectors a scan is ~16M
    code scores, about as long as stage 2's decoding and scoring; above it
    the scan would be most of a query."""
    if n_vectors < SCAN_BELOW:
        return "BFlat"
    return f"BIVF{_lists(n_vectors, 4 * math.sqrt(n_vectors))}"


def lists_of(factory: str) -> int:
    """The IVF lists a binary factory string names (0: a flat scan)."""
    if factory == "BFlat":
        return 0
    if factory.startswith("BIVF") and factory[4:].isdigit():
        return int(factory[4:])
    raise ValueError(f"store binary takes the factories BFlat and BIVF<lists>, not {factory!r}")


def training_size(factory: str, n_vectors: int, method: str) -> int:
    """Vectors the codec is trained on: the lists' k-means (40 a list) and a
    fitted map (pca, itq) want a sample; a scan of fixed heads wants none."""
    want = 40 * lists_of(factory)
    if method in FITTED:
        want = max(want, 65_536)
    return min(n_vectors, want)


def fit_itq(sample: np.ndarray, bits: int) -> HashCodec:
    """PCA to `bits` dimensions, then the rotation iterative quantisation
    (Gong & Lazebnik) fits to bring the data close to its codes: FAISS's
    ITQTransform, read back as one linear map with its centring as bias."""
    check_bits(bits, sample.shape[1], "itq")
    t = faiss.ITQTransform(sample.shape[1], bits, True)
    t.train(np.ascontiguousarray(sample, dtype=np.float32))
    lt = t.pca_then_itq
    w = faiss.vector_to_array(lt.A).reshape(lt.d_out, lt.d_in).astype(np.float32)
    bias = -w @ faiss.vector_to_array(t.mean).astype(np.float32)
    if lt.have_bias:
        bias += faiss.vector_to_array(lt.b).astype(np.float32)
    return HashCodec(w, bias.astype(np.float32), "itq")


def heads(method: str, bits: int, encoder_config: dict[str, Any], sample: np.ndarray | None) -> tuple[HashCodec, str | None]:
    """The map `method` names for vectors of the encoder `encoder_config`
    records, and the sha256 of the weights it was read from (learned only).
    `sample` (the corpus's vectors) fits pca and itq."""
    from propdex.encoders import weights_path

    dim = int(encoder_config["dim"])
    check_bits(bits, dim, method)
    if method == "learned":
        return load_learned(weights_path(learned_name(encoder_config["name"], bits)), encoder_config, bits)
    if method == "untrained":
        return initial(dim, bits), None
    if method == "lsh":
        return lsh(dim, bits), None
    if method == "pca":
        return pca(np.zeros((0, dim), np.float32) if sample is None else sample, bits), None
    if method == "itq":
        if sample is None or len(sample) < bits:
            raise ValueError(f"hashing=itq is fitted on the corpus's vectors: at least {bits} are needed, the corpus has "
                             f"{0 if sample is None else len(sample)} (hashing=pca, the default, codes any corpus)")
        return fit_itq(sample, bits), None
    raise ValueError(f"unknown hashing {method!r}; choose from {', '.join(METHODS)}")


@dataclass
class BinaryCodec:
    """The index's trained part: hashing heads and, for BIVF, the lists' centroids (a binary flat index)."""

    hashing: HashCodec
    quantizer: Any = None  # faiss.IndexBinaryFlat of the centroids, or None: a flat scan

    @property
    def bits(self) -> int:
        return self.hashing.bits

    @property
    def nlist(self) -> int:
        return 0 if self.quantizer is None else int(self.quantizer.ntotal)

    @property
    def row_bytes(self) -> int:
        return (list_bytes(self.nlist) if self.nlist else 0) + self.hashing.code_bytes

    def rows(self, vectors: np.ndarray) -> np.ndarray:
        """A shard's rows for `vectors`: each one's list number (little-endian) then its code."""
        codes = self.hashing.encode(vectors)
        if not self.nlist:
            return codes
        apply_threads()
        _, assigned = self.quantizer.search(codes, 1)
        lists = assigned[:, 0].astype("<u8").view(np.uint8).reshape(-1, 8)[:, : list_bytes(self.nlist)]
        return np.concatenate([lists, codes], axis=1)

    def split(self, rows: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """(list numbers or None, codes) of a shard's rows."""
        if not self.nlist:
            return None, rows
        lb = list_bytes(self.nlist)
        wide = np.zeros((len(rows), 8), np.uint8)
        wide[:, :lb] = rows[:, :lb]
        return wide.view("<u8")[:, 0].astype(np.int64), rows[:, lb:]


def train(factory: str, hashing: HashCodec, sample: np.ndarray | None) -> BinaryCodec:
    """The codec for `factory`: the heads, and for BIVF the k-means of the sample's codes."""
    nlist = lists_of(factory)
    if not nlist:
        return BinaryCodec(hashing)
    codes = hashing.encode(sample)
    if len(codes) < 39 * nlist:
        raise ValueError(f"{factory} needs at least {39 * nlist} training vectors, the corpus has {len(codes)}")
    ivf = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(hashing.bits), hashing.bits, nlist)
    ivf.train(codes)
    return BinaryCodec(hashing, _flat(ivf.quantizer.reconstruct_n(0, nlist), hashing.bits))


def _flat(codes: np.ndarray, bits: int) -> Any:
    index = faiss.IndexBinaryFlat(bits)
    if len(codes):
        index.add(np.ascontiguousarray(codes))
    return index


def _scan(codes: np.ndarray, bits: int) -> Any:
    """Every code in FAISS's fast-scan PQ, scored by inner product with the
    query's unit head scores: sub-quantizer m is bits 4m..4m+3, centroid j
    the +-1/sqrt(B) values of j's four bits (little-endian, as `pack` and
    FAISS's 4-bit codes both are), so the rows go in as they are stored and
    the score is the cosine stage 2 computes (to FAISS's 8-bit lookup tables)."""
    m = bits // 4
    pq = faiss.IndexPQ(bits, m, 4, faiss.METRIC_INNER_PRODUCT)
    faiss.copy_array_to_vector(np.tile(sign_table(bits)[:16, :4].ravel(), m), pq.pq.centroids)
    pq.is_trained = True
    if len(codes):
        faiss.copy_array_to_vector(np.ascontiguousarray(codes).ravel(), pq.codes)
        pq.ntotal = len(codes)
    index = faiss.IndexPQFastScan(pq)
    # Results kept by reservoir: FAISS's heap implementations (12, 14, and the
    # default's choice for a few hits) have returned no hits at all for a query
    # on a freshly built index (-1 ids, k = 3); the reservoir never has, and is the fastest.
    index.implem = 13
    return index


def write_codec(codec: BinaryCodec, path: Path, record: dict[str, str]) -> None:
    """The codec as one safetensors file; `record` (method, weights' sha256) rides in its header."""
    from safetensors.numpy import save_file

    state = dict(codec.hashing.state())
    if codec.nlist:
        state["centroids"] = codec.quantizer.reconstruct_n(0, codec.nlist)
    save_file({k: np.ascontiguousarray(v) for k, v in state.items()}, str(path), metadata={"method": codec.hashing.method, **record})


def read_codec(path: Path) -> BinaryCodec:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        method = (f.metadata() or {}).get("method", "learned")
        state = {k: f.get_tensor(k) for k in f.keys()}
    hashing = HashCodec(state["weight"].astype(np.float32), state["bias"].astype(np.float32), method)
    centroids = state.get("centroids")
    return BinaryCodec(hashing, None if centroids is None else _flat(centroids, hashing.bits))


def read_rows(path: Path, codec: BinaryCodec) -> np.ndarray:
    """A shard's rows, memory-mapped, checked against the codec's width."""
    return mapped.byte_rows(path, codec.row_bytes, "binary codes")


class BinaryIndex:
    """Stage 1 over one shard's codes: an asymmetric scan of them all (BFlat),
    or Hamming distance through the lists (BIVF).

    A `where=` filter or deletions restrict the search to the allowed
    vectors inside it: FAISS's IVF over binary codes takes no ID selector, so
    a search that allows at least half the shard probes the lists for
    proportionally more hits and keeps the allowed ones, and one that allows
    fewer scans the allowed codes exactly."""

    def __init__(self, codec: BinaryCodec, rows: np.ndarray, batch: int = 1 << 16) -> None:
        self.codec = codec
        lists, self.codes = codec.split(rows)
        self.bits = codec.bits
        self.ntotal = len(rows)
        if lists is None:
            self.index = _scan(self.codes, self.bits)
            return
        ivf = faiss.IndexBinaryIVF(codec.quantizer, self.bits, codec.nlist)
        ivf.is_trained, ivf.own_fields = True, False  # the quantizer is the codec's, shared by every shard
        order = np.argsort(lists, kind="stable")
        for start in range(0, len(order), batch):  # a few rows at a time: the codes are memory-mapped
            part = order[start : start + batch]
            part_lists = lists[part]
            for lst in np.unique(part_lists):
                ids = np.ascontiguousarray(part[part_lists == lst], dtype=np.int64)
                codes = np.ascontiguousarray(self.codes[ids])
                ivf.invlists.add_entries(int(lst), len(ids), faiss.swig_ptr(ids), faiss.swig_ptr(codes))
        ivf.ntotal = len(rows)
        ivf.referenced_objects = [codec.quantizer]
        self.index = ivf

    @property
    def nlist(self) -> int:
        return self.codec.nlist

    def search(self, queries: np.ndarray, k: int, nprobe: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids) of each query vector's k nearest codes, -1 ids where fewer exist."""
        hashing = self.codec.hashing
        x = hashing.encode(queries) if self.nlist else hashing.query(queries)
        apply_threads()
        if allowed is None:
            d, ids = self._search(x, k, nprobe)
        elif 2 * int(allowed.sum()) >= len(allowed):
            wide = min(self.ntotal, math.ceil(k * len(allowed) / max(int(allowed.sum()), 1)) + k)
            d, ids = self._search(x, wide, nprobe)
            keep = (ids >= 0) & allowed[np.maximum(ids, 0)]
            d, ids = _first(d, ids, keep, k)
        else:
            chosen = np.flatnonzero(allowed)
            scan = (_flat if self.nlist else _scan)(self.codes[chosen], self.bits)
            d, ids = scan.search(x, min(k, len(chosen)))
            ids = np.where(ids >= 0, chosen[np.maximum(ids, 0)], -1)
            if ids.shape[1] < k:
                pad = k - ids.shape[1]
                d = np.pad(d, ((0, 0), (0, pad)))
                ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        scores = 1.0 - 2.0 * d.astype(np.float32) / self.bits if self.nlist else d
        return np.where(ids >= 0, scores, -np.inf).astype(np.float32), ids

    def _search(self, x: np.ndarray, k: int, nprobe: int) -> tuple[np.ndarray, np.ndarray]:
        if self.nlist:
            return self.index.search(x, k, params=faiss.SearchParametersIVF(nprobe=min(nprobe, self.nlist)))
        return self.index.search(x, k)

    def decoder(self, ids: np.ndarray) -> np.ndarray:
        """Stage 2's document side: the codes of `ids` as +-1/sqrt(B) rows."""
        return signs(self.codes[ids], self.bits)


def _first(d: np.ndarray, ids: np.ndarray, keep: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's first k kept hits, in order, padded with -1 ids."""
    out_d = np.full((len(ids), k), 0, d.dtype)
    out_i = np.full((len(ids), k), -1, np.int64)
    for r in range(len(ids)):
        kept = np.flatnonzero(keep[r])[:k]
        out_d[r, : len(kept)], out_i[r, : len(kept)] = d[r, kept], ids[r, kept]
    return out_d, out_i
