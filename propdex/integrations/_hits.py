"""What both adapters make of a hit (its text and a flat metadata record), and of a packed context."""
from __future__ import annotations

from typing import Any

from propdex.retriever.context import Context
from propdex.retriever.hits import Hit


def hit_metadata(hit: Hit) -> dict[str, Any]:
    """The user's own fields first, then propdex's (which win a clash)."""
    return {
        **hit.metadata,
        "id": hit.doc_id,
        "title": hit.title,
        "score": hit.score,
        "rank": hit.rank,
        "sentence": hit.sentence_text,
        "sentence_index": hit.sentence_index,
        "spans": [list(s) for s in hit.spans],
        # Where the hit's text (a document-level hit's winning passage) lies in its document.
        "passage_sentences": list(hit.passage),
        "passage_start": hit.text_span[0],
        "passage_end": hit.text_span[1],
        **({"page": hit.page} if hit.page is not None else {}),  # a PDF's page, from 1
    }


def context_metadata(context: Context) -> dict[str, Any]:
    """A packed context's record: its size and where every piece comes from."""
    return {"words": context.words, "budget": context.budget, "citations": [c.to_json() for c in context.citations]}
