"""propdex as a LlamaIndex retriever (llama-index-core's BaseRetriever).

    from propdex import Index
    from propdex.integrations.llamaindex import PropdexRetriever

    retriever = PropdexRetriever(index=Index.open("idx"), k=5, hybrid=True)
    nodes = retriever.retrieve("question")   # NodeWithScore: TextNode(text = hit text, metadata = id, title, ...)
    PropdexRetriever(index=Index.open("idx"), words=200).retrieve("question")   # one node: the packed context
"""
from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from propdex.index import Index

from ._hits import context_metadata, hit_metadata


class PropdexRetriever(BaseRetriever):
    """Nodes for a query from a propdex index; extra keywords are
    `Index.search` options (level, where, hybrid, bm25, hops, nprobe, ...)."""

    def __init__(self, index: Index, k: int = 5, words: int | None = None, **search_options: Any) -> None:
        super().__init__()
        # words: a budget, and the answer is one node holding Index.context's packed text.
        self.index, self.k, self.words, self.search_options = index, k, words, search_options

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.words is not None:
            context = self.index.context(query_bundle.query_str, self.words, **self.search_options)
            return [NodeWithScore(node=TextNode(text=context.text, metadata=context_metadata(context)), score=1.0)] if context.text else []
        hits = self.index.search(query_bundle.query_str, k=self.k, **self.search_options)
        by_sentence = self.search_options.get("level", "doc") != "doc"
        return [NodeWithScore(node=TextNode(id_=f"{h.doc_id}#{h.sentence_index}" if by_sentence else h.doc_id,
                                            text=h.text, metadata=hit_metadata(h)), score=h.score) for h in hits]
