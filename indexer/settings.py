"""IndexSettings: how an index is laid out, typed and validated once.

Each is declared here once (encoders.options): `propdex index`'s flags are
derived from the fields, and they, eval's system options and
`IndexWriter(...)`/`propdex.Index.create(...)` keywords become one of these;
the manifest records it (`settings`); a resumed build must be given the same.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from propdex.encoders.options import check, option

from propdex.encoders.hashing import METHODS, check_bits

from . import ann, binary


# float16: stage 2 reads an exact float16 copy of every vector (2 * dim bytes
#   each, beside the ANN index's codes).
# codes: stage 2 decodes the ANN index's own codes (IVF-PQ: centroid plus
#   product-quantised residual; Flat and HNSW: the float32 vectors), so the
#   index holds each vector once. The float16 copy serves the build and is
#   removed once a shard's ANN index is committed.
#   Unless a factory is given, the codes fill `code_bytes` a vector, all in
#   (ann.default_factory). codes are the default store: they rank close to
#   exact MaxSim at about a ninth of the float16 copy's bytes; under 50k
#   vectors both are exact.
# binary: each vector kept as its `bits`-bit code alone (indexer.binary):
#   stage 1 scans the codes with the float query (or, through lists, by
#   Hamming distance), stage 2 scores the float query against the codes;
#   `hashing` names where the bits come from (encoders.hashing).
STORES = ("float16", "codes", "binary")


def store_of(manifest: Mapping[str, Any]) -> str:
    """The store an index was built with: what its manifest records, or,
    for an index from before the setting, the float16 copy it kept."""
    return manifest.get("settings", {}).get("store", "float16")


def unread_by(store: str) -> tuple[str, ...]:
    """The settings an index of `store` never reads: --bits and --hashing
    outside the binary store, --code-bytes outside the codes store (as their
    help says), so a change of their defaults never refuses a re-run over
    an index built before it."""
    return (() if store == "binary" else ("bits", "hashing")) + (() if store == "codes" else ("code_bytes",))


@dataclass(frozen=True)
class IndexSettings:
    shard_docs: int = option(10_000, "documents per shard: the unit of commit and of parallel search", minimum=1)
    factory: str | None = option(None, "FAISS factory string (default: chosen from the vector count at training: exact "
                                       "Flat for a small corpus, else OPQ + IVF + PQ filling --code-bytes)")
    backend: str = option("faiss", "stage-1 ANN library", choices=ann.BACKENDS)
    bm25: bool = option(True, "a BM25 index beside the vectors")
    store: str = option("codes", "what stage 2 re-scores: codes (the ANN index's own codes, decoded), float16 (an "
                                 "exact copy of every vector beside the index, 2 bytes a dimension) or binary (a "
                                 "--bits code a vector and nothing else)", choices=STORES)
    code_bytes: int = option(ann.CODE_BYTES, "with store codes and no factory: bytes a vector, all in, the codes may fill",
                             minimum=ann.MIN_CODE_BYTES)
    bits: int = option(binary.BITS, "with store binary: bits a vector's code (a multiple of 8)", minimum=8)
    hashing: str = option("pca", "with store binary: where the bits come from: pca (the corpus's principal directions), "
                                 "itq, learned (the shipped heads of tokens and nugget), untrained or lsh",
                          choices=METHODS)
    training: str = option("auto", "how long the codec trains: full, quick (a smaller sample, fewer OPQ refinements) or "
                                   f"auto (quick under {ann.QUICK_BELOW:,} vectors)", choices=ann.TRAININGS)

    def __post_init__(self) -> None:
        check(self)

    def check_factory(self, dim: int) -> None:
        """Fail now on a factory FAISS cannot build, not after hours of encoding."""
        if self.store == "binary":
            check_bits(self.bits, dim, self.hashing)
            if self.factory is not None:
                binary.lists_of(self.factory)
        elif self.factory is not None:
            ann.make_index(self.factory, dim)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
