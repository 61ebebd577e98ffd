"""What a search returns: `Hit`, and the passage a document-level hit shows.

A hit at document level shows the passage that won, not the whole document:
a dense hit the window of consecutive sentences its score came from (the
window stage 2 scores, `scoring.best_window`), a BM25 hit the sentences
around the one that holds most of the query's terms, up to PASSAGE_WORDS.
`hit.passage` gives the sentence range and `hit.document_text` the whole
document. Below document level a hit's text is its sentence.

A dense hit marks what matched in its sentence: the spans of the units that
are some query vector's best match there.
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from propdex.encoders import Document
from propdex.encoders.text import PAGE_BREAK
from propdex.encoders.units import Unit
from propdex.indexer import lexical


if TYPE_CHECKING:
    from propdex.indexer.store import ShardStore

    from .loading import Shard
    from .rescoring import Candidate, Row
    from .settings import Level

# A BM25 hit's passage: its best sentence and its neighbours, up to this many
# words (about the encoders' passage of 256 word pieces).
PASSAGE_WORDS = 180


@dataclass
class Hit:
    rank: int
    doc_id: str
    title: str
    score: float
    sentence_index: int
    sentence_text: str
    spans: list[tuple[int, int]]  # char spans in sentence_text that matched
    units: list[Unit] = field(default_factory=list, repr=False)
    hop: int = 1  # 2: found by the second hop (search(..., hops=2))
    text: str = ""  # what matched: the winning passage (level doc), else the sentence
    metadata: dict[str, Any] = field(default_factory=dict)  # the input record's other fields
    passage: tuple[int, int] = (0, 0)  # first and last sentence of `text`
    document: Document | None = field(default=None, repr=False, compare=False)

    @property
    def document_text(self) -> str:
        """The whole document's text."""
        return self.document.text if self.document is not None else self.text

    @property
    def page(self) -> int | None:
        """The page `text` starts on (`page_at`), or None for a document without pages."""
        return page_at(self.document.text, self.text_span[0]) if self.document is not None else None

    @property
    def text_span(self) -> tuple[int, int]:
        """Where `text` lies in the document's text (characters)."""
        if self.document is None or not self.document.sentences:
            return 0, len(self.text)
        sentences = self.document.sentences
        return sentences[self.passage[0]][0], sentences[self.passage[1]][1]

    def to_json(self) -> dict[str, Any]:
        start, end = self.text_span
        return {
            "rank": self.rank,
            "hop": self.hop,
            "doc_id": self.doc_id,
            "title": self.title,
            "score": round(self.score, 6),
            "text": self.text,
            "passage": {"sentences": list(self.passage), "start": start, "end": end},
            "metadata": self.metadata,
            "sentence": {"index": self.sentence_index, "text": self.sentence_text},
            "spans": [list(s) for s in self.spans],
            "page": self.page,
        }


def page_at(text: str, offset: int) -> int | None:
    """The page (from 1) character `offset` of `text` lies on, for a text
    whose pages are separated by form feeds (a PDF's, as the reader and
    pdftotext write them); None for a text without them."""
    return text.count(PAGE_BREAK, 0, offset) + 1 if PAGE_BREAK in text else None


def sentences_of(doc: Document) -> tuple[tuple[int, int], ...]:
    """A document's sentence spans (the whole text as one where it has none)."""
    return tuple(doc.sentences) or ((0, len(doc.text)),)


def passage_text(doc: Document, first: int, last: int) -> str:
    """The text of sentences first..last, as the document holds it."""
    sentences = sentences_of(doc)
    return doc.text[sentences[first][0]:sentences[last][1]]


def lexical_passage(doc: Document, best: int, max_words: int = PASSAGE_WORDS) -> tuple[int, int]:
    """Sentences around `best`, taken nearest first (the next before the
    previous), while the passage holds at most `max_words` words; `best`
    alone when it is longer."""
    sentences = sentences_of(doc)
    words = [len(doc.text[a:b].split()) for a, b in sentences]
    first = last = best
    used = words[best]
    while True:
        grown = False
        for side in (1, -1):
            j = last + 1 if side > 0 else first - 1
            if 0 <= j < len(sentences) and used + words[j] <= max_words:
                used += words[j]
                first, last = min(first, j), max(last, j)
                grown = True
        if not grown:
            return first, last


def lexical_hit(rank: int, doc: Document, score: float, terms: set[str]) -> Hit:
    """A BM25 hit: the sentence holding the most distinct query terms (the
    first such), with the words that match marked, shown in its passage
    (`lexical_passage`). The sentences are compared by their distinct words,
    each stemmed once (`lexical.matching_terms`)."""
    sentences = sentences_of(doc)
    words = [lexical.WORDS.findall(doc.text[a:b].lower()) for a, b in sentences]
    matching = lexical.matching_terms(chain.from_iterable(words), terms)
    counts = [len(matching.intersection(ws)) for ws in words]
    best = max(range(len(counts)), key=counts.__getitem__) if counts else 0
    a, b = sentences[best]
    best_spans = [(m.start(), m.end()) for m in lexical.WORDS.finditer(doc.text[a:b]) if not terms.isdisjoint(lexical.analyze(m.group()))]
    passage = lexical_passage(doc, best)
    return Hit(rank, doc.id, doc.title, score, best, doc.text[a:b], best_spans, text=passage_text(doc, *passage),
               metadata=dict(doc.metadata), passage=passage, document=doc)


def dense_hits(shards: Sequence["Shard"], cands: Sequence["Candidate"], rows: Sequence["Row"], level: "Level",
               window: int | None = None) -> list[Hit]:
    """Hits of stage 2's rows, ranked in their order; at document level each
    shows its best window of `window` units (None: the whole document).
    A document is read once however many of its sentences are hits."""
    docs: dict[int, Document] = {}
    for _, ci, _ in rows:
        if ci not in docs:
            docs[ci] = shards[cands[ci].shard].store.document(cands[ci].ordinal)
    return [dense_hit(rank + 1, shards[cands[ci].shard].store, cands[ci], docs[ci], score, None if level == "doc" else (level, j), window)
            for rank, (score, ci, j) in enumerate(rows)]


def dense_hit(rank: int, store: "ShardStore", c: "Candidate", doc: Document, score: float, where: tuple[str, int] | None,
              window: int | None = None) -> Hit:
    """The hit for candidate `c`, whose document is `doc`: at document level
    (`where` None) its passage of `window` units, else the sentence or unit
    `where` names."""
    sentences = sentences_of(doc)
    passage = None
    if where is not None and where[0] == "unit":
        matched, sentence = [where[1]], int(c.unit_sentences[where[1], 0])
    else:
        if where is None:
            passage, sentence = _passage(c, window, len(sentences))
        else:
            sentence = where[1]
        matched = c.matched_units(sentence)
    sentence = min(sentence, len(sentences) - 1)
    passage = passage or (sentence, sentence)
    s_start, s_end = sentences[sentence]
    units = store.units(c.ordinal, matched, doc.id)
    return Hit(rank, doc.id, doc.title, score, sentence, doc.text[s_start:s_end], _spans(units, sentences, sentence), units,
               text=passage_text(doc, *passage), metadata=dict(doc.metadata), passage=passage, document=doc)


def _spans(units: Sequence[Unit], sentences: Sequence[tuple[int, int]], sentence: int) -> list[tuple[int, int]]:
    """The units' character spans inside the sentence, each once, in order
    (a unit's spans are relative to its own sentence; parts outside are cut)."""
    s_start, s_end = sentences[sentence]
    spans = []
    for u in units:
        base = sentences[u.sentence][0] - s_start
        for a, b in u.spans:
            a, b = max(a + base, 0), min(b + base, s_end - s_start)
            if a < b:
                spans.append((a, b))
    return sorted(set(spans))


def _passage(c: "Candidate", window: int | None, n_sentences: int) -> tuple[tuple[int, int] | None, int]:
    """A document-level hit's passage, its best window (the whole document
    without one), and its best sentence inside it, from the passage's
    sentences' scores alone; (None, best sentence) where no unit covers a
    sentence."""
    passage = c.best_window(window) if window else (0, n_sentences - 1)
    if passage is not None and c.sentences:
        passage = (min(passage[0], n_sentences - 1), min(passage[1], n_sentences - 1))
        inside = c.sentence_scores(*passage)
        if len(inside):
            return passage, passage[0] + int(np.argmax(inside))
    scores = c.sentence_scores()
    return passage if c.sentences else None, int(np.argmax(scores)) if len(scores) else 0
