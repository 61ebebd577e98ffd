"""Stage-1 ANN indexes: FAISS (any factory string) or hnswlib, one file per shard.

All vectors are L2-normalised, so inner product is cosine similarity and
every index here searches by inner product.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

_NO_FAISS = "propdex needs FAISS: pip install 'propdex[cpu]' (or 'propdex[gpu]' on a CUDA machine)"


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


log = logging.getLogger(__name__)

BACKENDS = ("faiss", "hnsw")
FLAT_BELOW = 50_000  # vectors; under this, exact search is cheap and training would overfit


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


CODE_BYTES = 100  # store="codes": bytes a vector, all in, that the default codes fill
MIN_CODE_BYTES = 24  # a list number, the coarse centroids, and at least a few codes
CODES_FILE = "index.codes"  # a shard's standalone codes (store="codes" over IVF): uint8 .npy (V, sa_code_size)


def default_factory(n_vectors: int, dim: int, store: str = "float16", code_bytes: int = CODE_BYTES) -> str:
    """Flat for tiny corpora, else IVF + PQ.

    Beside a float16 copy (`store="float16"`), PQ codes only route stage
    1, which stage 2 re-scores exactly: nlist ~ 4 sqrt(N), no OPQ rotation
    (its training costs minutes and stage 2 corrects what it would gain),
    and 4-bit codes of 4 dimensions each (dim/8 bytes) that FAISS scans
    with SIMD (`x4fs`, fast scan), since a multi-vector query scans about
    100k codes and the scan is most of stage 1. When stage 2 reads the
    codes (`store="codes"`), they are what it scores: `codes_factory`.
    """
    if n_vectors < FLAT_BELOW:
        return "Flat"
    if store == "codes":
        return codes_factory(n_vectors, dim, code_bytes)
    nlist = _lists(n_vectors, 4 * math.sqrt(n_vectors))
    m = max(d for d in range(1, dim // 4 + 1) if dim % d == 0)  # sub-quantizers must divide dim
    return f"IVF{nlist},PQ{m}x4fs"


def codes_factory(n_vectors: int, dim: int, code_bytes: int = CODE_BYTES) -> str:
    """The OPQ-IVF-PQ codes that fill `code_bytes` a vector, all in.

    Every vector pays its IVF list number (2 bytes up to 65,536 lists: a
    shard keeps FAISS's standalone codes, `CODES_FILE`, and no 8-byte ids)
    and its codes; the coarse centroids
    (nlist x dim float32), the OPQ matrix and the PQ codebooks are shared,
    so they cost less a vector the larger the corpus. About sqrt(N) lists,
    since 4 sqrt(N) centroids would eat a tenth of the budget; and the OPQ
    keeps about 80% of the rotated dimensions, never fewer than 4 a code,
    since MiniLM's variance sits in few of them: finer codes of the
    dimensions that matter beat coarse codes of all of them.

    Where the budget holds 4 bits for every 2 of at least 80% of the
    dimensions, the codes are 4-bit, two to a byte (`OPQ{2m},...,PQ{2m}x4`
    at m bytes): stage 1 scans them
    with fast-scan SIMD (`fast_scan`) and stage 2 decodes them a byte at a
    time (`_byte_codec`): they rank as the 8-bit codes of the same bytes
    do, and stage 1 scans them several times faster.
    """
    nlist = _lists(n_vectors, math.sqrt(n_vectors))
    shared_centroids = 4 * dim * nlist

    def all_in(m: int, kept: int, codebook_bytes: int) -> float:
        shared = shared_centroids + 4 * kept * dim + codebook_bytes  # centroids, OPQ rows, PQ codebooks
        return list_bytes(nlist) + m + shared / n_vectors

    # 4-bit: m bytes, 2m codes of 2 dimensions, 4m dimensions kept; codebooks 2m x 16 x 2 float32.
    m = next((m for m in range(dim // 4, 0, -1) if all_in(m, 4 * m, 256 * m) <= code_bytes), 0)
    if m and 4 * m >= 0.8 * dim:
        rotation = f"OPQ{2 * m}" if 4 * m == dim else f"OPQ{2 * m}_{4 * m}"
        return f"{rotation},IVF{nlist},PQ{2 * m}x4"

    def dims_per_code(m: int) -> int:
        return max(4, int(0.8 * dim / m))

    # 8-bit: m codes of dims_per_code(m) dimensions; codebooks m x 256 x dims float32.
    m = next((m for m in range(dim // 4, 0, -1) if all_in(m, m * dims_per_code(m), 1024 * m * dims_per_code(m)) <= code_bytes), 0)
    if m < 8:
        raise ValueError(f"{code_bytes} bytes a vector leave room for {m} codes over {n_vectors} vectors; "
                         f"give more --code-bytes or a --factory")
    kept = m * dims_per_code(m)
    rotation = f"OPQ{m}" if kept == dim else f"OPQ{m}_{kept}"
    return f"{rotation},IVF{nlist},PQ{m}"


def list_bytes(nlist: int) -> int:
    """Bytes of an IVF list number in a standalone code, as FAISS's coarse_code_size counts them."""
    return max(1, ((nlist - 1).bit_length() + 7) // 8)


def _lists(n_vectors: int, target: float) -> int:
    """IVF lists near `target`: a power of two, at least 64, with >= 39 training points per list as k-means needs."""
    return max(64, min(2 ** round(math.log2(target)), 2 ** int(math.log2(n_vectors // 39))))


def training_size(factory: str, n_vectors: int) -> int:
    """How many vectors training needs: enough for k-means on the coarse lists and PQ."""
    if factory == "Flat" or factory.startswith("HNSW"):
        return 0
    ivf = next((p for p in factory.split(",") if p.startswith("IVF")), None)
    nlist = int("".join(ch for ch in ivf[3:] if ch.isdigit())) if ivf else 0
    # 40 points per list is past k-means' minimum (39) and keeps CPU training
    # in minutes; the coarse lists only route stage 1, stage 2 is exact.
    return min(n_vectors, max(40 * nlist, 65_536))


def make_index(factory: str, dim: int) -> faiss.Index:
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise ValueError(f"invalid FAISS factory string {factory!r}: {str(e).splitlines()[0]}") from None


def train(factory: str, sample: np.ndarray) -> faiss.Index:
    """An empty, trained index. k-means runs on the GPU when FAISS sees one."""
    index = make_index(factory, sample.shape[1])
    if index.is_trained:
        return index
    try:
        # Polysemous codes serve Hamming pre-filtering, which search never
        # uses; their simulated annealing was most of IVF-PQ training time.
        faiss.downcast_index(faiss.extract_index_ivf(index)).do_polysemous_training = False
    except (RuntimeError, AttributeError):
        pass
    _rotate_for_the_codes(index)
    if faiss.get_num_gpus() > 0:
        try:
            # The coarse k-means dominates training; it is the part worth moving.
            ivf = faiss.extract_index_ivf(index)
            ivf.clustering_index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatL2(ivf.d))
            log.info("training the coarse quantizer on %d GPU(s)", faiss.get_num_gpus())
        except RuntimeError:
            log.info("no IVF stage in %s; training on CPU", factory)
    try:
        index.train(np.ascontiguousarray(sample, dtype=np.float32))
    except RuntimeError as e:  # e.g. PQ8 needs 256 training points per sub-quantizer
        detail = next((line for line in str(e).splitlines() if "rror" in line or "should" in line), str(e).splitlines()[0])
        raise ValueError(f"FAISS factory {factory!r} cannot be trained on {len(sample)} vectors ({detail.strip()})") from None
    if faiss.get_num_gpus() > 0:
        try:
            faiss.extract_index_ivf(index).clustering_index = None
        except RuntimeError:
            pass
    return index


def _four_bit(index: Any) -> bool:
    """Whether `index` (downcast) is a plain IVF-PQ of 4-bit codes: what
    `codes_factory` chooses where the budget holds them, and what
    `fast_scan`, `_byte_codec` and the OPQ training treat apart."""
    return type(index) is faiss.IndexIVFPQ and index.pq.nbits == 4


def _rotate_for_the_codes(index: faiss.Index) -> None:
    """An OPQ rotation in front of 4-bit PQ codes is trained for them: FAISS
    trains it against 8-bit codes of as many sub-quantizers unless given the
    PQ to train against, at 16 times the centroids each."""
    typed = faiss.downcast_index(index)
    if not isinstance(typed, faiss.IndexPreTransform) or typed.chain.size() != 1:
        return
    opq = faiss.downcast_VectorTransform(typed.chain.at(0))
    inner = faiss.downcast_index(typed.index)
    if isinstance(opq, faiss.OPQMatrix) and _four_bit(inner) and opq.M == inner.pq.M:
        target = faiss.ProductQuantizer(opq.d_out, opq.M, 4)
        opq.pq = target
        opq.referenced_objects = [target]  # OPQMatrix keeps a raw pointer


def fill(trained: faiss.Index, chunks: Iterable[np.ndarray]) -> faiss.Index:
    """A copy of `trained` holding the chunks' vectors with ids 0..N-1 in order."""
    index = faiss.clone_index(trained)
    gpu = None
    if faiss.get_num_gpus() > 0:
        try:
            gpu = faiss.index_cpu_to_all_gpus(index)
        except RuntimeError:
            gpu = None
    for chunk in chunks:
        (gpu or index).add(np.ascontiguousarray(chunk, dtype=np.float32))
    return faiss.index_gpu_to_cpu(gpu) if gpu is not None else index


def read_shard_index(path: Path, dim: int, n: int, mmap: bool = False) -> Any:
    """A shard's stage-1 index file, by its name: hnswlib's (.hnsw) or FAISS's
    (standalone codes, `CODES_FILE`, are read with `read_codes` and their codec)."""
    return HnswIndex(path, dim, n) if path.name.endswith(".hnsw") else read_faiss(path, mmap)


def lists(index: Any) -> int:
    """An index's IVF lists (0 where it has none: Flat, HNSW)."""
    if isinstance(index, HnswIndex):
        return 0
    try:
        return int(faiss.extract_index_ivf(index).nlist)
    except RuntimeError:
        return 0


def holds_codes(path: str | Path) -> bool:
    """Whether a shard's index file (a manifest's name for it, or its path) is standalone codes."""
    return Path(path).name == CODES_FILE


def standalone(index: Any) -> bool:
    """Whether store="codes" keeps a shard as FAISS standalone codes (IVF
    indexes, whose inverted lists would keep an 8-byte id beside every code)
    rather than as the FAISS index file itself (Flat: float32 vectors, no ids)."""
    return lists(index) > 0


def encode(codec: faiss.Index, vectors: np.ndarray) -> np.ndarray:
    """Standalone codes (uint8 (n, codec.sa_code_size())): the IVF list number in
    the fewest bytes that hold it, then the vector's codes, behind any transform."""
    return codec.sa_encode(np.ascontiguousarray(vectors, dtype=np.float32))


def read_codes(path: Path) -> np.ndarray:
    """A shard's standalone codes, memory-mapped: stage 2 gathers rows from it."""
    codes = np.load(path, mmap_mode="r", allow_pickle=False)
    if codes.dtype != np.uint8 or codes.ndim != 2:
        raise ValueError(f"{path} is not an array of standalone codes ({codes.dtype}, {codes.shape}): the index is damaged")
    return codes


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


def write_faiss(index: faiss.Index, path: Path) -> None:
    faiss.write_index(index, str(path))


def read_faiss(path: Path, mmap: bool = False) -> faiss.Index:
    return faiss.read_index(str(path), faiss.IO_FLAG_MMAP if mmap else 0)


def search_params(index: Any, nprobe: int, selector: "faiss.IDSelector | None" = None) -> "faiss.SearchParameters | None":
    """Per-call search parameters that probe `nprobe` IVF lists and consider
    only the ids `selector` lets through, or None where neither applies. Per
    call, not set on the index: a query's nprobe must not change what
    concurrent or later queries probe."""
    if not isinstance(index, faiss.Index):
        return None
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        inner = search_params(index.index, nprobe, selector)
        if inner is None:
            return None
        params = faiss.SearchParametersPreTransform(index_params=inner)
        params.referenced_objects = [inner]  # SWIG keeps a raw pointer: keep the Python object alive
        return params
    if isinstance(index, faiss.IndexIVF):
        return faiss.SearchParametersIVF(nprobe=nprobe, sel=selector) if selector is not None else faiss.SearchParametersIVF(nprobe=nprobe)
    if selector is None:
        return None
    if isinstance(index, faiss.IndexHNSW):
        return faiss.SearchParametersHNSW(sel=selector)
    return faiss.SearchParameters(sel=selector)


def search(index: Any, queries: np.ndarray, k: int, nprobe: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids) of each query's k nearest vectors, -1 ids where fewer
    exist; `allowed` (bool per vector) restricts the search to those vectors
    inside the index (FAISS's ID selectors, hnswlib's filter), so a filter
    never costs hits the way dropping them afterwards would."""
    x = np.ascontiguousarray(queries, dtype=np.float32)
    if isinstance(index, HnswIndex):
        return index.search(x, k, allowed)
    apply_threads()
    selector = None
    if allowed is not None:
        # A local: FAISS reads the bitmap through a raw pointer while it searches.
        bitmap = np.packbits(allowed, bitorder="little")
        selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bitmap))
    params = search_params(index, nprobe, selector)
    scores, ids = index.search(x, k, params=params) if params is not None else index.search(x, k)
    return scores, ids


def decoder(index: Any, codes: np.ndarray | None = None, norm: float | None = None) -> Callable[[np.ndarray], np.ndarray]:
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
    MaxSim then ranks documents by that error (in a lab on HotpotQA-600
    `tokens`, OPQ38_304 codes scaled back scored 0.75 Recall@10 higher).

    FAISS decodes with OpenMP in the caller's thread: `set_threads`' value
    is applied there first, as `search` does."""
    raw = _decoder(index, codes)

    def decode(ids: np.ndarray) -> np.ndarray:
        apply_threads()
        return raw(ids)

    if norm is None:
        return decode

    def rescaled(ids: np.ndarray) -> np.ndarray:
        x = decode(ids)
        # In place, by torch: numpy's norm and divide took 9 of a SciFact
        # query's 40 ms (17k decoded rows), torch's 2.
        rows = torch.from_numpy(x)
        rows.mul_(torch.linalg.vector_norm(rows, dim=1, keepdim=True).clamp_min_(1e-12).reciprocal_().mul_(norm))
        return x

    return rescaled


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
    codebook over twice the dimensions. FAISS decodes 8-bit codes twice as
    fast (3.7 against 7.3 ms for a SciFact query's 8.6k candidate vectors)."""
    if not _four_bit(index) or index.pq.M % 2:
        return None
    pq = index.pq
    book = faiss.vector_to_array(pq.centroids).reshape(pq.M, pq.ksub, pq.dsub)
    byte = np.arange(256)
    pairs = np.concatenate([book[0::2][:, byte & 15], book[1::2][:, byte >> 4]], axis=2)
    codec = _on_quantizer_of(index, pq.M // 2, 8)  # the caller keeps `index` alive
    faiss.copy_array_to_vector(np.ascontiguousarray(pairs, dtype=np.float32).ravel(), codec.pq.centroids)
    return codec


def decoding_codec(codec: Any) -> Any:
    """`codec`, with a 4-bit IVF-PQ (behind its transform, if any) swapped
    for the 8-bit codec of its code pairs (`_byte_codec`), which decodes the
    same codes to the same vectors. A searcher builds it once for every
    shard whose codes share `codec`, instead of a 393 KB pair codebook a
    shard (600 of them on 6M documents at 10,000 a shard). Any other codec
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


def _on_quantizer_of(index: "faiss.IndexIVFPQ", m: int, nbits: int) -> "faiss.IndexIVFPQ":
    """An empty, trained IVF-PQ of `m` codes of `nbits` that routes and
    takes residuals as `index` does, through `index`'s own coarse
    quantizer (not a copy, not owned: `index` must outlive it). Its
    codebooks are the caller's to set."""
    ivf = faiss.IndexIVFPQ(index.quantizer, index.d, index.nlist, m, nbits, index.metric_type)
    ivf.by_residual, ivf.is_trained = index.by_residual, True
    return ivf


def scoring_decoder(index: Any, codes: np.ndarray | None = None, norm: float | None = None
                    ) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray] | None]:
    """(decode, rotate) for stage 2: inner products of `rotate(queries)` with
    `decode(ids)` equal those of the queries with `decoder(index, codes, norm)(ids)`.
    Behind an orthonormal map without bias (OPQ's rotation, or its
    projection to fewer dimensions: `OPQ80_320`), the codes are decoded in
    the mapped space and the query's few vectors are mapped instead of
    un-mapping every candidate vector (A has orthonormal rows, so
    Aq . c = q . A'c): FAISS's reverse_chain
    took 81 of 110 ms a query on SciFact `tokens` (17k candidate vectors,
    a 384 x 384 product each). `rotate` is None where nothing is rotated."""
    typed = None if isinstance(index, HnswIndex) else faiss.downcast_index(index)
    if isinstance(typed, faiss.IndexPreTransform) and typed.chain.size() == 1:
        lt = faiss.downcast_VectorTransform(typed.chain.at(0))
        if isinstance(lt, faiss.LinearTransform) and lt.is_orthonormal and not lt.have_bias and lt.d_out <= lt.d_in:
            a = faiss.vector_to_array(lt.A).reshape(lt.d_out, lt.d_in).astype(np.float32)
            # A standalone code past the transform is the inner index's; A has
            # orthonormal rows, so A'c is as long as c: lengths hold on both sides.
            inner = decoder(typed.index, codes, norm)

            def decode(ids: np.ndarray, owner: Any = index) -> np.ndarray:  # `owner` keeps the C++ index alive
                return inner(ids)

            return decode, lambda q: np.ascontiguousarray(q, dtype=np.float32) @ a.T
    return decoder(index, codes, norm), None


def build_hnsw(chunks: Iterable[np.ndarray], n: int, dim: int, path: Path, m: int = 16, ef_construction: int = 200):
    import hnswlib

    index = hnswlib.Index(space="ip", dim=dim)
    index.init_index(max_elements=max(n, 1), ef_construction=ef_construction, M=m, random_seed=0)
    start = 0
    for chunk in chunks:
        index.add_items(chunk, np.arange(start, start + len(chunk)))
        start += len(chunk)
    index.save_index(str(path))


class HnswIndex:
    """hnswlib behind the small part of FAISS's search API the searcher uses."""

    def __init__(self, path: Path, dim: int, n: int) -> None:
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=dim)
        self.index.load_index(str(path), max_elements=max(n, 1))
        self.ntotal = n

    def set_ef(self, ef: int) -> None:
        self.index.set_ef(ef)

    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, self.ntotal if allowed is None else int(allowed.sum()))
        if k == 0:
            return np.zeros((len(queries), 0), np.float32), np.full((len(queries), 0), -1, np.int64)
        self.index.set_ef(max(k, 64))
        keep = None if allowed is None else (lambda label: bool(allowed[label]))
        while True:
            try:
                labels, distances = self.index.knn_query(queries, k=k, filter=keep, num_threads=_threads or -1)
                return 1.0 - distances, labels.astype(np.int64)  # hnswlib 'ip' distance is 1 - <q, x>
            except RuntimeError:  # a filter the graph walk could not satisfy k times over
                if k == 1:
                    return np.zeros((len(queries), 0), np.float32), np.full((len(queries), 0), -1, np.int64)
                k //= 2
