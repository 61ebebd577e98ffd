"""IndexSettings: how an index is laid out, typed and validated once.

They are what `propdex index` flags, eval's system options and
`IndexWriter(...)`/`propdex.Index.create(...)` keywords become, and what the
manifest records (`settings`); a resumed build must be given the same.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from propdex.encoders.spec import convert

from . import ann


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
STORES = ("float16", "codes")


def store_of(manifest: Mapping[str, Any]) -> str:
    """The store an index was built with: what its manifest records, or,
    for an index from before the setting, the float16 copy it kept."""
    return manifest.get("settings", {}).get("store", "float16")


@dataclass(frozen=True)
class IndexSettings:
    shard_docs: int = 10_000  # documents per shard: the unit of commit and of parallel search
    factory: str | None = None  # FAISS factory string (None: chosen from the vector count at training)
    backend: str = "faiss"  # stage-1 ANN library: faiss or hnsw
    bm25: bool = True  # a BM25 index beside the vectors
    store: str = "codes"  # what stage 2 re-scores: the ANN index's own codes, or a float16 copy of every vector
    code_bytes: int = ann.CODE_BYTES  # store="codes" without a factory: bytes a vector, all in, the codes may fill

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, convert(getattr(self, f.name), {"shard_docs": int, "factory": str | None,
                                                                                "backend": str, "bm25": bool, "store": str,
                                                                                "code_bytes": int}[f.name], f.name))
        if self.shard_docs < 1:
            raise ValueError("shard_docs (--shard-docs) must be at least 1")
        if self.backend not in ann.BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose from {', '.join(ann.BACKENDS)}")
        if self.store not in STORES:
            raise ValueError(f"unknown store {self.store!r} (--store); choose from {', '.join(STORES)}")
        if self.code_bytes < ann.MIN_CODE_BYTES:
            raise ValueError(f"code_bytes (--code-bytes) must be at least {ann.MIN_CODE_BYTES}, got {self.code_bytes}")

    def check_factory(self, dim: int) -> None:
        """Fail now on a factory FAISS cannot build, not after hours of encoding."""
        if self.factory is not None:
            ann.make_index(self.factory, dim)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
