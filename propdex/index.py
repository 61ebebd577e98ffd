"""`propdex.Index`: one directory you create or open, change and search.

    import propdex
    index = propdex.Index.create("idx", encoder="tokens")
    index.add([{"id": "d1", "title": "...", "text": "...", "url": "...", "year": 2021}])
    index.update([{"id": "d1", "title": "...", "text": "fixed text"}])
    index.delete(["d7"])
    hits = index.search("question", k=10, where={"year": 2021})
    hits[0].doc_id, hits[0].title, hits[0].text, hits[0].metadata, hits[0].score
    index.compact()

The writer (`propdex.indexer.IndexWriter`) commits every change with one
manifest; this object searches the last commit it saw and moves to the next
one after its own changes (`refresh()` moves it to another process's). Other
readers keep the view they opened until they refresh.

Safe to share between threads: searches run concurrently, each on the view
it started with (a view is closed when its last search ends), and changes
are serialised, here by a lock and across processes by the writer's.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from propdex.encoders import DEFAULT_BACKBONE, Document, encoder_from_config, load_encoder
from propdex.indexer.build import IndexWriter
from propdex.indexer.settings import IndexSettings
from propdex.indexer.manifest import read_manifest
from propdex.indexer.readers import Record, Skip, record_from_dict
from propdex.retriever.context import Context
from propdex.retriever.searcher import Hit, Level, Searcher, set_threads
from propdex.retriever.settings import SearchSettings

if TYPE_CHECKING:
    from propdex.encoders import Encoder


# How long a change waits for another process's writer before giving up.
WRITE_WAIT_S = 600.0


@dataclass
class _View:
    """One commit, open for search; closed once retired and unused."""

    searcher: Searcher
    stamp: tuple[int, int]  # the manifest file's (inode, mtime) when opened
    users: int = 0
    retired: bool = False


class Index:
    """A propdex index directory, open for search and change."""

    def __init__(self, path: str | Path, encoder: "Encoder", *, nprobe: int | None = None) -> None:
        """Use `Index.create` or `Index.open`."""
        self.path = Path(path)
        self.encoder = encoder
        self._nprobe = nprobe
        self._view: _View | None = None
        self._views = threading.Lock()
        self._writes = threading.Lock()
        self._refreshing = threading.RLock()  # one new view at a time, however many requests notice a commit
        self.refresh()

    # -- opening -----------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | Path,
        encoder: "str | Encoder" = "tokens",
        *,
        backbone: str = DEFAULT_BACKBONE,
        device: str = "auto",
        shard_docs: int = IndexSettings.shard_docs,
        factory: str | None = IndexSettings.factory,
        backend: str = IndexSettings.backend,
        bm25: bool = IndexSettings.bm25,
        store: str = IndexSettings.store,
        code_bytes: int = IndexSettings.code_bytes,
        bits: int = IndexSettings.bits,
        hashing: str = IndexSettings.hashing,
        training: str = IndexSettings.training,
        **encoder_options: Any,
    ) -> "Index":
        """An empty index at `path` (a new or empty directory) whose documents
        `encoder` will encode: a name (`tokens`, `single`, `proposition`,
        `nugget`, `crossthought`) with its options, or a loaded encoder."""
        if isinstance(encoder, str):
            encoder = load_encoder(encoder, backbone=backbone, device=device, **encoder_options)
        elif encoder_options:
            raise ValueError("encoder options go with an encoder name, not with a loaded encoder")
        IndexWriter(path, encoder, shard_docs=shard_docs, factory=factory, backend=backend, bm25=bm25, store=store,
                    code_bytes=code_bytes, bits=bits, hashing=hashing, training=training).create()
        return cls(path, encoder)

    @classmethod
    def open(cls, path: str | Path, *, device: str = "auto", nprobe: int | None = None, threads: int | None = None,
             runtime: str = "torch") -> "Index":
        """The index at `path`, with the encoder it was built with; `threads`
        sets the process's FAISS and torch threads, `runtime` what runs the
        query encoder's backbone (see Searcher.load)."""
        if threads is not None:
            set_threads(threads)
        manifest = read_manifest(Path(path))
        return cls(path, encoder_from_config(manifest["encoder"], device=device, runtime=runtime), nprobe=nprobe)

    def refresh(self) -> "Index":
        """Search the index's latest commit from now on."""
        with self._refreshing:
            stamp = self._stamp()
            view = _View(Searcher.load(self.path, encoder=self.encoder, nprobe=self._nprobe), stamp)
            with self._views:
                old, self._view = self._view, view
        if old is not None:
            self._retire(old)
        return self

    def refresh_if_changed(self) -> "Index":
        """Refresh if a commit (of any process) came after this view's."""
        if self._current():
            return self
        with self._refreshing:
            if not self._current():
                self.refresh()
        return self

    def _current(self) -> bool:
        view = self._view
        return view is not None and view.stamp == self._stamp()

    def _stamp(self) -> tuple[int, int]:
        st = os.stat(self.path / "manifest.json")  # replaced, never rewritten, by each commit
        return st.st_ino, st.st_mtime_ns

    @contextmanager
    def _reading(self) -> Iterator[Searcher]:
        with self._views:
            view = self._view
            if view is None:
                raise ValueError(f"index {self.path} is closed")
            view.users += 1
        try:
            yield view.searcher
        finally:
            with self._views:
                view.users -= 1
                done = view.retired and view.users == 0
            if done:
                view.searcher.close()

    def _retire(self, view: _View) -> None:
        with self._views:
            view.retired = True
            done = view.users == 0
        if done:
            view.searcher.close()

    # -- changing ------------------------------------------------------------------
    def add(self, documents: Iterable[Mapping[str, Any] | Document]) -> dict[str, Any]:
        """Add documents: dicts with `id`, `text`, optional `title` and any
        other fields (kept as metadata), or Documents, or what `read_corpus`
        yields (`index.add(propdex.read_corpus(["notes/"]))`; its skips are
        counted). An id the index holds already is an error (use `update`).
        Returns {added, replaced, unchanged, skipped}."""
        return self._write(documents, replace=False)

    def update(self, documents: Iterable[Mapping[str, Any] | Document], *, delete_missing: bool = False) -> dict[str, Any]:
        """Add documents, replacing any the index holds under the same id;
        one equal to the stored document is left alone (`unchanged`), so
        updating from a whole folder re-encodes only what changed. With
        `delete_missing`, the same commit deletes every document that
        `documents` does not name (`deleted`): the index then mirrors the
        folder, notes removed from it included. A file that cannot be read
        this time keeps its earlier version; a record skipped inside a file
        of many (a JSONL line) names nothing, so its earlier version goes."""
        return self._write(documents, replace=True, delete_missing=delete_missing)

    def sync(self, paths: str | Path | Iterable[str | Path], *, format: str | None = None,
             delete_missing: bool = False) -> dict[str, Any]:
        """Bring the index up to date with files and folders, in one commit:
        `update(read_corpus(paths, format), delete_missing=...)`, except that
        a file read whole (a note, a PDF, a page) whose size and modification
        time are those it was last read at is not read again, only counted
        `unchanged`. A folder of PDFs syncs in the time its changed files
        take. `delete_missing=True` mirrors `paths`: every document they do
        not hold is deleted, those of other folders the index holds too, as
        with `propdex add --update --delete-missing`. A file keeps the
        text it was read with until it changes: after an upgrade that reads
        a format better, `update(read_corpus(paths))` reads every file."""
        given = [paths] if isinstance(paths, (str, Path)) else list(paths)
        with self._writes:
            result = self._writer().sync(given, format, delete_missing=delete_missing)
            self.refresh()
        return result

    def delete(self, ids: str | Iterable[str]) -> dict[str, Any]:
        """Delete documents by id. Returns {deleted, missing}."""
        with self._writes:
            result = self._writer().delete([ids] if isinstance(ids, str) else [str(i) for i in ids])
            self.refresh()
        return result

    def compact(self, retrain: bool = False) -> dict[str, Any]:
        """Rewrite shards without their deleted documents, merging small ones;
        an index that outgrew its factory (or `retrain`) is re-trained."""
        with self._writes:
            result = self._writer().compact(retrain=retrain)
            self.refresh()
        return result

    def _write(self, documents: Iterable[Mapping[str, Any] | Document], replace: bool,
               delete_missing: bool = False) -> dict[str, Any]:
        if isinstance(documents, (str, bytes, Mapping, Document)):
            raise ValueError(f"give a list of documents (one document: [doc]), not a {type(documents).__name__}")
        with self._writes:
            result = self._writer().add(_records(documents), replace=replace, delete_missing=delete_missing)
            self.refresh()
        return result

    def _writer(self) -> IndexWriter:
        return IndexWriter.open(self.path, self.encoder, wait=WRITE_WAIT_S)

    # -- reading -------------------------------------------------------------------
    def search(self, query: str, k: int = SearchSettings.k, level: Level = SearchSettings.level, *, where: Mapping[str, Any] | None = None,
               **options: Any) -> list[Hit]:
        """The best k hits for `query` at `level` (doc, sentence, unit), among
        the documents whose metadata matches `where`; `options` are
        Searcher.search_batch's (hybrid, bm25, hops, nprobe, rerank, ...)."""
        with self._reading() as searcher:
            return searcher.search(query, k=k, level=level, where=where, **options)

    def context(self, query: str, words: int = 200, level: Level | None = None, *, where: Mapping[str, Any] | None = None,
                **options: Any) -> Context:
        """The best units for `query` packed into at most `words` words, for a
        prompt: overlapping and repeated units merged, each document's pieces
        in document order under its title, every piece cited (doc id,
        sentence, characters). `str(context)` is the text; `options` are
        search's (hybrid, hops, ...); unless given, a context is searched at
        sentence level, fused with BM25, with the second hop
        (retriever.context.CONTEXT_DEFAULTS)."""
        with self._reading() as searcher:
            return searcher.context(query, words, level, where=where, **options)

    def search_batch(self, queries: Sequence[str], k: int = SearchSettings.k, level: Level = SearchSettings.level, *,
                     where: Mapping[str, Any] | None = None, **options: Any) -> list[list[Hit]]:
        with self._reading() as searcher:
            return searcher.search_batch(queries, k=k, level=level, where=where, **options)

    def get(self, doc_id: str) -> Document | None:
        """The live document with this id, or None."""
        with self._reading() as searcher:
            return searcher.document(doc_id)

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self.get(doc_id) is not None

    def __len__(self) -> int:
        return int(self.manifest.get("counts", {}).get("documents", 0))

    @property
    def searcher(self) -> Searcher:
        """The current view's searcher (a refresh may close it: search through the Index to be safe)."""
        view = self._view
        if view is None:
            raise ValueError(f"index {self.path} is closed")
        return view.searcher

    @property
    def manifest(self) -> dict[str, Any]:
        return self.searcher.manifest

    def close(self) -> None:
        with self._views:
            view, self._view = self._view, None
        if view is not None:
            self._retire(view)

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Index({str(self.path)!r}, encoder={self.encoder.name!r}, documents={len(self) if self._view else '?'})"


def _records(documents: Iterable[Mapping[str, Any] | Document]) -> Iterable[Record]:
    for i, doc in enumerate(documents):
        if isinstance(doc, Document):
            yield doc  # the writer's intake gates it as it gates a reader's record (encoding._intake)
        elif isinstance(doc, Mapping):
            yield record_from_dict(dict(doc), f"document {i}")
        elif isinstance(doc, Skip):  # `read_corpus` says what it could not read; the writer counts it
            yield doc
        else:
            yield Skip("malformed_json", f"document {i}", f"a {type(doc).__name__}, not a dict or Document")
