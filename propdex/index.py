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
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from propdex.encoders import DEFAULT_BACKBONE, Document, encoder_from_config, load_encoder
from propdex.encoders.text import split_sentences
from propdex.indexer.build import IndexWriter
from propdex.indexer.manifest import read_manifest
from propdex.indexer.readers import Record, Skip, record_from_dict
from propdex.retriever.searcher import Hit, Level, Searcher

if TYPE_CHECKING:
    from propdex.encoders import Encoder


class Index:
    """A propdex index directory, open for search and change."""

    def __init__(self, path: str | Path, encoder: "Encoder", *, nprobe: int = 32) -> None:
        """Use `Index.create` or `Index.open`."""
        self.path = Path(path)
        self.encoder = encoder
        self._nprobe = nprobe
        self._searcher: Searcher | None = None
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
        shard_docs: int = 10_000,
        factory: str | None = None,
        backend: str = "faiss",
        bm25: bool = True,
        **encoder_options: Any,
    ) -> "Index":
        """An empty index at `path` (a new or empty directory) whose documents
        `encoder` will encode: a name (`tokens`, `single`, `proposition`,
        `nugget`, `crossthought`) with its options, or a loaded encoder."""
        if isinstance(encoder, str):
            encoder = load_encoder(encoder, backbone=backbone, device=device, **encoder_options)
        elif encoder_options:
            raise ValueError("encoder options go with an encoder name, not with a loaded encoder")
        IndexWriter(path, encoder, shard_docs=shard_docs, factory=factory, backend=backend, bm25=bm25).create()
        return cls(path, encoder)

    @classmethod
    def open(cls, path: str | Path, *, device: str = "auto", nprobe: int = 32) -> "Index":
        """The index at `path`, with the encoder it was built with."""
        manifest = read_manifest(Path(path))
        return cls(path, encoder_from_config(manifest["encoder"], device=device), nprobe=nprobe)

    def refresh(self) -> "Index":
        """Search the index's latest commit from now on."""
        old, self._searcher = self._searcher, Searcher.load(self.path, encoder=self.encoder, nprobe=self._nprobe)
        if old is not None:
            old.close()
        return self

    # -- changing ------------------------------------------------------------------
    def add(self, documents: Iterable[Mapping[str, Any] | Document]) -> dict[str, Any]:
        """Add documents: dicts with `id`, `text`, optional `title` and any
        other fields (kept as metadata), or Documents. An id the index holds
        already is an error (use `update`). Returns {added, replaced, skipped}."""
        return self._write(documents, replace=False)

    def update(self, documents: Iterable[Mapping[str, Any] | Document]) -> dict[str, Any]:
        """Add documents, replacing any the index holds under the same id."""
        return self._write(documents, replace=True)

    def delete(self, ids: str | Iterable[str]) -> dict[str, Any]:
        """Delete documents by id. Returns {deleted, missing}."""
        result = self._writer().delete([ids] if isinstance(ids, str) else [str(i) for i in ids])
        self.refresh()
        return result

    def compact(self) -> dict[str, Any]:
        """Rewrite shards without their deleted documents, merging small ones."""
        result = self._writer().compact()
        self.refresh()
        return result

    def _write(self, documents: Iterable[Mapping[str, Any] | Document], replace: bool) -> dict[str, Any]:
        if isinstance(documents, (Mapping, Document)):
            raise ValueError("give a list of documents (one document: [doc])")
        result = self._writer().add(_records(documents), replace=replace)
        self.refresh()
        return result

    def _writer(self) -> IndexWriter:
        return IndexWriter.open(self.path, self.encoder)

    # -- reading -------------------------------------------------------------------
    def search(self, query: str, k: int = 10, level: Level = "doc", *, where: Mapping[str, Any] | None = None,
               **options: Any) -> list[Hit]:
        """The best k hits for `query` at `level` (doc, sentence, unit), among
        the documents whose metadata matches `where`; `options` are
        Searcher.search_batch's (hybrid, bm25, hops, nprobe, rerank, ...)."""
        return self.searcher.search(query, k=k, level=level, where=where, **options)

    def search_batch(self, queries: Sequence[str], k: int = 10, level: Level = "doc", *,
                     where: Mapping[str, Any] | None = None, **options: Any) -> list[list[Hit]]:
        return self.searcher.search_batch(queries, k=k, level=level, where=where, **options)

    def get(self, doc_id: str) -> Document | None:
        """The live document with this id, or None."""
        searcher = self.searcher
        key = searcher._key(doc_id)
        return None if key is None else searcher.shards[key >> 32].store.document(key & 0xFFFFFFFF)

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self.searcher._key(doc_id) is not None

    def __len__(self) -> int:
        return int(self.searcher.manifest.get("counts", {}).get("documents", 0))

    @property
    def searcher(self) -> Searcher:
        if self._searcher is None:
            raise ValueError(f"index {self.path} is closed")
        return self._searcher

    @property
    def manifest(self) -> dict[str, Any]:
        return self.searcher.manifest

    def close(self) -> None:
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Index({str(self.path)!r}, encoder={self.encoder.name!r}, documents={len(self) if self._searcher else '?'})"


def _records(documents: Iterable[Mapping[str, Any] | Document]) -> Iterable[Record]:
    for i, doc in enumerate(documents):
        if isinstance(doc, Document):
            yield doc if doc.sentences else replace(doc, sentences=tuple(split_sentences(doc.text)))
        elif isinstance(doc, Mapping):
            yield record_from_dict(dict(doc), f"document {i}")
        else:
            yield Skip("malformed_json", f"document {i}", f"a {type(doc).__name__}, not a dict or Document")
