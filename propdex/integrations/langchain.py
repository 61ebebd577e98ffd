"""propdex as a LangChain retriever (langchain-core's BaseRetriever).

    from propdex import Index
    from propdex.integrations.langchain import PropdexRetriever

    retriever = PropdexRetriever(index=Index.open("idx"), k=5, search_options={"hybrid": True})
    docs = retriever.invoke("question")   # Documents: page_content = hit text, metadata = id, title, score, ...
    PropdexRetriever(index=Index.open("idx"), words=200).invoke("question")   # one Document: the packed context
"""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
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
