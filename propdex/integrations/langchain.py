"""propdex in LangChain: a retriever (langchain-core's BaseRetriever), and
an index as a vector store (VectorStore: add, delete, search, as_retriever).

    from propdex import Index
    from propdex.integrations.langchain import PropdexRetriever, PropdexVectorStore

    retriever = PropdexRetriever(index=Index.open("idx"), k=5, search_options={"hybrid": True})
    docs = retriever.invoke("question")   # Documents: page_content = hit text, metadata = id, title, score, ...
    PropdexRetriever(index=Index.open("idx"), words=200).invoke("question")   # one Document: the packed context

    store = PropdexVectorStore.from_documents(documents, path="idx")   # propdex's encoder, not an Embeddings
    store.similarity_search("question", k=4, filter={"year": 2021}); store.as_retriever()
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field

from propdex.index import Index

from ._hits import context_metadata, hit_metadata


class PropdexRetriever(BaseRetriever):
    """Documents for a query from a propdex index; `search_options` go to
    `Index.search` (level, where, hybrid, bm25, hops, nprobe, ...)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Index
    k: int = 5
    words: int | None = None  # a budget: one Document holding Index.context's packed text, its citations in metadata
    search_options: dict[str, Any] = Field(default_factory=dict)

    def __init__(self, **data: Any) -> None:
        # Extra keywords are search options: PropdexRetriever(index=..., k=5, hybrid=True).
        fields = set(type(self).model_fields)
        options = {key: data.pop(key) for key in list(data) if key not in fields}
        data["search_options"] = {**data.get("search_options", {}), **options}
        super().__init__(**data)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        if self.words is not None:
            context = self.index.context(query, self.words, **self.search_options)
            return [Document(page_content=context.text, metadata=context_metadata(context))] if context.text else []
        hits = self.index.search(query, k=self.k, **self.search_options)
        return [Document(page_content=h.text, metadata=hit_metadata(h), id=h.doc_id) for h in hits]


class PropdexVectorStore(VectorStore):
    """A propdex index as a LangChain vector store. Texts are encoded by
    the index's own encoder (tokens, nuggets, propositions...), so there is
    no `Embeddings` to give: a store built from one would search with
    vectors other than the ones it claims, so one given is an error.
    Adding an id the index holds replaces that document (an upsert, as
    LangChain's stores do); `filter=` is `where=`; other keywords are
    search options (level, hybrid, hops...)."""

    def __init__(self, index: Index, **search_options: Any) -> None:
        self.index = index
        self.search_options = search_options

    @property
    def embeddings(self) -> Embeddings | None:
        return None

    def add_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        """Index the texts (a `title` in a text's metadata titles it); the ids
        of those the index now holds, skipped ones left out (logged)."""
        texts = list(texts)
        ids = [str(i) if i is not None else uuid.uuid4().hex for i in (ids or [None] * len(texts))]
        metadatas = metadatas or [{} for _ in texts]
        if not len(texts) == len(ids) == len(metadatas):
            raise ValueError(f"{len(texts)} texts, {len(ids)} ids and {len(metadatas)} metadatas: give one of each a text")
        self.index.update([{**m, "id": i, "text": t} for t, m, i in zip(texts, metadatas, ids)])
        return [i for i in ids if i in self.index]

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete documents by id; True when every one was there."""
        if ids is None:
            raise ValueError("give the ids to delete (propdex does not delete a whole index by default)")
        return not self.index.delete(ids)["missing"]

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        docs = [d for d in map(self.index.get, ids) if d is not None]
        return [Document(page_content=d.text, metadata={**d.metadata, "title": d.title}, id=d.id) for d in docs]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """(Document, propdex's score) best first: MaxSim or cosine, a ranking
        score, not a probability."""
        options = {**self.search_options, **kwargs}
        if "filter" in options:
            options["where"] = options.pop("filter")
        hits = self.index.search(query, k=k, **options)
        return [(Document(page_content=h.text, metadata=hit_metadata(h), id=h.doc_id), h.score) for h in hits]

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings | None = None, metadatas: list[dict[str, Any]] | None = None,
                   *, ids: list[str] | None = None, path: str | None = None, encoder: str = "tokens",
                   **kwargs: Any) -> "PropdexVectorStore":
        """A new index at `path` holding the texts, encoded by `encoder`
        (Index.create's; `backbone=` and `device=` go there too)."""
        if embedding is not None:
            raise ValueError("propdex encodes with its index's own encoder, not a LangChain Embeddings: leave embedding out and "
                             "choose encoder= (and backbone= for your own model)")
        if path is None:
            raise ValueError("give path=: where the new propdex index is written")
        create = {key: kwargs.pop(key) for key in ("backbone", "device") if key in kwargs}
        store = cls(Index.create(path, encoder, **create), **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store

    @classmethod
    def from_documents(cls, documents: list[Document], embedding: Embeddings | None = None,
                       **kwargs: Any) -> "PropdexVectorStore":
        return super().from_documents(documents, embedding, **kwargs)  # type: ignore[arg-type]
