"""Which stage-1 index a corpus gets: the FAISS factory string chosen from
its size, its dimension and how stage 2 reads it, and how many vectors
training that index needs.

Pure arithmetic on counts, so it is decided (and tested) without FAISS.
"""
from __future__ import annotations

import math
import re

BACKENDS = ("faiss", "hnsw")
FLAT_BELOW = 50_000  # vectors; under this, exact search is cheap and training would overfit

GRAPH_LISTS = 8192  # from this many IVF lists up, a query's vectors find theirs through an HNSW graph (`_HNSW32`)
GRAPH_DEGREE = 32
CODE_BYTES = 100  # store="codes": bytes a vector, all in, that the default codes fill
MIN_CODE_BYTES = 24  # a list number, the coarse centroids, and at least a few codes


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
    return f"{ivf(nlist)},PQ{m}x4fs"


def ivf(nlist: int) -> str:
    """The coarse lists' factory term: `IVF{nlist}`, found through an HNSW
    graph over the centroids from GRAPH_LISTS lists up. A flat quantizer
    compares every query vector with every centroid, a cost that grows
    with the lists and passes the scan it saves; the graph visits a few
    hundred of them (FAISS's IVF65536_HNSW32 for large corpora)."""
    return f"IVF{nlist}_HNSW{GRAPH_DEGREE}" if nlist >= GRAPH_LISTS else f"IVF{nlist}"


def codes_factory(n_vectors: int, dim: int, code_bytes: int = CODE_BYTES) -> str:
    """The OPQ-IVF-PQ codes that fill `code_bytes` a vector, all in.

    Every vector pays its IVF list number (2 bytes up to 65,536 lists: a
    shard keeps FAISS's standalone codes, `codes.CODES_FILE`, and no 8-byte ids)
    and its codes; the coarse centroids
    (nlist x dim float32), the OPQ matrix and the PQ codebooks are shared,
    so they cost less a vector the larger the corpus. About sqrt(N) lists,
    since 4 sqrt(N) centroids would eat a tenth of the budget; twice as
    many where that reaches GRAPH_LISTS, found through a graph (`ivf`):
    stage 1 streams a probed list's codes from memory, so lists half as
    long halve what a probe reads, and the graph finds them for less than
    a flat quantizer finds half as many. The OPQ
    keeps about 80% of the rotated dimensions, never fewer than 4 a code,
    since MiniLM's variance sits in few of them: finer codes of the
    dimensions that matter beat coarse codes of all of them.

    Where the budget holds 4 bits for every 2 of at least 80% of the
    dimensions, the codes are 4-bit, two to a byte (`OPQ{2m},...,PQ{2m}x4`
    at m bytes): stage 1 scans them
    with fast-scan SIMD (`codes.fast_scan`) and stage 2 decodes them a byte at a
    time (`decoding._byte_codec`): they rank as the 8-bit codes of the same bytes
    do, and stage 1 scans them several times faster.
    """
    nlist = _lists(n_vectors, math.sqrt(n_vectors))
    graph_lists = _lists(n_vectors, 2 * math.sqrt(n_vectors))
    if graph_lists >= GRAPH_LISTS:
        nlist = graph_lists
    graph = 4 * 2 * GRAPH_DEGREE * nlist if nlist >= GRAPH_LISTS else 0  # the graph's links on its ground level
    shared_centroids = 4 * dim * nlist + graph

    def all_in(m: int, kept: int, codebook_bytes: int) -> float:
        shared = shared_centroids + 4 * kept * dim + codebook_bytes  # centroids, OPQ rows, PQ codebooks
        return list_bytes(nlist) + m + shared / n_vectors

    # 4-bit: m bytes, 2m codes of 2 dimensions, 4m dimensions kept; codebooks 2m x 16 x 2 float32.
    m = next((m for m in range(dim // 4, 0, -1) if all_in(m, 4 * m, 256 * m) <= code_bytes), 0)
    if m and 4 * m >= 0.8 * dim:
        rotation = f"OPQ{2 * m}" if 4 * m == dim else f"OPQ{2 * m}_{4 * m}"
        return f"{rotation},{ivf(nlist)},PQ{2 * m}x4"

    def dims_per_code(m: int) -> int:
        return max(4, int(0.8 * dim / m))

    # 8-bit: m codes of dims_per_code(m) dimensions; codebooks m x 256 x dims float32.
    m = next((m for m in range(dim // 4, 0, -1) if all_in(m, m * dims_per_code(m), 1024 * m * dims_per_code(m)) <= code_bytes), 0)
    if m < 8:
        raise ValueError(f"{code_bytes} bytes a vector leave room for {m} codes over {n_vectors} vectors; "
                         f"give more --code-bytes or a --factory")
    kept = m * dims_per_code(m)
    rotation = f"OPQ{m}" if kept == dim else f"OPQ{m}_{kept}"
    return f"{rotation},{ivf(nlist)},PQ{m}"


def list_bytes(nlist: int) -> int:
    """Bytes of an IVF list number in a standalone code, as FAISS's coarse_code_size counts them."""
    return max(1, ((nlist - 1).bit_length() + 7) // 8)


def _lists(n_vectors: int, target: float) -> int:
    """IVF lists near `target`: a power of two, at least 64, with >= 39 training points per list as k-means needs."""
    return max(64, min(2 ** round(math.log2(target)), 2 ** int(math.log2(n_vectors // 39))))


# How hard the codec trains: full, quick, or by the corpus's size (auto).
TRAININGS = ("auto", "full", "quick")
QUICK_BELOW = 1 << 20  # vectors; under this, auto trains quick
OPQ_ITERATIONS = {"full": 50, "quick": 8}  # full: FAISS's default


def training(asked: str, n_vectors: int) -> str:
    """The training a corpus of `n_vectors` gets: as asked, or for `auto`,
    quick below QUICK_BELOW vectors. Full training refines an OPQ rotation
    many times on a fixed sample, a cost that does not shrink with the
    corpus: below QUICK_BELOW vectors it would be more than a fifth of a CPU
    build, and the user would wait mostly for the codec. Quick training
    samples only what k-means needs and refines the rotation a few times:
    the first refinements gain the most."""
    if asked not in TRAININGS:
        raise ValueError(f"training must be one of {', '.join(TRAININGS)}, got {asked!r}")
    if asked != "auto":
        return asked
    return "quick" if n_vectors < QUICK_BELOW else "full"


def ivf_lists(factory: str) -> int:
    """The IVF lists a FAISS factory string names (0: none). `IVF65536_HNSW32`
    names 65,536 lists, not its graph's degree run into them."""
    term = next((re.match(r"IVF(\d+)", p) for p in factory.split(",") if p.startswith("IVF")), None)
    return int(term.group(1)) if term else 0


def training_size(factory: str, n_vectors: int, effort: str = "full") -> int:
    """How many vectors training needs: enough for k-means on the coarse
    lists and PQ's codebooks; full training takes at least 65,536."""
    if factory == "Flat" or factory.startswith("HNSW"):
        return 0
    nlist = ivf_lists(factory)
    # 40 points per list (or per centroid of an 8-bit PQ's 256) is past k-means'
    # minimum (39); the coarse lists only route stage 1, and stage 2's codes
    # keep most of their accuracy (PQ's codebooks train on as many).
    needed = 40 * max(nlist, 256)
    return min(n_vectors, needed if effort == "quick" else max(needed, 65_536))
