"""propdex: multi-vector retrieval at a finer grain than one vector per document.

    import propdex
    index = propdex.Index.create("idx", encoder="tokens")   # or propdex.Index.open("idx")
    index.add([{"id": "d1", "title": "Ada Lovelace", "text": "...", "year": 1843}])
    for hit in index.search("who wrote the first program?", k=5, where={"year": 1843}):
        print(hit.score, hit.title, hit.text, hit.metadata)

The layers below are importable on their own: `propdex.encoders` (text to
vectors and unit records), `propdex.indexer` (corpora to committed shards),
`propdex.retriever` (search) and `propdex.eval` (measurement).
"""
from __future__ import annotations

import os
from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# torch and FAISS each bring an OpenMP runtime of their own, and a search
# hands work from one to the other several times a query (the query encoder,
# each shard's ANN search and decoding, the re-scoring products). By default
# an OpenMP thread spins for a while after its work is done; the other
# runtime's threads then wait for cores the idle spinners hold, which on a
# small machine costs several times the work itself. Threads that sleep
# when idle cost little on a large one. Set before either runtime loads (an
# OMP_WAIT_POLICY already set is kept).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

if TYPE_CHECKING:
    from propdex.encoders import Document, load_encoder
    from propdex.index import Index
    from propdex.indexer.build import IndexWriter
    from propdex.indexer.readers import read_corpus
    from propdex.retriever.context import Context
    from propdex.retriever.hits import Hit
    from propdex.retriever.searcher import Searcher

# Resolved on first use, so that `import propdex` does not import torch.
_EXPORTS = {
    "Index": "propdex.index",
    "Hit": "propdex.retriever.hits",
    "Context": "propdex.retriever.context",
    "Searcher": "propdex.retriever.searcher",
    "IndexWriter": "propdex.indexer.build",
    "read_corpus": "propdex.indexer.readers",
    "Document": "propdex.encoders",
    "load_encoder": "propdex.encoders",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'propdex' has no attribute {name!r}")


__all__ = ["Context", "Document", "Hit", "Index", "IndexWriter", "Searcher", "load_encoder", "read_corpus", "__version__"]
