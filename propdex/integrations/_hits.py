"""What both adapters make of a hit: its text and a flat metadata record."""
from __future__ import annotations

from typing import Any

from propdex.retriever.searcher import Hit


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
    }
