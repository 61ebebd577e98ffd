"""`propdex bench --sections ingest`: what one small add costs a large living index.

A `single` index of `docs` synthetic documents (each 20-60 words drawn from
a Zipf-distributed vocabulary of 30,000 made-up words, fixed seed: text
whose BM25 postings look like a real corpus's, not real text), built in
bulk; then `adds` one-document adds, one at a time as a RAG application
feeds a served index, each timed from the call to its commit (encoding
the document, its shard, its BM25 segment, any merges the merge policy
makes). Beside them, in the same run: what a BM25 over every live
document costs to build, the price each add paid while BM25 was rebuilt at
every commit.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from propdex.encoders import Document, load_encoder
from propdex.indexer import lexical

from .measures import latency

if TYPE_CHECKING:
    from propdex.encoders import Backbone

VOCABULARY = 30_000


def synthetic_documents(n: int, seed: int = 0, start: int = 0) -> list[Document]:
    """`n` documents of made-up words with Zipf-like frequencies, ids syn-<i>."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, VOCABULARY + 1)
    p = 1.0 / ranks
    p /= p.sum()
    words = rng.choice(VOCABULARY, size=(n, 60), p=p)
    lengths = rng.integers(20, 61, size=n)
    return [Document(id=f"syn-{start + i}", title=f"Note {start + i}",
                     text=" ".join(f"w{w}" for w in words[i, : lengths[i]]) + ".") for i in range(n)]


def ingest(work: Path, backbone: "Backbone", docs: int, adds: int) -> dict[str, Any]:
    import propdex

    encoder = load_encoder("single", backbone=backbone)
    path = work / f"ingest-{docs}"
    corpus = synthetic_documents(docs)
    index = propdex.Index.open(path) if (path / "manifest.json").is_file() else None
    if index is None or len(index) < docs:
        started = time.perf_counter()
        if index is None:
            index = propdex.Index.create(path, encoder)
        index.add(corpus[len(index):])
        bulk_s = time.perf_counter() - started
    else:
        bulk_s = None
    shards_before = len(index.manifest["shards"])
    extra = synthetic_documents(adds, seed=1, start=10 * docs + len(index))
    times = []
    for d in extra:
        started = time.perf_counter()
        index.add([d])
        times.append((time.perf_counter() - started) * 1000)
    shards_after = len(index.manifest["shards"])
    found = sum(index.search(d.text, k=1, bm25=True)[0].doc_id == d.id for d in extra)
    index.close()
    started = time.perf_counter()
    lexical.BM25.build((d.id, lexical.document_text(d.title, d.text)) for d in corpus + extra)
    rebuild_ms = (time.perf_counter() - started) * 1000
    return {
        "documents": docs, "adds": adds, "text": "synthetic (Zipf over 30k made-up words, 20-60 a document)",
        "bulk_build_s": None if bulk_s is None else round(bulk_s, 1),
        "add_commit_ms": {**latency(times), "max_ms": round(max(times), 1)},
        "bm25_rebuild_ms": round(rebuild_ms, 1),
        "shards_before": shards_before, "shards_after": shards_after,
        "added_found_by_bm25": found,
    }
