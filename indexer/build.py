"""IndexWriter: documents in, committed shards out, resumable at any point.

The public face of the indexer's writing side. It opens (or resumes) the
index directory under its write lock and hands the work to the modules that
hold the rules:

- `phases`: a build's phases (encode, train, add, lexical), each ending in a
  commit, so a killed build (even SIGKILL) re-run with the same arguments
  skips what its committed shards consumed and ends as an uninterrupted one;
- `living`: a complete index's changes (add, update, delete, compact), each
  one commit of a new generation;
- `commit`: the `Transaction` they all commit through (next shard, write
  shard, commit the manifest), which `merge` and Ray's parts use too;
- `manifest`: the typed manifest, the only reader and writer of its JSON;
- `lock`: one writer at a time.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from propdex.encoders import recorded_config
from propdex.encoders.deferred import DeferredEncoder

from . import ann, living, phases
from .commit import TRAINED, Transaction, ours, peak_rss_mb, shard_name
from .lock import LOCK, WriteLock
from .manifest import MANIFEST, Backbone, Manifest, Part, Record, Settings, Status
from .readers import Record as InputRecord
from .readers.base import Kept
from .readers.corpus import read_changed
from .settings import IndexSettings, store_of, unread_by

if TYPE_CHECKING:
    from propdex.encoders import Encoder

log = logging.getLogger(__name__)

# Importers of this module (eval, tests, older code) find these here too.
__all__ = ["IndexWriter", "LOCK", "SETTINGS", "TRAINED", "peak_rss_mb", "shard_name"]

SETTINGS = ("shard_docs", "factory", "backend", "bm25", "store", "code_bytes", "bits", "hashing", "training")  # what a writer of an existing index takes from its manifest
CODEC = tuple(k for k in SETTINGS if k not in ("shard_docs", "bm25"))  # what acts at training and after, not on the encoded shards


class IndexWriter:
    def __init__(
        self,
        out: str | Path,
        encoder: "Encoder",
        *,
        shard_docs: int = 10_000,
        factory: str | None = None,
        backend: str = "faiss",
        bm25: bool = True,
        store: str = IndexSettings.store,
        code_bytes: int = ann.CODE_BYTES,
        bits: int = IndexSettings.bits,
        hashing: str = IndexSettings.hashing,
        training: str = IndexSettings.training,
        inputs: dict[str, Any] | None = None,
        wait: float = 0.0,
    ) -> None:
        """`wait`: seconds to wait for another process's writer to finish
        (default: refuse at once). `inputs` describes what `build` reads (paths, format, file
        fingerprints): a re-run must read the same. `create`, `add`,
        `delete` and `compact` leave the recorded inputs alone."""
        settings = IndexSettings(shard_docs, factory, backend, bm25, store, code_bytes, bits, hashing, training)
        settings.check_factory(encoder.dim)
        if backend == "faiss" or store != "float16":
            ann.require_faiss()
        self.out = Path(out)
        self.encoder = encoder
        self.inputs = inputs or {}
        self._lock = WriteLock(self.out, wait)
        try:
            self.manifest = self._open(Settings.from_json(settings.to_json()))
        except BaseException:
            self.close()
            raise
        self.transaction = Transaction(self.out, self.manifest, encoder.dim)

    @property
    def settings(self) -> dict[str, Any]:
        """The index's settings, as recorded (raw view)."""
        return self.manifest.settings.to_json()

    @property
    def resume_at(self) -> int:
        """Where a re-run of this build reads on from, in the stream of
        records it was given: those its committed shards consumed (all of a
        part's stream, other parts' records included, below its next). Read
        the input with `read_corpus(..., start=writer.resume_at)` and they are
        not parsed again; a build given more records passes over them."""
        m = self.manifest
        consumed = sum(s.inputs for s in m.shards) if m.status == Status.ENCODING else 0
        return consumed * (m.part.of if m.part else 1)

    # -- opening, resuming ------------------------------------------------------
    def _open(self, wanted: Settings) -> Manifest:
        """The manifest to go on from: the committed one (checked against
        what this writer was given) or a fresh one; whatever a killed writer
        left uncommitted is removed, under the lock, before anything is written."""
        if self.out.exists() and not (self.out / MANIFEST).is_file() and any(not ours(p) for p in self.out.iterdir()):
            raise ValueError(f"{self.out} is not empty and holds no propdex index; refusing to write into it")
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        fresh = self._fresh(wanted)
        manifest = self._resume(fresh) if (self.out / MANIFEST).is_file() else fresh
        Transaction(self.out, manifest, self.encoder.dim).remove_uncommitted()
        return manifest

    def _fresh(self, settings: Settings) -> Manifest:
        if isinstance(self.encoder, DeferredEncoder):  # the index's own: its backbone is checked when it loads
            backbone = Manifest.read(self.out).backbone
        else:
            b = self.encoder.backbone
            backbone = Backbone(name=b.name, source=b.source, weights_sha256=b.weights_hash, runtime=b.runtime)
        return Manifest(encoder=self.encoder.config(), settings=settings, inputs=self.inputs, index=None, shards=[],
                        backbone=backbone)

    def _resume(self, fresh: Manifest) -> Manifest:
        """The committed manifest, if it was built as this writer would build."""
        manifest = Manifest.read(self.out)
        _adopt_settings(manifest, fresh.settings)
        for key in ("encoder", "settings"):
            if getattr(manifest, key) != getattr(fresh, key):
                recorded = getattr(manifest, key)
                raise ValueError(
                    f"{self.out} holds an index built with other {key} ({_raw(recorded)}); "
                    f"use another --out, or delete it to rebuild"
                )
        if manifest.backbone.weights_sha256 != fresh.backbone.weights_sha256:
            raise ValueError(f"{self.out} was built with other backbone weights; use another --out")
        log.info("resuming %s: %d shards committed, status %s", self.out, len(manifest.shards), manifest.status)
        return manifest

    def close(self) -> None:
        """Release the directory for other writers (build() does it when it ends)."""
        self._lock.release()

    # -- the build ----------------------------------------------------------------
    def build(self, records: Iterable[InputRecord], limit: int | None = None, *, part: tuple[int, int] | None = None) -> dict[str, Any]:
        """Index `records` (at most `limit` documents). `part=(i, n)` builds
        part i of n: records i, i + n, i + 2n... are encoded into shards and
        the build stops there (status `encoded`); `propdex.indexer.merge`
        commits the parts as one index, trained once. Returns the manifest (raw)."""
        self._lock.acquire()
        try:
            manifest = self.manifest
            if part is not None:
                records = self._take_part(records, limit, *part)
            elif manifest.part:
                raise ValueError(f"{self.out} is a part of a build (--num-shards/--shard-id); merge the parts with `propdex merge`")
            changed = _changed_inputs(manifest.inputs, self.inputs)
            if changed:
                paths = " ".join(str(p) for p in manifest.inputs.get("paths", [])) or "INPUT..."
                sync = (f", or bring it up to date with them (`propdex add {self.out} {paths} --update --delete-missing`)"
                        if manifest.status == Status.COMPLETE else "")
                raise ValueError(f"{self.out}: the inputs changed since its build began ({changed}); use another --out "
                                 f"or delete it to rebuild{sync}")
            manifest.inputs = self.inputs  # adopts file fingerprints where an older build had none
            # A run with bm25 on completes an index that lacks it.
            if manifest.settings.bm25 and not manifest.lexical and manifest.status == Status.COMPLETE and manifest.shards:
                manifest.status = Status.LEXICAL
            phases.run(self.transaction, self.encoder, records, limit)
            return manifest.to_json()
        finally:
            self.close()

    def _take_part(self, records: Iterable[InputRecord], limit: int | None, i: int, n: int) -> Iterable[InputRecord]:
        """Records i, i + n, i + 2n...: part i of n, recorded in the manifest."""
        if not 0 <= i < n:
            raise ValueError(f"--shard-id must be in [0, {n}) for --num-shards {n}, got {i}")
        if limit is not None:
            raise ValueError("--limit counts a whole build's documents: limit the input instead when building parts")
        manifest = self.manifest
        if manifest.part is not None and manifest.part != Part(id=i, of=n):
            raise ValueError(f"{self.out} holds part {manifest.part.id} of {manifest.part.of}, not {i} of {n}")
        manifest.part = Part(id=i, of=n)
        return (r for j, r in enumerate(records) if j % n == i)

    # -- a living index: create, add, delete, compact --------------------------------
    @classmethod
    def open(cls, out: str | Path, encoder: "Encoder | None" = None, *, device: str = "auto", wait: float = 0.0) -> "IndexWriter":
        """A writer for the existing index at `out`, with the settings it was
        built with (and its encoder, unless one is given: then the index's
        own, loaded on `device` when the writer first encodes, so a delete, a
        compact or a sync that finds nothing changed loads no model)."""
        manifest = Manifest.read(Path(out))
        if encoder is None:
            encoder = DeferredEncoder(manifest.encoder, manifest.backbone.weights_sha256, device=device)
        settings = manifest.settings.to_json()
        return cls(out, encoder, wait=wait, **{k: settings[k] for k in SETTINGS if k in settings})

    def create(self) -> dict[str, Any]:
        """Commit an empty, complete index (documents come with `add`). Returns the manifest (raw)."""
        try:
            if self.manifest.shards or self.manifest.status == Status.COMPLETE:
                raise ValueError(f"{self.out} already holds an index; open it instead")
            self.manifest.status = Status.COMPLETE
            self.manifest.generation = 0
            self.transaction.commit()
            return self.manifest.to_json()
        finally:
            self.close()

    def add(self, records: Iterable[InputRecord], *, replace: bool = False, delete_missing: bool = False) -> dict[str, Any]:
        """Append the records' documents in new shards, in one commit. An id
        the index holds already is refused, unless `replace`: then its earlier
        version is deleted in the same commit (an update), or kept where the
        record equals it; `delete_missing` also deletes every document the
        records do not name (a sync, `living.add`). Returns a summary: added,
        replaced, unchanged, skipped (by reason), and deleted with
        `delete_missing`."""
        self._lock.acquire()
        try:
            return living.add(self.transaction, self.encoder, records, replace, delete_missing)
        finally:
            self.close()

    def sync(self, paths: Sequence[str | Path], format: str | None = None, *, delete_missing: bool = False) -> dict[str, Any]:
        """`add(read_corpus(paths, format), replace=True, delete_missing=...)`,
        except that a file read whole whose size and modification time are
        those its stored document was read at is not read again (counted
        `unchanged`; `readers.corpus.read_changed`): a sync of a folder of
        PDFs parses only the ones that changed."""
        self._lock.acquire()
        try:
            stamps = living.Stamps(self.transaction)
            records = _closing(read_changed(paths, stamps, format), stamps.close)
            return living.add(self.transaction, self.encoder, records, True, delete_missing)
        finally:
            self.close()

    def delete(self, doc_ids: Iterable[str]) -> dict[str, Any]:
        """Delete the documents with these ids, in one commit. Returns
        {"deleted": n, "missing": [ids the index does not hold]}."""
        self._lock.acquire()
        try:
            return living.delete(self.transaction, self.encoder.title, doc_ids)
        finally:
            self.close()

    def compact(self, retrain: bool = False) -> dict[str, Any]:
        """Rewrite the shards that hold deleted documents, and merge shards
        smaller than shard_docs, from their stored vectors (no encoding); an
        index that outgrew its factory, or told to `retrain`, is re-trained
        (living.compact). The rewritten shards' files are removed once the
        new ones are committed."""
        self._lock.acquire()
        try:
            return living.compact(self.transaction, self.encoder.title, retrain)
        finally:
            self.close()


def _adopt_settings(manifest: Manifest, wanted: Settings) -> None:
    """Bring a committed index's settings up to date: options an older index
    predates take the values it was built with; BM25 is a companion, not part
    of what the vectors are, so a run with bm25 on completes an index that
    lacks it and one with it off leaves an existing one alone; before
    training, a re-run may choose another codec (after a factory failed to
    train, or to try another store on vectors that took hours to encode):
    every store encodes the same float16 shards, so only CODEC differs."""
    manifest.encoder = recorded_config(manifest.encoder)
    settings = manifest.settings
    settings.store = store_of({"settings": settings.to_json()})
    if not settings.has("code_bytes"):
        settings.code_bytes = ann.CODE_BYTES
    if not settings.has("bits"):  # an index from before the binary store: its values would be the defaults
        settings.bits, settings.hashing = IndexSettings.bits, IndexSettings.hashing
    if not settings.has("training"):  # an index from before the setting: what a re-training would do now
        settings.training = IndexSettings.training
    had_bm25 = settings.pop("bm25", False)
    settings.bm25 = wanted.bm25 or had_bm25
    wanted.bm25 = settings.bm25
    if manifest.status in (Status.ENCODING, Status.TRAINING):
        for key in CODEC:
            setattr(settings, key, getattr(wanted, key))
    for key in unread_by(settings.store):  # they do not make the index another index
        setattr(settings, key, getattr(wanted, key))


def _raw(value: Any) -> Any:
    return value.to_json() if isinstance(value, Record) else value


def _changed_inputs(old: dict[str, Any], new: dict[str, Any]) -> str:
    """What differs between a build's recorded inputs and a re-run's ("" for
    nothing). Builds from before file fingerprints are compared without them."""
    rest = [k for k in sorted(set(old) | set(new)) if k != "files" and old.get(k) != new.get(k)]
    if rest:
        return "; ".join(f"{k}: {old.get(k)} -> {new.get(k)}" for k in rest)
    if "files" not in old or "files" not in new:
        return ""
    before, after = old["files"], new["files"]
    notes = [f"{f} is new" for f in after if f not in before]
    notes += [f"{f} is gone" for f in before if f not in after]
    notes += [f"{f} changed ({before[f]['bytes']} -> {after[f]['bytes']} bytes)" for f in after
              if f in before and before[f] != after[f]]
    shown = notes[:3] + ([f"{len(notes) - 3} more"] if len(notes) > 3 else [])
    return ", ".join(shown)


def _closing(records: Iterator[InputRecord | Kept], close: Callable[[], None]) -> Iterator[InputRecord | Kept]:
    """`records`, then `close()`: once read to the end (or dropped), before the commit."""
    try:
        yield from records
    finally:
        close()
