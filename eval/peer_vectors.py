"""The vectors the peers are built from, read from a propdex index or straight from the encoder.

A peer is built from every document's stored float16 vectors, so an index
with deletions or without a float16 store is refused rather than half read.
The files written here (documents.npy, doclens.npy, queries.npy, qlens.npy)
are the whole interface to eval/fast_plaid_peer.py, which runs in an
environment without propdex.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from propdex.indexer.store import ShardStore, listed_store

from .measures import torch_sync

if TYPE_CHECKING:
    from propdex.encoders.base import Encoder


def float16_stores(index: Path, manifest: dict[str, Any], peer: str) -> list[ShardStore]:
    """The index's shard stores, open (the caller closes them), if every one
    keeps its vectors and none has deletions: a peer is built from them all."""
    if any(s.get("deleted") for s in manifest["shards"]):
        raise ValueError(f"{index}: {peer} reads every document's vectors and this index has deletions; compact it first")
    stores = [listed_store(index, s) for s in manifest["shards"]]
    if not all(st.has_vectors for st in stores):
        for st in stores:
            st.close()
        raise ValueError(f"{index}: {peer} reads a float16 store; build the index with --store float16")
    return stores


def vector_chunks(stores: list, docs: int = 1024):
    """(document ids, their vector counts, their vectors as float32) a chunk of documents at a time, in index order."""
    for store in stores:
        by_ordinal = {o: d for d, o in store.id_ordinals()}
        for start in range(0, len(store), docs):
            ordinals = range(start, min(start + docs, len(store)))
            vectors = [v for v, _ in store.vectors(ordinals)]
            yield [by_ordinal[o] for o in ordinals], [len(v) for v in vectors], np.concatenate(vectors).astype(np.float32)


def write_vectors(index: Path, manifest: dict[str, Any], out: Path) -> list[str]:
    """The index's documents' vectors as out/documents.npy (float16, one
    row a vector) and out/doclens.npy, streamed a chunk at a time. Returns
    the document id of each row of doclens."""
    stores = float16_stores(index, manifest, "the fast-plaid peer")
    try:
        rows = np.lib.format.open_memmap(out / "documents.npy", mode="w+", dtype=np.float16,
                                         shape=(manifest["counts"]["vectors"], stores[0].dim))
        doc_ids, doclens, at = [], [], 0
        for ids, lengths, vectors in vector_chunks(stores):
            rows[at: at + len(vectors)] = vectors
            at += len(vectors)
            doc_ids += ids
            doclens += lengths
        if at != len(rows):
            raise ValueError(f"{index}: the manifest counts {len(rows)} vectors, the stores hold {at}")
        rows.flush()
        del rows
        np.save(out / "doclens.npy", np.array(doclens, np.int64))
        return doc_ids
    finally:
        for st in stores:
            st.close()


def write_queries(encoder: "Encoder", queries: list[tuple[str, str]], out: Path) -> list[float]:
    """The queries' vectors as out/queries.npy (float16) and out/qlens.npy.
    Returns each query's encoding milliseconds, which every system's query time includes."""
    encode_ms, encoded = [], []
    encoder.encode_queries([queries[0][1]])  # load pages and kernels once, as timed() does
    for _, text in queries:
        started = time.perf_counter()
        encoded.append(encoder.encode_queries([text])[0].vectors.astype(np.float16))  # on the host: the device is done
        encode_ms.append((time.perf_counter() - started) * 1000)
    np.save(out / "queries.npy", np.concatenate(encoded))
    np.save(out / "qlens.npy", np.array([len(q) for q in encoded], np.int64))
    return encode_ms


def write_encoded(corpus: str, encoder: "Encoder", out: Path) -> tuple[list[str], dict[str, Any]]:
    """Every document's token vectors from `encoder`, as out/documents.npy
    (float16, documents one after another) and out/doclens.npy, the layout
    write_vectors gives. Returns the document id of each row of doclens and
    the encoding's figures. The rows are held in memory until written:
    2 bytes a dimension a vector."""
    from propdex.encoders.units import Document
    from propdex.indexer.readers import read_corpus

    docs = [r for r in read_corpus([Path(corpus)]) if isinstance(r, Document)]
    torch_sync(encoder.backbone.device)()
    started = time.perf_counter()
    passages = [p for ps in encoder.cut(docs) for p in ps]
    encoded = encoder.encode(passages, progress=True)
    seconds = time.perf_counter() - started  # the vectors are on the host: the device is done
    rows: dict[str, list[np.ndarray]] = {d.id: [] for d in docs}
    for passage, e in zip(passages, encoded):
        rows[passage.doc.id].append(e.vectors.astype(np.float16))
    doc_ids = [d for d, parts in rows.items() if sum(map(len, parts))]
    np.save(out / "documents.npy", np.concatenate([v for d in doc_ids for v in rows[d]]))
    np.save(out / "doclens.npy", np.array([sum(map(len, rows[d])) for d in doc_ids], np.int64))
    return doc_ids, {"from": "encoder", "documents": len(docs), "passages": len(passages),
                     "vectors": sum(len(e.vectors) for e in encoded), "encode_s": round(seconds, 2),
                     "encode_docs_per_s": round(len(docs) / seconds, 1)}
