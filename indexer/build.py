"""IndexWriter: documents in, committed shards out, resumable at any point.

A build runs in three phases, each committing through the manifest:

1. encode: documents are encoded a shard at a time; each shard's LMDB store
   is written aside, renamed into place, then listed in the manifest.
2. train: once the vector count is known, the FAISS index (default factory
   chosen from count and dim) is trained on a fixed-seed sample.
3. add: every shard gets its own index file holding its vectors. With
   store="codes" that file is the shard's standalone codes (IVF list number
   and PQ codes a row, no ids: `ann.CODES_FILE`), its float16 copy is
   dropped in the same commit and removed after it: stage 2 decodes the
   codes instead.
4. lexical: a BM25 index of every document's title and text (indexer.lexical)
   is written to `bm25.tmp/`, renamed to `bm25/` and listed in the manifest
   (skipped with `bm25=False`).

A killed build (even SIGKILL) re-run with the same arguments skips the input
records its committed shards consumed and continues; shard boundaries, batch
composition and the training sample are all deterministic, so the result is
the same as an uninterrupted build.

A complete index lives on (Lucene's segments): `add` appends documents in new
shards, `delete` commits a tombstone file per shard it touches, and `compact`
rewrites the shards holding deletions (and merges small ones) from their
stored vectors, without encoding again. Each of them writes everything aside
and commits it with one manifest, so it happens entirely or not at all; a
reader opened before keeps the files it opened. BM25 is rebuilt over the
live documents at every commit (its statistics are global).

One writer at a time: a writer holds an exclusive lock on `write.lock` (as
Lucene does) from opening the directory to the end of its build, so a second
one is refused before it can delete the first one's uncommitted files. The
operating system drops the lock when a writer dies, even by SIGKILL.
"""
from __future__ import annotations

import ctypes
import fcntl
import functools
import logging
import os
import resource
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from propdex.encoders import Document, Encoded, Passage, recorded_config

from . import ann, lexical
from .manifest import FORMAT, FORMAT_VERSION, library_versions, read_manifest, sha256_file, write_manifest
from .readers import Record, Skip
from .settings import IndexSettings, store_of
from .store import LMDB_DIR, VECTORS, RowWriter, ShardStore, ShardWriter, read_deleted, write_deleted

if TYPE_CHECKING:
    from propdex.encoders import Encoder

log = logging.getLogger(__name__)

TRAINED = "trained.faiss"
LOCK = "write.lock"
EXAMPLES_PER_REASON = 10
QUIET_SKIPS = {"redirect", "namespace"}  # expected in every dump: counted, not shouted


# Documents encoded and written at a time, fewer where they hold more than
# ENCODE_PASSAGES passages: a build's memory grows neither with its shards
# nor with its documents' length (256 long Wikipedia articles are 750k token
# vectors; 512 passages are at most 131k).
ENCODE_DOCS = 256
ENCODE_PASSAGES = 512

SETTINGS = ("shard_docs", "factory", "backend", "bm25", "store", "code_bytes")  # what a writer of an existing index takes from its manifest


def _chunks(docs: list[Document], encoder: Encoder) -> Iterator[tuple[list[Document], list[list[Passage]]]]:
    chunk: list[Document] = []
    cut: list[list[Passage]] = []
    held = 0  # passages in `cut`
    for doc, ps in zip(docs, encoder.cut(docs)):
        if chunk and (len(chunk) == ENCODE_DOCS or held + len(ps) > ENCODE_PASSAGES):
            yield chunk, cut
            chunk, cut, held = [], [], 0
        chunk.append(doc)
        cut.append(ps)
        held += len(ps)
    if chunk:
        yield chunk, cut


def _return_freed_memory() -> None:
    """Hand the heap's free pages back to the OS. Each encode chunk allocates
    tensors of new shapes, and glibc keeps what they freed: a 1,000-article
    `single` build peaked at 4.1 GB, its live data under 0.6 GB (a chunk's
    RSS fell from 795 to 541 MB after a trim). Other C libraries: nothing to do."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def shard_name(i: int) -> str:
    return f"shard-{i:05d}"


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
        inputs: dict[str, Any] | None = None,
        wait: float = 0.0,
    ) -> None:
        """`wait`: seconds to wait for another process's writer to finish
        (default: refuse at once). `inputs` describes what `build` reads (paths, format, file
        fingerprints): a re-run must read the same. `create`, `add`,
        `delete` and `compact` leave the recorded inputs alone."""
        settings = IndexSettings(shard_docs, factory, backend, bm25, store, code_bytes)
        settings.check_factory(encoder.dim)
        if backend == "faiss" or store == "codes":
            ann.require_faiss()
        self.out = Path(out)
        self.encoder = encoder
        self.settings = settings.to_json()
        self.inputs = inputs or {}
        self._wait = wait
        self._lock: int | None = None
        try:
            self.manifest = self._open()
        except BaseException:
            self.close()
            raise

    # -- opening, resuming ------------------------------------------------------
    def _open(self) -> dict[str, Any]:
        fresh = {
            "format": FORMAT,
            "version": 1,  # raised to FORMAT_VERSION by the commit that lists the first standalone codes
            "status": "encoding",
            "encoder": self.encoder.config(),
            "backbone": {
                "name": self.encoder.backbone.name,
                "source": self.encoder.backbone.source,
                "weights_sha256": self.encoder.backbone.weights_hash,
                "runtime": self.encoder.backbone.runtime,
            },
            "settings": self.settings,
            "inputs": self.inputs,
            "index": None,
            "shards": [],
        }
        if self.out.exists() and not (self.out / "manifest.json").is_file() and any(not _ours(p) for p in self.out.iterdir()):
            raise ValueError(f"{self.out} is not empty and holds no propdex index; refusing to write into it")
        self.out.mkdir(parents=True, exist_ok=True)
        self._acquire()
        if (self.out / "manifest.json").is_file():
            manifest = read_manifest(self.out)
            # Options an older index predates, at the values it was built with.
            manifest["encoder"] = recorded_config(manifest["encoder"])
            manifest["settings"]["store"] = store_of(manifest)
            manifest["settings"].setdefault("code_bytes", ann.CODE_BYTES)
            # BM25 is a companion, not part of what the vectors are: a run
            # with bm25 on completes an index that lacks it, one with it off
            # leaves an existing one alone.
            had_bm25 = manifest["settings"].pop("bm25", False)
            manifest["settings"]["bm25"] = self.settings["bm25"] or had_bm25
            self.settings["bm25"] = manifest["settings"]["bm25"]
            fresh["settings"] = self.settings
            if manifest["status"] in ("encoding", "training"):
                # Nothing is trained yet: a re-run may choose another index (after a factory failed to train).
                for key in ("factory", "backend"):
                    manifest["settings"][key] = self.settings[key]
            for key in ("encoder", "settings"):
                if manifest[key] != fresh[key]:
                    raise ValueError(
                        f"{self.out} holds an index built with other {key} ({manifest[key]}); "
                        f"use another --out, or delete it to rebuild"
                    )
            if manifest["backbone"]["weights_sha256"] != fresh["backbone"]["weights_sha256"]:
                raise ValueError(f"{self.out} was built with other backbone weights; use another --out")
            log.info("resuming %s: %d shards committed, status %s", self.out, len(manifest["shards"]), manifest["status"])
        else:
            manifest = fresh
        self._remove_uncommitted(manifest)
        return manifest

    def _remove_uncommitted(self, manifest: dict[str, Any]) -> None:
        """Delete whatever a killed build left that no manifest lists."""
        listed = {s["name"] for s in manifest["shards"]}
        trained = (manifest.get("index") or {}).get("trained")
        bm25 = (manifest.get("lexical") or {}).get("dir")
        for path in self.out.iterdir():
            if path.name in ("manifest.json", LOCK) or path.name == bm25:
                continue
            if path.is_dir() and path.name in listed:
                shard = next(s for s in manifest["shards"] if s["name"] == path.name)
                for f in path.iterdir():
                    if f.name not in (LMDB_DIR, shard.get("stored"), shard.get("index"), shard.get("deleted")):
                        _remove(f)
            elif path.name != trained:
                _remove(path)

    def _commit(self) -> None:
        shards = self.manifest["shards"]
        skipped: Counter[str] = Counter()
        repaired: Counter[str] = Counter()
        for s in shards:
            skipped.update(s["skipped"])
            repaired.update(s.get("repaired", {}))
        self.manifest["counts"] = {
            "inputs": sum(s["inputs"] for s in shards),
            "documents": sum(s["docs"] - s.get("deleted_docs", 0) for s in shards),
            "deleted": sum(s.get("deleted_docs", 0) for s in shards),
            "sentences": sum(s["sentences"] for s in shards),
            "vectors": sum(s["vectors"] for s in shards),
            "skipped": sum(skipped.values()),
        }
        self.manifest["skipped"] = dict(sorted(skipped.items()))
        # Documents indexed after a reader changed them (lone surrogates -> U+FFFD).
        self.manifest["repaired"] = dict(sorted(repaired.items()))
        self.manifest["timings"] = {
            "encode_s": round(sum(s.get("encode_s", 0.0) for s in shards), 3),
            "train_s": (self.manifest.get("index") or {}).get("train_s", 0.0),
            "add_s": round(sum(s.get("add_s", 0.0) for s in shards), 3),
            # The largest resident set any run of this build reached.
            "peak_rss_mb": max(peak_rss_mb(), (self.manifest.get("timings") or {}).get("peak_rss_mb", 0.0)),
        }
        if any(s["index"] and ann.holds_codes(s["index"]) for s in shards):
            self.manifest["version"] = FORMAT_VERSION
        self.manifest["versions"] = library_versions()
        self.manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_manifest(self.out, self.manifest)

    # -- the build ----------------------------------------------------------------
    def _acquire(self) -> None:
        if self._lock is not None:
            return
        fd = os.open(self.out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self._wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise ValueError(f"{self.out} is being written by another process (pid {holder}); "
                                 f"wait for it, or stop it (a stopped build resumes)") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock = fd

    def close(self) -> None:
        """Release the directory for other writers (build() does it when it ends)."""
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor drops the flock
            self._lock = None

    def build(self, records: Iterable[Record], limit: int | None = None, *, part: tuple[int, int] | None = None) -> dict[str, Any]:
        """Index `records` (at most `limit` documents). `part=(i, n)` builds
        part i of n: records i, i + n, i + 2n... are encoded into shards and
        the build stops there (status `encoded`); `propdex.indexer.merge`
        commits the parts as one index, trained once."""
        self._acquire()
        try:
            manifest = self.manifest
            if part is not None:
                i, n = part
                if not 0 <= i < n:
                    raise ValueError(f"--shard-id must be in [0, {n}) for --num-shards {n}, got {i}")
                if limit is not None:
                    raise ValueError("--limit counts a whole build's documents: limit the input instead when building parts")
                if manifest.get("part", {"id": i, "of": n}) != {"id": i, "of": n}:
                    raise ValueError(f"{self.out} holds part {manifest['part']['id']} of {manifest['part']['of']}, not {i} of {n}")
                manifest["part"] = {"id": i, "of": n}
                records = (r for j, r in enumerate(records) if j % n == i)
            elif manifest.get("part"):
                raise ValueError(f"{self.out} is a part of a build (--num-shards/--shard-id); merge the parts with `propdex merge`")
            changed = _changed_inputs(manifest["inputs"], self.inputs)
            if changed:
                raise ValueError(f"{self.out}: the inputs changed since its build began ({changed}); use another --out, "
                                 f"delete it to rebuild, or add the new inputs to it with `propdex add`")
            manifest["inputs"] = self.inputs  # adopts file fingerprints where an older build had none
            # A run with bm25 on completes an index that lacks it.
            if self.settings["bm25"] and not manifest.get("lexical") and manifest["status"] == "complete" and manifest["shards"]:
                manifest["status"] = "lexical"
            return self._build(records, limit)
        finally:
            self.close()

    def _build(self, records: Iterable[Record], limit: int | None) -> dict[str, Any]:
        started = time.time()
        if self.manifest["status"] == "encoding":
            self._encode(records, limit)
            self.manifest["status"] = "encoded" if self.manifest.get("part") else "training"
            self._commit()
        if self.manifest["status"] == "encoded":
            log.info("encoded part %d of %d: %d documents in %d shards; merge the parts with `propdex merge`",
                     self.manifest["part"]["id"], self.manifest["part"]["of"], self.manifest["counts"]["documents"], len(self.manifest["shards"]))
            return self.manifest
        if self.manifest["status"] == "training":
            if self.manifest["counts"]["documents"] == 0:
                (self.out / "manifest.json").unlink()  # nothing committed: a re-run (another --format, say) starts afresh
                raise ValueError(f"no document could be read from the inputs (skipped: {self.manifest['skipped'] or 'none'}); "
                                 f"check the paths and --format; nothing is indexed in {self.out}")
            try:
                self._train()
            except ValueError as e:
                raise ValueError(f"{e}; the encoded shards are kept: re-run with another --factory to train on them") from None
            self.manifest["status"] = "adding"
            self._commit()
        if self.manifest["status"] == "adding":
            self._add()
            self.manifest["status"] = "lexical"
            self._commit()
        if self.manifest["status"] == "lexical":
            if self.settings["bm25"]:
                self._lexical()
            self.manifest["status"] = "complete"
            self._commit()
        counts = self.manifest["counts"]
        log.info(
            "indexed %d documents (%d sentences) as %d vectors in %d shards, %s; skipped %d %s; %.1fs",
            counts["documents"], counts["sentences"], counts["vectors"], len(self.manifest["shards"]),
            self.manifest["index"]["factory"], counts["skipped"], self.manifest["skipped"] or "", time.time() - started,
        )
        return self.manifest

    def _encode(self, records: Iterable[Record], limit: int | None) -> None:
        shards = self.manifest["shards"]
        consumed = sum(s["inputs"] for s in shards)
        done_docs = sum(s["docs"] for s in shards)
        seen: set[str] = set()
        for s in shards:
            store = ShardStore(self.out / s["name"])
            seen.update(store.doc_ids())
            store.close()
        stream = iter(records)
        for _ in range(consumed):  # what committed shards already hold
            if next(stream, None) is None:
                break
        bar = tqdm(desc="index", unit="doc", initial=done_docs, total=limit, dynamic_ncols=True)
        shard_docs = self.settings["shard_docs"]
        while limit is None or done_docs < limit:
            want = shard_docs if limit is None else min(shard_docs, limit - done_docs)
            docs, n_inputs, skipped, examples = _take(stream, want, seen)
            if n_inputs == 0:
                break
            shards.append(self._write_shard(self._next_shard(), self._encoded(docs, bar), n_inputs, skipped, examples))
            self._commit()
            done_docs += len(docs)
        bar.close()

    def _next_shard(self) -> int:
        return max((int(s["name"].split("-")[1]) + 1 for s in self.manifest["shards"]), default=0)

    def _encoded(self, docs: list[Document], bar: tqdm | None = None) -> Iterator[tuple[list[Document], list[Encoded], int]]:
        """`docs` encoded a chunk at a time (ENCODE_DOCS documents, or fewer
        holding ENCODE_PASSAGES passages; a longer document alone): (documents,
        their vectors and units, passages read)."""
        encoder = self.encoder
        for chunk, passages_per_doc in _chunks(docs, encoder):
            flat = [p for ps in passages_per_doc for p in ps]
            encoded_flat = iter(encoder.encode(flat))
            yield chunk, [_concat([next(encoded_flat) for _ in ps], encoder.dim) for ps in passages_per_doc], len(flat)
            _return_freed_memory()
            if bar is not None:
                bar.update(len(chunk))

    def _write_shard(self, number: int, batches: Iterable[tuple[list[Document], list[Encoded], int]], n_inputs: int,
                     skipped: Counter, examples: dict) -> dict[str, Any]:
        """Write `batches` (documents, their encodings, passages read) into
        shard `number`, in place but not committed: the caller lists the
        entry returned. A batch is written before the next is made, so a
        shard's vectors are never in memory together."""
        started = time.time()
        name = shard_name(number)
        tmp = self.out / f"{name}.tmp"
        _remove(tmp)
        writer = ShardWriter(tmp, self.encoder.dim)
        passages, repaired = 0, Counter()
        try:
            for docs, encoded, read in batches:
                writer.add(docs, encoded)
                passages += read
                repaired.update(r for d in docs for r in d.repairs)
            info = writer.finish()
        finally:
            writer.close()
        tmp.rename(self.out / name)
        return {
            "name": name,
            "inputs": n_inputs,
            "docs": info["docs"],
            "sentences": info["sentences"],
            "vectors": info["vectors"],
            "passages": passages,
            "skipped": dict(skipped),
            "skipped_examples": examples,
            "repaired": dict(repaired),
            "lmdb_sha256": sha256_file(self.out / name / LMDB_DIR / "data.mdb"),
            "lmdb_bytes": (self.out / name / LMDB_DIR / "data.mdb").stat().st_size,
            "stored": VECTORS,
            "stored_sha256": sha256_file(self.out / name / VECTORS),
            "stored_bytes": (self.out / name / VECTORS).stat().st_size,
            "encode_s": round(time.time() - started, 3),
            "index": None,
            "index_sha256": None,
        }

    def _train(self, shards: list[dict[str, Any]] | None = None) -> None:
        """Choose and train the ANN index on a sample of `shards`' vectors (default: the committed ones)."""
        started = time.time()
        shards = self.manifest["shards"] if shards is None else shards
        n, dim = sum(s["vectors"] for s in shards), self.encoder.dim
        backend = self.settings["backend"]
        factory = "HNSW" if backend == "hnsw" else (self.settings["factory"] or ann.default_factory(n, dim, self.settings["store"], self.settings["code_bytes"]))
        self.manifest["index"] = {"backend": backend, "factory": factory, "metric": "inner_product", "trained": None}
        if backend == "faiss":
            size = ann.training_size(factory, n)
            if size:
                sample = self._sample(size, shards)
                log.info("training %s on %d of %d vectors", factory, len(sample), n)
                trained = ann.train(factory, sample)
                # Stage 2 scales decoded codes back to it (ann.decoder).
                self.manifest["index"]["vector_norm"] = ann.common_norm(sample)
            else:
                trained = ann.make_index(factory, dim)
            ann.write_faiss(trained, self.out / (TRAINED + ".tmp"))
            (self.out / (TRAINED + ".tmp")).rename(self.out / TRAINED)
            self.manifest["index"].update(trained=TRAINED, trained_sha256=sha256_file(self.out / TRAINED),
                                          trained_bytes=(self.out / TRAINED).stat().st_size, trained_on=size)
        self.manifest["index"]["train_s"] = round(time.time() - started, 3)

    def _sample(self, size: int, shards: list[dict[str, Any]]) -> np.ndarray:
        """A fixed-seed uniform sample of the shards' vectors, read shard by shard."""
        n = sum(s["vectors"] for s in shards)
        chosen = np.sort(np.random.default_rng(0).choice(n, size=size, replace=False))
        parts, base = [], 0
        for s in shards:
            store = ShardStore(self.out / s["name"])
            for chunk in store.iter_vectors():
                lo, hi = np.searchsorted(chosen, [base, base + len(chunk)])
                parts.append(chunk[chosen[lo:hi] - base])
                base += len(chunk)
            store.close()
        return np.concatenate(parts)

    def _add(self, shards: list[dict[str, Any]] | None = None, commit: bool = True) -> list[Path]:
        """Give each shard without one its ANN index (committing each, in a
        build). Returns the float16 copies that store="codes" drops and that
        are removed once the caller commits (in a build: already removed)."""
        dropped: list[Path] = []
        trained = ann.read_faiss(self.out / TRAINED) if self.manifest["index"]["backend"] == "faiss" else None
        pending = [s for s in (self.manifest["shards"] if shards is None else shards) if s["index"] is None]
        for s in tqdm(pending, desc="add", unit="shard", disable=len(pending) < 2):
            started = time.time()
            store = ShardStore(self.out / s["name"])
            if trained is not None and self.settings["store"] == "codes" and ann.standalone(trained):
                file = ann.CODES_FILE  # streamed: a shard's codes are never all in memory
                rows = RowWriter(self.out / s["name"] / (file + ".tmp"), trained.sa_code_size(), "|u1")
                for chunk in store.iter_vectors():
                    rows.append(ann.encode(trained, chunk))
                rows.finish()
            elif trained is not None:
                file = "index.faiss"
                ann.write_faiss(ann.fill(trained, store.iter_vectors()), self.out / s["name"] / (file + ".tmp"))
            else:
                file = "index.hnsw"
                ann.build_hnsw(store.iter_vectors(), s["vectors"], self.encoder.dim, self.out / s["name"] / (file + ".tmp"))
            store.close()
            (self.out / s["name"] / (file + ".tmp")).rename(self.out / s["name"] / file)
            s["index"], s["index_sha256"] = file, sha256_file(self.out / s["name"] / file)
            s["index_bytes"] = (self.out / s["name"] / file).stat().st_size
            s["add_s"] = round(time.time() - started, 3)
            if self.settings["store"] == "codes" and s.get("stored"):
                dropped.append(self.out / s["name"] / s["stored"])
                s.update(stored=None, stored_sha256=None, stored_bytes=None)
            if commit:
                self._commit()
                for path in dropped:
                    _remove(path)
                dropped.clear()
        return dropped


    def _lexical(self, name: str = lexical.BM25_DIR) -> None:
        """BM25 over the live documents of the manifest's shards, in directory `name`."""
        started = time.time()

        def documents() -> Iterator[Document]:
            for s in self.manifest["shards"]:
                store = ShardStore(self.out / s["name"])
                dead = set(self._deleted(s).tolist())
                for o in range(s["docs"]):
                    if o not in dead:
                        yield store.document(o)
                store.close()

        tmp, final = self.out / (name + ".tmp"), self.out / name
        _remove(tmp)
        if not any(s["docs"] > s.get("deleted_docs", 0) for s in self.manifest["shards"]):  # nothing live: no collection to score
            self.manifest["lexical"] = None
            return
        index = lexical.index_documents(documents(), self.encoder.title)
        index.save(tmp)
        files = {f.name: sha256_file(f) for f in sorted(tmp.iterdir())}
        tmp.rename(final)
        self.manifest["lexical"] = {
            "dir": name, "documents": len(index), **index.params, "files": files,
            "build_s": round(time.time() - started, 3),
        }
        log.info("BM25 over %d documents in %.1fs", len(index), time.time() - started)


    # -- a living index: create, add, delete, compact --------------------------------
    @classmethod
    def open(cls, out: str | Path, encoder: "Encoder | None" = None, *, device: str = "auto", wait: float = 0.0) -> "IndexWriter":
        """A writer for the existing index at `out`, with the settings it was
        built with (and its encoder, unless one is given)."""
        from propdex.encoders import encoder_from_config

        manifest = read_manifest(Path(out))
        if encoder is None:
            encoder = encoder_from_config(manifest["encoder"], device=device)
        settings = manifest["settings"]
        return cls(out, encoder, wait=wait, **{k: settings[k] for k in SETTINGS if k in settings})

    def create(self) -> dict[str, Any]:
        """Commit an empty, complete index (documents come with `add`)."""
        try:
            if self.manifest["shards"] or self.manifest["status"] == "complete":
                raise ValueError(f"{self.out} already holds an index; open it instead")
            self.manifest.update(status="complete", generation=0)
            self._commit()
            return self.manifest
        finally:
            self.close()

    def add(self, records: Iterable[Record], *, replace: bool = False) -> dict[str, Any]:
        """Append the records' documents in new shards, in one commit. An id
        the index holds already is refused, unless `replace`: then its earlier
        version is deleted in the same commit (an update). Returns a summary:
        added, replaced, skipped (by reason)."""
        self._acquire()
        try:
            self._require_complete("add to")
            docs, n_inputs, skipped, examples = _take(iter(records), 2**63, set())
            found = self._find([d.id for d in docs])
            if found and not replace:
                shown = ", ".join(repr(d) for d in list(found)[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
                raise ValueError(f"{len(found)} of the documents are in {self.out} already ({shown}); "
                                 f"update them instead (Index.update, `propdex add --update`)")
            new = []
            bar = tqdm(desc="add", unit="doc", total=len(docs), dynamic_ncols=True, disable=len(docs) <= ENCODE_DOCS)
            for start in range(0, len(docs), self.settings["shard_docs"]):
                chunk = docs[start : start + self.settings["shard_docs"]]
                first = not new
                new.append(self._write_shard(self._next_shard() + len(new), self._encoded(chunk, bar), n_inputs if first else 0,
                                             skipped if first else Counter(), examples if first else {}))
            bar.close()
            if not new and not skipped:
                return {"added": 0, "replaced": 0, "skipped": {}}
            if not new:  # all skipped: nothing to commit, but say so
                log.warning("nothing added to %s: every record was skipped (%s)", self.out, dict(skipped))
                return {"added": 0, "replaced": 0, "skipped": dict(skipped)}
            if self.manifest["index"] is None:
                self._train(new)
            garbage = self._add(new, commit=False)
            garbage += self._tombstone(found)
            self.manifest["shards"] += new
            self._commit_change(garbage)
            log.info("added %d documents to %s (%d replaced) in %d shard(s)", len(docs), self.out, len(found), len(new))
            return {"added": len(docs), "replaced": len(found), "skipped": dict(skipped)}
        finally:
            self.close()

    def delete(self, doc_ids: Iterable[str]) -> dict[str, Any]:
        """Delete the documents with these ids, in one commit. Returns
        {"deleted": n, "missing": [ids the index does not hold]}."""
        self._acquire()
        try:
            self._require_complete("delete from")
            ids = list(dict.fromkeys(doc_ids))
            found = self._find(ids)
            missing = [d for d in ids if d not in found]
            if found:
                self._commit_change(self._tombstone(found))
                log.info("deleted %d documents from %s", len(found), self.out)
            return {"deleted": len(found), "missing": missing}
        finally:
            self.close()

    def compact(self) -> dict[str, Any]:
        """Rewrite the shards that hold deleted documents, and merge shards
        smaller than shard_docs, from their stored vectors (no encoding); the
        rewritten shards' files are removed once the new ones are committed."""
        self._acquire()
        try:
            self._require_complete("compact")
            shards = self.manifest["shards"]
            small = [s for s in shards if s["docs"] < self.settings["shard_docs"]]
            rewrite = [s for s in shards if s.get("deleted_docs") or (len(small) > 1 and s in small)]
            if not rewrite:
                return {"rewritten": 0, "removed": 0, "shards": len(shards)}
            live = [(s, o) for s in rewrite for o in sorted(set(range(s["docs"])) - set(self._deleted(s).tolist()))]
            # Every codes shard decodes through one copy of the trained codec: at 65,536 lists its
            # quantizer alone is 100 MB, and all the shards to rewrite are open at once.
            codec = functools.cache(lambda: ann.decoding_codec(ann.read_faiss(self.out / self.manifest["index"]["trained"])))
            stores = {s["name"]: self._store(s, codec) for s in rewrite}

            def stored(pairs: list[tuple[dict[str, Any], int]]) -> Iterator[tuple[list[Document], list[Encoded], int]]:
                for start in range(0, len(pairs), ENCODE_DOCS):
                    docs, encoded = [], []
                    for name, group in groupby(pairs[start : start + ENCODE_DOCS], key=lambda pair: pair[0]["name"]):
                        store, ordinals = stores[name], [o for _, o in group]
                        for o, (vectors, _) in zip(ordinals, store.vectors(ordinals)):  # one decoder call per shard
                            docs.append(store.document(o))
                            encoded.append(Encoded(np.asarray(vectors, dtype=np.float32), store.units(o)))
                    yield docs, encoded, 0

            number, size = self._next_shard(), self.settings["shard_docs"]
            try:
                new = [self._write_shard(number + i, stored(live[start : start + size]), 0, Counter(), {})
                       for i, start in enumerate(tqdm(range(0, len(live), size), desc="compact", unit="shard", disable=len(live) <= size))]
            finally:
                for store in stores.values():
                    store.close()
            dropped = self._add(new, commit=False)
            removed = sum(s.get("deleted_docs", 0) for s in rewrite)
            # The first new shard carries what the rewritten ones recorded of their inputs.
            for entry in new[:1]:
                entry["inputs"] = sum(s["inputs"] for s in rewrite)
                for key in ("skipped", "repaired"):
                    entry[key] = dict(sum((Counter(s.get(key, {})) for s in rewrite), Counter()))
                entry["skipped_examples"] = {}
                for s in rewrite:
                    for reason, examples in s.get("skipped_examples", {}).items():
                        kept = entry["skipped_examples"].setdefault(reason, [])
                        kept += examples[: EXAMPLES_PER_REASON - len(kept)]
            self.manifest["shards"] = [s for s in shards if s not in rewrite] + new
            self._commit_change([self.out / s["name"] for s in rewrite] + dropped)
            log.info("compacted %s: %d shards rewritten as %d, %d deleted documents removed", self.out, len(rewrite), len(new), removed)
            return {"rewritten": len(rewrite), "removed": removed, "shards": len(self.manifest["shards"])}
        finally:
            self.close()

    def _store(self, shard: dict[str, Any], codec: Callable[[], Any]) -> ShardStore:
        """A committed shard's store, decoding its index's codes where it keeps no vectors
        (compaction then re-encodes the decoded vectors: store="codes" is lossy once more);
        `codec()` gives the trained codec that standalone codes decode through."""
        store = ShardStore(self.out / shard["name"])
        if not store.has_vectors:
            path = self.out / shard["name"] / shard["index"]
            norm = self.manifest["index"].get("vector_norm")
            if ann.holds_codes(path):
                store.decoder = ann.decoder(codec(), ann.read_codes(path), norm)
            else:
                store.decoder = ann.decoder(ann.read_shard_index(path, store.dim, shard["vectors"]), norm=norm)
        return store

    def _require_complete(self, what: str) -> None:
        if self.manifest["status"] != "complete":
            raise ValueError(f"cannot {what} {self.out} while its build is unfinished ({self.manifest['status']}); "
                             f"run the same `propdex index` command again to finish it first")

    def _deleted(self, shard: dict[str, Any]) -> np.ndarray:
        return read_deleted(self.out / shard["name"] / shard["deleted"]) if shard.get("deleted") else np.zeros(0, np.int32)

    def _find(self, doc_ids: list[str]) -> dict[str, tuple[int, int]]:
        """The live documents among `doc_ids`: id -> (shard position, ordinal)."""
        found: dict[str, tuple[int, int]] = {}
        for i, s in enumerate(self.manifest["shards"]):
            store = ShardStore(self.out / s["name"])
            dead = set(self._deleted(s).tolist())
            for doc_id in doc_ids:
                if doc_id not in found:
                    o = store.ordinal(doc_id)
                    if o is not None and o not in dead:
                        found[doc_id] = (i, o)
            store.close()
        return found

    def _tombstone(self, found: dict[str, tuple[int, int]]) -> list[Path]:
        """Write the new tombstone file of each shard `found` touches (aside,
        listed in the manifest entry but not yet committed); the files they
        replace, to remove after the commit."""
        by_shard: dict[int, list[int]] = {}
        for i, o in found.values():
            by_shard.setdefault(i, []).append(o)
        garbage = []
        generation = self.manifest.get("generation", 0) + 1
        for i, ordinals in by_shard.items():
            s = self.manifest["shards"][i]
            dead = np.union1d(self._deleted(s), ordinals)
            name = f"deleted-{generation:06d}.npy"
            write_deleted(self.out / s["name"] / name, dead)
            if s.get("deleted"):
                garbage.append(self.out / s["name"] / s["deleted"])
            s.update(deleted=name, deleted_docs=len(dead), deleted_sha256=sha256_file(self.out / s["name"] / name),
                     deleted_bytes=(self.out / s["name"] / name).stat().st_size)
        return garbage

    def _commit_change(self, garbage: list[Path]) -> None:
        """Rebuild BM25, commit the next generation, then remove what it no longer lists."""
        generation = self.manifest.get("generation", 0) + 1
        old_bm25 = (self.manifest.get("lexical") or {}).get("dir")
        if self.settings["bm25"]:
            self._lexical(f"{lexical.BM25_DIR}-{generation:06d}")
            if old_bm25:
                garbage.append(self.out / old_bm25)
        self.manifest["generation"] = generation
        self._commit()
        for path in garbage:
            _remove(path)


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


def peak_rss_mb() -> float:
    """This process's own peak resident memory, MB. Linux's VmHWM, not
    getrusage: ru_maxrss survives fork and exec, so a child would report its
    parent's peak at the spawn (a bench's build) whenever that is larger."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:  # no procfs (macOS): getrusage, in bytes there
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(maxrss / (1 << 20 if sys.platform == "darwin" else 1024), 1)


def _take(stream: Iterator[Record], want: int, seen: set[str]) -> tuple[list[Document], int, Counter, dict]:
    """Pull records until `want` documents are accepted (or the stream ends)."""
    docs: list[Document] = []
    skipped: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    n_inputs = 0
    while len(docs) < want:
        record = next(stream, None)
        if record is None:
            break
        n_inputs += 1
        if isinstance(record, Document) and record.id in seen:
            # A set of ids, not of where each came from: 6M sources would cost gigabytes.
            record = Skip("duplicate_id", record.source or record.id, f"id {record.id!r} was taken by an earlier document")
        if isinstance(record, Skip):
            skipped[record.reason] += 1
            if len(examples.setdefault(record.reason, [])) < EXAMPLES_PER_REASON:
                examples[record.reason].append(record.source)
            level = logging.DEBUG if record.reason in QUIET_SKIPS else logging.WARNING
            log.log(level, "skipped %s (%s)%s", record.source, record.reason, f": {record.detail}" if record.detail else "")
            continue
        seen.add(record.id)
        docs.append(record)
    return docs, n_inputs, skipped, examples


def _concat(parts: list[Encoded], dim: int) -> Encoded:
    if not parts:
        return Encoded(np.zeros((0, dim), np.float32), [])
    return Encoded(np.concatenate([p.vectors for p in parts]), [u for p in parts for u in p.units])


def _ours(path: Path) -> bool:
    """Files a build of ours may leave before its first commit."""
    return path.name.startswith(("shard-", TRAINED, "manifest.json", lexical.BM25_DIR, LOCK))


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
