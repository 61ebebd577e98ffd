"""The build's phases, each ending in a commit, so a killed build resumes at
the phase it was in:

1. encode: documents are encoded a shard at a time; each shard's LMDB store
   is written aside, renamed into place, then listed in the manifest.
2. train: once the vector count is known, the ANN index (default factory
   chosen from count and dim) is trained on a fixed-seed sample.
3. add (`fill`): every shard gets its own index file holding its vectors.
   With store="codes" that file is the shard's standalone codes (IVF list
   number and PQ codes a row, no ids: `ann.CODES_FILE`); its float16 copy is
   dropped in the same commit and removed after it: stage 2 decodes the
   codes instead. With store="binary" it is the shard's binary rows (list
   number and B-bit code: `binary.BITS_FILE`), and the float16 copy goes too.
4. lexical: a BM25 index of every live document's title and text
   (indexer.lexical) is written aside, renamed into place and listed
   (skipped with bm25=False).

Shard boundaries, batch composition and the training sample are all
deterministic, so a resumed build ends as an uninterrupted one would. The
living index (`living`) reuses train, fill and lexical on its new shards.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm


from . import ann, binary, lexical
from .commit import TRAINED, Transaction, remove
from .encoding import encoded, skip_records, take
from .manifest import MANIFEST, AnnIndex, Lexical, Shard, Status, sha256_file
from .readers import Record
from .store import RowWriter

if TYPE_CHECKING:
    from propdex.encoders import Encoder

log = logging.getLogger(__package__ + ".build")  # the writer's one logger name, as always


def run(tx: Transaction, encoder: "Encoder", records: Iterable[Record], limit: int | None) -> None:
    """Run the phases from the manifest's status on; a part of a build stops
    after encoding (status `encoded`: `merge` goes on)."""
    started = time.time()
    m = tx.manifest
    if m.status == Status.ENCODING:
        encode(tx, encoder, records, limit)
        m.status = Status.ENCODED if m.part else Status.TRAINING
        tx.commit()
    if m.status == Status.ENCODED:
        log.info("encoded part %d of %d: %d documents in %d shards; merge the parts with `propdex merge`",
                 m.part.id, m.part.of, m.counts.documents, len(m.shards))
        return
    if m.status == Status.TRAINING:
        _train_all(tx)
        m.status = Status.ADDING
        tx.commit()
    if m.status == Status.ADDING:
        fill(tx)
        m.status = Status.LEXICAL
        tx.commit()
    if m.status == Status.LEXICAL:
        if m.settings.bm25:
            build_lexical(tx, encoder.title)
        m.status = Status.COMPLETE
        tx.commit()
    c = m.counts
    log.info("indexed %d documents (%d sentences) as %d vectors in %d shards, %s; skipped %d%s; %.1fs",
             c.documents, c.sentences, c.vectors, len(m.shards), m.index.factory, c.skipped, f" {m.skipped}" if m.skipped else "",
             time.time() - started)


def _train_all(tx: Transaction) -> None:
    """Train on every committed shard. No document at all commits nothing:
    the manifest goes, so a re-run (another --format, say) starts afresh."""
    m = tx.manifest
    if m.counts.documents == 0:
        (tx.out / MANIFEST).unlink()
        raise ValueError(f"no document could be read from the inputs (skipped: {m.skipped or 'none'}); "
                         f"check the paths and --format; nothing is indexed in {tx.out}")
    try:
        train(tx)
    except ValueError as e:
        raise ValueError(f"{e}; the encoded shards are kept: re-run with another --factory (or --store) to train on them") from None


def encode(tx: Transaction, encoder: "Encoder", records: Iterable[Record], limit: int | None) -> None:
    """Encode `records` (at most `limit` documents, counting those committed)
    into shards of shard_docs, committing each; the records committed shards
    consumed are skipped, and so are ids they hold."""
    shards = tx.manifest.shards
    done_docs = sum(s.docs for s in shards)
    seen: set[str] = set()
    for s in shards:
        store = tx.store(s)
        seen.update(store.doc_ids())
        store.close()
    stream = iter(records)
    skip_records(stream, sum(s.inputs for s in shards))
    bar = tqdm(desc="index", unit="doc", initial=done_docs, total=limit, dynamic_ncols=True)
    shard_docs = tx.manifest.settings.shard_docs
    while limit is None or done_docs < limit:
        want = shard_docs if limit is None else min(shard_docs, limit - done_docs)
        docs, n_inputs, skipped, examples = take(stream, want, seen)
        if n_inputs == 0:
            break
        shards.append(tx.write_shard(tx.next_shard(), encoded(encoder, docs, bar), n_inputs, skipped, examples))
        tx.commit()
        done_docs += len(docs)
    bar.close()


def train(tx: Transaction, shards: list[Shard] | None = None, name: str = TRAINED) -> None:
    """Choose and train the ANN index on a sample of `shards`' vectors
    (default: the committed ones), written as `name`; recorded in the
    manifest, not committed."""
    started = time.time()
    m, settings = tx.manifest, tx.manifest.settings
    shards = m.shards if shards is None else shards
    if settings.store == "binary":
        _train_binary(tx, shards)
        m.index.train_s = round(time.time() - started, 3)
        return
    n, dim = sum(s.vectors for s in shards), tx.dim
    backend = settings.backend
    factory = "HNSW" if backend == "hnsw" else (settings.factory or ann.default_factory(n, dim, settings.store, settings.code_bytes))
    m.index = AnnIndex(backend=backend, factory=factory, metric="inner_product", trained=None)
    if backend == "faiss":
        effort = ann.training(settings.training, n)
        size = ann.training_size(factory, n, effort)
        if size:
            sample = _sample(tx, size, shards)
            log.info("training %s (%s) on %d of %d vectors", factory, effort, len(sample), n)
            trained = ann.train(factory, sample, ann.OPQ_ITERATIONS[effort])
            m.index.training = effort
            m.index.vector_norm = ann.common_norm(sample)  # stage 2 scales decoded codes back to it (ann.decoder)
            m.index.scaled_codes = m.index.vector_norm is not None  # each code's scale to it, stored (codes.scaled)
        else:
            trained = ann.make_index(factory, dim)
        ann.write_faiss(trained, tx.out / (name + ".tmp"))
        (tx.out / (name + ".tmp")).rename(tx.out / name)
        m.index.trained = name
        m.index.trained_sha256 = sha256_file(tx.out / name)
        m.index.trained_bytes = (tx.out / name).stat().st_size
        m.index.trained_on = size
    m.index.train_s = round(time.time() - started, 3)


def _train_binary(tx: Transaction, shards: list[Shard]) -> None:
    """The binary store's codec: the hashing heads (read, or fitted on a
    sample for pca and itq) and, for BIVF, the lists' k-means over the
    sample's codes; written as binary.CODEC_FILE and recorded."""
    m, settings = tx.manifest, tx.manifest.settings
    n = sum(s.vectors for s in shards)
    factory = settings.factory or binary.default_factory(n)
    size = binary.training_size(factory, n, settings.hashing)
    sample = _sample(tx, size, shards) if size else None
    heads, weights_sha256 = binary.heads(settings.hashing, settings.bits, m.encoder, sample)
    log.info("training %s over %d-bit %s codes on %d of %d vectors", factory, settings.bits, settings.hashing, size, n)
    codec = binary.train(factory, heads, sample)
    tmp = tx.out / (binary.CODEC_FILE + ".tmp")
    binary.write_codec(codec, tmp, {"weights_sha256": weights_sha256 or ""})
    tmp.rename(tx.out / binary.CODEC_FILE)
    m.index = AnnIndex(backend="faiss", factory=factory, metric="hamming", trained=binary.CODEC_FILE)
    m.index.trained_sha256 = sha256_file(tx.out / binary.CODEC_FILE)
    m.index.trained_bytes = (tx.out / binary.CODEC_FILE).stat().st_size
    m.index.trained_on = size
    m.index.hashing = {"method": settings.hashing, "bits": settings.bits, "weights_sha256": weights_sha256}


def _sample(tx: Transaction, size: int, shards: list[Shard]) -> np.ndarray:
    """A fixed-seed uniform sample of the shards' vectors, read shard by shard:
    the same shards give the same sample, so a resumed build trains the same."""
    n = sum(s.vectors for s in shards)
    chosen = np.sort(np.random.default_rng(0).choice(n, size=size, replace=False))
    parts, base = [], 0
    for s in shards:
        store = tx.store(s)
        for chunk in store.iter_vectors():
            lo, hi = np.searchsorted(chosen, [base, base + len(chunk)])
            parts.append(chunk[chosen[lo:hi] - base])
            base += len(chunk)
        store.close()
    return np.concatenate(parts)


def fill(tx: Transaction, shards: list[Shard] | None = None, commit: bool = True) -> list[Path]:
    """Give each shard without one its ANN index file (committing each, in a
    build: a killed add phase resumes at the next shard). Returns the float16
    copies that store="codes" drops, to remove once the caller commits (with
    `commit`: already removed)."""
    m = tx.manifest
    dropped: list[Path] = []
    # The manifest names the trained file: a re-trained index's is trained-GENERATION.faiss.
    if m.settings.store == "binary":
        trained: object | None = binary.read_codec(tx.out / m.index.trained)
    else:
        trained = ann.read_faiss(tx.out / m.index.trained) if m.index.backend == "faiss" else None
    pending = [s for s in (m.shards if shards is None else shards) if s.index is None]
    for s in tqdm(pending, desc="add", unit="shard", disable=len(pending) < 2):
        _fill_shard(tx, s, trained)
        if m.settings.store != "float16" and s.stored:
            dropped.append(tx.out / s.name / s.stored)
            s.stored, s.stored_sha256, s.stored_bytes = None, None, None
        if commit:
            tx.commit()
            for path in dropped:
                remove(path)
            dropped.clear()
    return dropped


def _fill_shard(tx: Transaction, s: Shard, trained: object | None) -> None:
    """Write the shard's index file from its stored vectors, streamed: its
    standalone codes (store="codes" over a standalone codec), a filled FAISS
    index, or an HNSW graph (no trained index)."""
    started = time.time()
    store = tx.store(s)
    folder = tx.out / s.name
    if isinstance(trained, binary.BinaryCodec):
        file = binary.BITS_FILE
        rows = RowWriter(folder / (file + ".tmp"), trained.row_bytes, "|u1")
        for chunk in store.iter_vectors():
            rows.append(trained.rows(chunk))
        rows.finish()
    elif trained is not None and tx.manifest.settings.store == "codes" and ann.standalone(trained):
        file = ann.CODES_FILE  # streamed: a shard's codes are never all in memory
        index = tx.manifest.index
        norm = index.vector_norm if index.scaled_codes else None
        rows = RowWriter(folder / (file + ".tmp"), ann.row_bytes(trained, norm is not None), "|u1")
        decoding = ann.decoding_codec(trained) if norm is not None else None
        for chunk in store.iter_vectors():
            codes = ann.encode(trained, chunk)
            rows.append(codes if decoding is None else ann.scaled(codes, decoding.sa_decode(codes), norm))
        rows.finish()
    elif trained is not None:
        file = "index.faiss"
        ann.write_faiss(ann.fill(trained, store.iter_vectors()), folder / (file + ".tmp"))
    else:
        file = "index.hnsw"
        ann.build_hnsw(store.iter_vectors(), s.vectors, tx.dim, folder / (file + ".tmp"))
    store.close()
    (folder / (file + ".tmp")).rename(folder / file)
    s.index, s.index_sha256 = file, sha256_file(folder / file)
    s.index_bytes = (folder / file).stat().st_size
    s.add_s = round(time.time() - started, 3)


def build_lexical(tx: Transaction, titles: bool) -> list[Path]:
    """A BM25 segment (lexical.Segment) for every shard that has none, over
    all of the shard's documents in ordinal order (a searcher leaves the
    deleted ones out when it combines the segments), written aside and
    renamed into the shard; recorded in the manifest, not committed. An
    index's one BM25 directory from before segments is returned, for the
    caller to remove once the commit no longer lists it."""
    started = time.time()
    m = tx.manifest
    built = 0
    for s in m.shards:
        if s.bm25:
            continue
        folder = tx.out / s.name
        tmp, final = folder / (lexical.SEGMENT_DIR + ".tmp"), folder / lexical.SEGMENT_DIR
        remove(tmp)
        remove(final)  # renamed by a build killed before its commit
        store = tx.store(s)
        try:
            docs = (store.document(o) for o in range(s.docs))
            lexical.Segment.build((d.id, lexical.document_text(d.title if titles else "", d.text)) for d in docs).save(tmp)
        finally:
            store.close()
        s.bm25_files = {f.name: sha256_file(f) for f in sorted(tmp.iterdir())}
        tmp.rename(final)
        s.bm25 = lexical.SEGMENT_DIR
        built += 1
    old = [tx.out / m.lexical.dir] if m.lexical is not None and m.lexical.dir else []
    live = sum(s.live_docs for s in m.shards)
    if not live:
        m.lexical = None
        return old
    took = round(time.time() - started, 3)
    m.lexical = Lexical.of("", live, lexical.PARAMS, {}, took)
    m.lexical.segments = len(m.shards)
    log.info("BM25: %d new segments, %d live documents in %d segments (%.1fs)", built, live, len(m.shards), took)
    return old
