"""A complete index lives on, as Lucene's segments do: `add` appends
documents in new shards, `delete` commits a tombstone file per shard it
touches, and `compact` rewrites the shards holding deletions (and merges
small ones) from their stored vectors, without encoding again.

Each change writes everything aside and commits it with one manifest, the
next generation, so it happens entirely or not at all, and a reader opened
before keeps the files it opened; the files the new generation no longer
lists are removed only after it is committed. Each shard carries its own
BM25 segment (indexer.lexical), so a commit indexes only what it adds.

After an add commits, small shards are merged by size tiers (`merge_tiers`,
each merge its own commit): a stream of one-document adds keeps a shard
count logarithmic in the adds instead of one shard an add.
"""
from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from propdex.encoders import Encoded

from . import ann, binary, encoding, phases
from .commit import Transaction, remove
from .manifest import Shard, Status, sha256_file
from .readers import Record
from .readers.base import Kept
from .store import Rows, ShardStore, write_deleted

if TYPE_CHECKING:
    from propdex.encoders import Encoder

log = logging.getLogger(__package__ + ".build")  # the writer's one logger name, as always


def require_complete(tx: Transaction, what: str) -> None:
    """Only a complete index changes: an unfinished build must finish first,
    or its resume would not find what it committed."""
    if tx.manifest.status != Status.COMPLETE:
        raise ValueError(f"cannot {what} {tx.out} while its build is unfinished ({tx.manifest.status}); "
                         f"run the same `propdex index` command again to finish it first")


def add(tx: Transaction, encoder: "Encoder", records: Iterable[Record | Kept], replace: bool,
        delete_missing: bool = False) -> dict[str, Any]:
    """Append the records' documents in new shards, in one commit; an id the
    index holds already is refused unless `replace`: then a document equal
    to the one stored (text, title, sentences, focus, metadata) is left as
    it is, counted `unchanged`, and any other earlier version is deleted in
    the same commit. Syncing a folder of notes re-encodes only what changed.
    With `delete_missing` (a sync) the same commit also deletes every
    document the records did not name, so a note removed from the folder
    leaves the index. A file that is there but cannot be read this time
    keeps its earlier version (its skip names it, `Skip.id`); a record
    skipped inside a file of many (a JSONL line) names none, so its earlier
    version goes. A read that yields no document deletes nothing: it
    is refused, as a wrong path more likely than an emptied corpus.

    Records are taken a shard at a time (shard_docs), each shard written
    before the next is read, so an add holds one shard's documents in
    memory however many it brings; nothing is listed until the commit."""
    require_complete(tx, "add to")
    stream, named = iter(records), set[str]()
    new: list[Shard] = []
    found: dict[str, tuple[int, int]] = {}
    same: set[str] = set()
    skipped: Counter[str] = Counter()
    unlisted = (0, Counter[str](), dict[str, list[str]]())  # what was read since the last shard written: its inputs, skips
    bar = None  # shown once an add is larger than one encode chunk
    while True:
        docs, n_inputs, chunk_skips, examples = encoding.take(stream, tx.manifest.settings.shard_docs, named, same)
        if not n_inputs:
            break
        skipped += chunk_skips
        unlisted = (unlisted[0] + n_inputs, unlisted[1] + chunk_skips, _merged(unlisted[2], examples))
        known = find(tx, [d.id for d in docs])
        if known and not replace:
            for shard in new:  # written, never listed: the refusal leaves nothing behind
                remove(tx.out / shard.name)
            shown = ", ".join(repr(d) for d in list(known)[:3]) + (f" and {len(known) - 3} more" if len(known) > 3 else "")
            raise ValueError(f"{len(known)} of the documents are in {tx.out} already ({shown}); "
                             f"update them instead (Index.update, `propdex add --update`)")
        unchanged = _unchanged(tx, docs, known)
        same |= unchanged
        found |= {doc_id: at for doc_id, at in known.items() if doc_id not in unchanged}
        docs = [d for d in docs if d.id not in unchanged]
        if bar is None and (new or len(docs) > encoding.ENCODE_DOCS):
            bar = tqdm(desc="add", unit="doc", dynamic_ncols=True, initial=sum(s.docs for s in new))
        if docs:
            new.append(tx.write_shard(tx.next_shard() + len(new), encoding.encoded(encoder, docs, bar), *unlisted))
            unlisted = (0, Counter(), {})
    if bar is not None:
        bar.close()
    if new and unlisted[0]:  # records read after the last shard was written: counted there
        last = new[-1]
        last.inputs, last.skipped = last.inputs + unlisted[0], dict(Counter(last.skipped) + unlisted[1])
        last.skipped_examples = _merged(last.skipped_examples, unlisted[2])
    gone = _missing(tx, named) if delete_missing else {}
    if delete_missing and gone and not (new or found or same):
        raise ValueError(f"the inputs gave no document ({sum(skipped.values())} skipped: {dict(skipped)}), so deleting "
                         f"what they miss would empty {tx.out}; to delete documents, name them (`propdex delete`)")
    added = sum(s.docs for s in new)
    result = {"added": added, "replaced": len(found), "unchanged": len(same), "skipped": dict(skipped)}
    result |= {"deleted": len(gone)} if delete_missing else {}
    if gone:
        shown = ", ".join(list(gone)[:5]) + (f" and {len(gone) - 5} more" if len(gone) > 5 else "")
        log.info("deleting %d documents of %s that the inputs no longer hold: %s", len(gone), tx.out, shown)
    if not new:
        if gone:
            commit_generation(tx, encoder.title, _tombstone(tx, gone))
        elif skipped:  # nothing to commit, but say so
            log.warning("nothing added to %s: every record was %s (%s skipped: %s)", tx.out,
                        "skipped or unchanged" if same else "skipped", sum(skipped.values()), dict(skipped))
        return result
    if tx.manifest.index is None:
        phases.train(tx, new)
    garbage = phases.fill(tx, new, commit=False)
    garbage += _tombstone(tx, found | gone)
    tx.manifest.shards += new
    commit_generation(tx, encoder.title, garbage)
    log.info("added %d documents to %s (%d replaced, %d unchanged) in %d shard(s)", added, tx.out, len(found),
             len(same), len(new))
    merged = merge_tiers(tx, encoder.title)
    return result | ({"merged": merged} if merged else {})


def _merged(examples: dict[str, list[str]], more: dict[str, list[str]]) -> dict[str, list[str]]:
    """Skip examples by reason, at most EXAMPLES_PER_REASON each."""
    out = {reason: list(sources) for reason, sources in examples.items()}
    for reason, sources in more.items():
        out[reason] = (out.get(reason, []) + sources)[: encoding.EXAMPLES_PER_REASON]
    return out


def delete(tx: Transaction, titles: bool, doc_ids: Iterable[str]) -> dict[str, Any]:
    """Delete the documents with these ids, in one commit."""
    require_complete(tx, "delete from")
    ids = list(dict.fromkeys(doc_ids))
    found = find(tx, ids)
    missing = [d for d in ids if d not in found]
    if found:
        commit_generation(tx, titles, _tombstone(tx, found))
        log.info("deleted %d documents from %s", len(found), tx.out)
    return {"deleted": len(found), "missing": missing}


def compact(tx: Transaction, titles: bool, retrain: bool = False) -> dict[str, Any]:
    """Rewrite the shards that hold deleted documents, and merge shards
    smaller than shard_docs, from their stored vectors (no encoding); the
    rewritten shards' files are removed once the new ones are committed.
    An index whose trained index is not what a bulk build of its size would
    choose (`outgrown`: created empty, it chose Flat at its first add), or
    one told to (`retrain`), is re-trained on its live vectors and every
    shard rewritten through the new one."""
    require_complete(tx, "compact")
    m = tx.manifest
    if retrain or outgrown(m, tx.dim):
        return _retrain(tx, titles)
    shards, size = m.shards, m.settings.shard_docs
    small = {s.name for s in shards if s.docs < size}  # shard names are unique
    rewrite = [s for s in shards if s.deleted_docs or (len(small) > 1 and s.name in small)]
    if not rewrite:
        return {"rewritten": 0, "removed": 0, "shards": len(shards)}
    removed = rewrite_shards(tx, titles, rewrite)
    log.info("compacted %s: %d shards rewritten, %d deleted documents removed", tx.out, len(rewrite), removed)
    return {"rewritten": len(rewrite), "removed": removed, "shards": len(m.shards)}


def outgrown(m: Any, dim: int) -> bool:
    """Whether the index's factory is the default's and no longer the one a
    bulk build of its live vectors would choose."""
    if m.index is None or m.settings.factory or m.settings.backend != "faiss" or m.settings.store == "binary" or not m.shards:
        return False
    live = sum(s.vectors * s.live_docs // max(s.docs, 1) for s in m.shards)
    return m.index.factory != ann.default_factory(live, dim, m.settings.store, m.settings.code_bytes)


def _retrain(tx: Transaction, titles: bool) -> dict[str, Any]:
    """Every live document rewritten into new shards through an index trained
    anew on their vectors (decoded, where only codes are kept), in one
    commit; the old trained file goes with the old shards."""
    m = tx.manifest
    if m.index is None or m.settings.store == "binary" or m.settings.backend != "faiss":
        raise ValueError(f"{tx.out}: only a FAISS index of float vectors or codes is re-trained "
                         f"(store={m.settings.store}, backend={m.settings.backend})")
    rewrite, before = list(m.shards), m.index.factory
    removed = rewrite_shards(tx, titles, rewrite, retrain=True)
    log.info("re-trained %s: %s -> %s, %d shards rewritten as %d", tx.out, before, m.index.factory, len(rewrite), len(m.shards))
    return {"rewritten": len(rewrite), "removed": removed, "shards": len(m.shards), "retrained": m.index.retrained | {"to": m.index.factory}}


def rewrite_shards(tx: Transaction, titles: bool, rewrite: list[Shard], retrain: bool = False) -> int:
    """The live documents of `rewrite` written into new shards of shard_docs
    (with their BM25 segments) in their place, in one commit; with
    `retrain`, through an index trained anew on them (a new trained file;
    the old one goes with the old shards). The number of deleted documents
    that dropped out."""
    m = tx.manifest
    live = [(s, o) for s in rewrite for o in sorted(set(range(s.docs)) - set(tx.deleted(s).tolist()))]
    new = _rewrite(tx, rewrite, live)
    garbage = [tx.out / s.name for s in rewrite]
    if retrain:
        before, old, generation = m.index.factory, m.index.trained, _next_generation(tx)
        phases.train(tx, new, name=f"trained-{generation:06d}.faiss")
        m.index.retrained = {"from": before, "generation": generation}
        garbage += [tx.out / old] if old else []
    garbage += phases.fill(tx, new, commit=False)
    for entry in new[:1]:
        _carry_inputs(entry, rewrite)
    rewritten = {s.name for s in rewrite}
    m.shards = [s for s in m.shards if s.name not in rewritten] + new
    commit_generation(tx, titles, garbage)
    return sum(s.deleted_docs or 0 for s in rewrite)


# -- merge policy -----------------------------------------------------------------------------
MERGE_FACTOR = 4  # shards of one size tier merged into one


def tier(docs: int, factor: int = MERGE_FACTOR) -> int:
    """A shard's size tier: floor(log_factor(live documents)); 1-3 documents are tier 0, 4-15 tier 1..."""
    t = 0
    while docs >= factor:
        docs //= factor
        t += 1
    return t


def tier_to_merge(shards: list[Shard], shard_docs: int, factor: int = MERGE_FACTOR) -> list[Shard]:
    """The `factor` oldest shards of the smallest tier that holds that many
    shards below shard_docs (empty: none). Merging them makes one shard of
    the next tier, so small adds leave at most factor - 1 shards a tier and
    the shard count grows with the logarithm of the adds (Lucene's tiered
    merge policy, by document count)."""
    tiers: dict[int, list[Shard]] = {}
    for s in shards:
        if s.live_docs < shard_docs:
            tiers.setdefault(tier(s.live_docs, factor), []).append(s)
    for t in sorted(tiers):
        if len(tiers[t]) >= factor:
            return tiers[t][:factor]
    return []


def merge_tiers(tx: Transaction, titles: bool) -> int:
    """After a commit: merge full tiers of small shards, each merge its own
    commit, until no tier is full; the shards merged."""
    m = tx.manifest
    merged = 0
    while chosen := tier_to_merge(m.shards, m.settings.shard_docs):
        rewrite_shards(tx, titles, chosen)
        merged += len(chosen)
    if merged:
        log.info("merged %d small shards of %s; %d shards now", merged, tx.out, len(m.shards))
    return merged


def _rewrite(tx: Transaction, rewrite: list[Shard], live: list[tuple[Shard, int]]) -> list[Shard]:
    """The live documents of `rewrite` written into new shards of shard_docs,
    from their stored (or decoded) vectors; a binary store's from their
    codes' rows, copied as they are (its codes cannot be encoded again)."""
    # Every shard decodes through one copy of the trained codec: a large
    # codec's quantizer is big, and all the shards to rewrite are open at once.
    # Flat and HNSW shards hold their own vectors and have no trained file:
    # the codec is read only when a shard asks for it.
    hashed = tx.manifest.settings.store == "binary"
    codec = functools.cache(lambda: _read_codec(tx.out / tx.manifest.index.trained, hashed))
    stores = {s.name: _decoding_store(tx, s, codec) for s in rewrite}
    number, size = tx.next_shard(), tx.manifest.settings.shard_docs
    rows = Rows(binary.BITS_FILE, codec().row_bytes, "|u1") if hashed else None
    try:
        starts = tqdm(range(0, len(live), size), desc="compact", unit="shard", disable=len(live) <= size)
        return [tx.write_shard(number + i, _stored(stores, live[start : start + size]), rows=rows) for i, start in enumerate(starts)]
    finally:
        for store in stores.values():
            store.close()


def _read_codec(trained: Path, hashed: bool) -> Any:
    """The trained codec that standalone shards decode through: a binary
    index's hashing codec, or the FAISS codec of the codes store."""
    return binary.read_codec(trained) if hashed else ann.decoding_codec(ann.read_faiss(trained))


def _stored(stores: dict[str, ShardStore], pairs: list[tuple[Shard, int]]) -> Iterator[encoding.Batch]:
    """The (shard, ordinal) documents with their stored vectors, a batch at a
    time, each shard's vectors read in one call (one decoder call)."""
    for start in range(0, len(pairs), encoding.ENCODE_DOCS):
        docs, encoded = [], []
        for name, group in groupby(pairs[start : start + encoding.ENCODE_DOCS], key=lambda pair: pair[0].name):
            store, ordinals = stores[name], [o for _, o in group]
            for o, (vectors, _) in zip(ordinals, store.vectors(ordinals)):
                docs.append(store.document(o))
                rows = vectors if vectors.dtype == np.uint8 else np.asarray(vectors, dtype=np.float32)  # binary: code rows
                encoded.append(Encoded(rows, store.units(o)))
        yield docs, encoded, 0


def _carry_inputs(entry: Shard, rewrite: list[Shard]) -> None:
    """The first new shard carries what the rewritten ones recorded of their
    inputs, so the index's counts of inputs and skips survive compaction."""
    entry.inputs = sum(s.inputs for s in rewrite)
    entry.skipped = dict(sum((Counter(s.skipped or {}) for s in rewrite), Counter()))
    entry.repaired = dict(sum((Counter(s.repaired or {}) for s in rewrite), Counter()))
    entry.skipped_examples = {}
    for s in rewrite:
        for reason, examples in (s.skipped_examples or {}).items():
            kept = entry.skipped_examples.setdefault(reason, [])
            kept += examples[: encoding.EXAMPLES_PER_REASON - len(kept)]


def _decoding_store(tx: Transaction, shard: Shard, codec: Callable[[], Any]) -> ShardStore:
    """A committed shard's store, decoding its index's codes where it keeps no
    vectors (compaction then re-encodes the decoded vectors: store="codes" is
    lossy once more); `codec()` gives the trained codec that standalone codes
    decode through. A binary shard's store gives its codes' rows instead,
    checked against the codec's width."""
    store = tx.store(shard)
    if not store.has_vectors:
        path = tx.out / shard.name / shard.index
        if binary.holds_bits(path):
            rows = binary.read_rows(path, codec())
            store.decoder = lambda ids: np.asarray(rows[ids])
            return store
        norm = tx.manifest.index.vector_norm
        if ann.holds_codes(path):
            codes, scales = ann.read_codes(path, codec(), bool(tx.manifest.index.scaled_codes))
            store.decoder = ann.decoder(codec(), codes, norm, scales)
        else:
            store.decoder = ann.decoder(ann.read_shard_index(path, store.dim, shard.vectors), norm=norm)
    return store


def _live_shards(tx: Transaction) -> Iterator[tuple[int, ShardStore, set[int]]]:
    """(position, open store, deleted ordinals) of each shard in turn; each
    store is closed when the next is asked for (or the loop ends)."""
    for i, s in enumerate(tx.manifest.shards):
        store = tx.store(s)
        try:
            yield i, store, set(tx.deleted(s).tolist())
        finally:
            store.close()


def find(tx: Transaction, doc_ids: list[str]) -> dict[str, tuple[int, int]]:
    """The live documents among `doc_ids`: id -> (shard position, ordinal)."""
    found: dict[str, tuple[int, int]] = {}
    for i, store, dead in _live_shards(tx):
        for doc_id in doc_ids:
            if doc_id not in found:
                o = store.ordinal(doc_id)
                if o is not None and o not in dead:
                    found[doc_id] = (i, o)
    return found


class Stamps:
    """The stamp (`Document.stamp`) each live document was read at, by id,
    from the shards' stores, open until `close`: what a sync's read asks of
    every file before it reads it (`readers.corpus.read_changed`). The
    stores open at the first question."""

    def __init__(self, tx: Transaction) -> None:
        self.tx = tx
        self.stores: list[tuple[ShardStore, set[int]]] | None = None

    def __call__(self, doc_id: str) -> str | None:
        if self.stores is None:
            self.stores = [(self.tx.store(s), set(self.tx.deleted(s).tolist())) for s in self.tx.manifest.shards]
        for store, dead in self.stores:
            o = store.ordinal(doc_id)
            if o is not None and o not in dead:
                return store.document(o).stamp or None
        return None

    def close(self) -> None:
        for store, _ in self.stores or ():
            store.close()
        self.stores = None


def _missing(tx: Transaction, named: set[str]) -> dict[str, tuple[int, int]]:
    """The live documents whose id is not in `named`: id -> (shard position, ordinal)."""
    out: dict[str, tuple[int, int]] = {}
    for i, store, dead in _live_shards(tx):
        out.update((doc_id, (i, o)) for doc_id, o in store.id_ordinals() if o not in dead and doc_id not in named)
    return out


def _unchanged(tx: Transaction, docs: list, found: dict[str, tuple[int, int]]) -> set[str]:
    """The ids among `found` whose stored document equals the one given
    (`Document` equality: what is indexed and returned, not where a reader
    found it). Metadata compares as the store keeps it, JSON."""
    given = {d.id: d for d in docs if d.id in found}
    same: set[str] = set()
    for i, at in groupby(sorted(found.items(), key=lambda item: item[1]), key=lambda item: item[1][0]):
        store = tx.store(tx.manifest.shards[i])
        same.update(doc_id for doc_id, (_, o) in at if store.document(o) == given[doc_id])
        store.close()
    return same


def _tombstone(tx: Transaction, found: dict[str, tuple[int, int]]) -> list[Path]:
    """Write the new tombstone file of each shard `found` touches (aside,
    listed in the manifest entry but not yet committed); the files they
    replace, to remove after the commit."""
    by_shard: dict[int, list[int]] = {}
    for i, o in found.values():
        by_shard.setdefault(i, []).append(o)
    garbage = []
    name = f"deleted-{_next_generation(tx):06d}.npy"
    for i, ordinals in by_shard.items():
        s = tx.manifest.shards[i]
        dead = np.union1d(tx.deleted(s), ordinals)
        path = tx.out / s.name / name
        write_deleted(path, dead)
        if s.deleted:
            garbage.append(tx.out / s.name / s.deleted)
        s.deleted, s.deleted_docs = name, len(dead)
        s.deleted_sha256, s.deleted_bytes = sha256_file(path), path.stat().st_size
    return garbage


def _next_generation(tx: Transaction) -> int:
    return (tx.manifest.generation or 0) + 1


def commit_generation(tx: Transaction, titles: bool, garbage: list[Path]) -> None:
    """BM25 segments for the new shards, commit the next generation, then
    remove what it no longer lists."""
    generation = _next_generation(tx)
    if tx.manifest.settings.bm25:
        garbage += phases.build_lexical(tx, titles)
    tx.manifest.generation = generation
    tx.commit()
    for path in garbage:
        remove(path)
