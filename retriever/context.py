"""Context for a prompt: the best hits packed into a word budget.

`pack(hits, words, level)` walks a ranking best first and takes what each
hit stands for: a document-level hit its passage (its best sentence first,
then the passage's others nearest first), a sentence-level hit its
sentence, a unit-level hit the unit's own spans. A piece that repeats or
overlaps what is taken already adds only what is new; a piece that would
pass the budget is left out and the walk goes on, since a shorter one
further down may still fit. The text keeps each document's pieces together
under its title, in document order, documents in the order their first
piece was taken: sentences that follow each other are joined as the
document joins them, by a line break where one lies between them (a
heading, a list item, a new paragraph stays a line of its own) and else by
a space; others by " ... ". The budget counts every whitespace-separated word of the
text, titles and " ... " included, so it is never exceeded.

Every piece is cited: document id, sentence index, the characters it
covers in the document's text, and where it lies in the context's text.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .hits import Hit, page_at, sentences_of

GAP = " ... "
# Hits a context is packed from: enough sentences or units for a few hundred words.
CONTEXT_K = 100
# How a context searches unless told otherwise: sentences, fused with BM25,
# with the second hop: of the settings tried, the one that packs the most
# answers into a prompt-sized budget, and kept on questions it was not chosen
# on; a single-hop question loses little to the hop.
CONTEXT_DEFAULTS = {"level": "sentence", "hybrid": True, "hops": 2}


def context_settings(level: str | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The level and search options of a context: CONTEXT_DEFAULTS where the
    caller says nothing (no hybrid default beside bm25, no hop below
    sentences), the caller's own options otherwise."""
    level = level or CONTEXT_DEFAULTS["level"]
    defaults = {} if options.get("bm25") else {"hybrid": CONTEXT_DEFAULTS["hybrid"]}
    if level != "unit":
        defaults["hops"] = CONTEXT_DEFAULTS["hops"]
    return level, {**defaults, **options}


@dataclass(frozen=True)
class Citation:
    doc_id: str
    title: str
    sentence: int
    start: int  # characters of the document's text
    end: int
    at: int  # where the piece starts in the context's text
    whole: bool  # the whole sentence is in the context
    page: int | None = None  # the page it starts on, for a document with pages (hits.page_at)

    def to_json(self) -> dict[str, Any]:
        return {"doc_id": self.doc_id, "title": self.title, "sentence": self.sentence, "start": self.start, "end": self.end,
                "at": self.at, "whole": self.whole, "page": self.page}


@dataclass(frozen=True)
class Context:
    text: str
    words: int  # words in `text`
    budget: int
    citations: tuple[Citation, ...]

    def __str__(self) -> str:
        return self.text

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "words": self.words, "budget": self.budget, "citations": [c.to_json() for c in self.citations]}


def _pieces(hit: Hit, level: str) -> list[tuple[int, tuple[tuple[int, int], ...]]]:
    """(sentence, character spans in the document) a hit offers, most wanted first."""
    doc = hit.document
    assert doc is not None, "a hit to pack carries its document"
    sentences = sentences_of(doc)
    if level == "unit":
        base = sentences[hit.sentence_index][0]
        return [(hit.sentence_index, tuple((base + a, base + b) for a, b in hit.spans))] if hit.spans else \
            [(hit.sentence_index, (sentences[hit.sentence_index],))]
    first, last = hit.passage if level == "doc" else (hit.sentence_index, hit.sentence_index)
    order = sorted(range(first, last + 1), key=lambda s: (abs(s - hit.sentence_index), s < hit.sentence_index))
    return [(s, (sentences[s],)) for s in order]


def _merge(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _block(hit: Hit, by_sentence: dict[int, list[tuple[int, int]]]) -> tuple[str, list[tuple[int, int, int, int, bool]]]:
    """One document's part of the context: its title, then its pieces in
    document order; and (sentence, start, end, offset in the block, whole)
    for each piece."""
    doc = hit.document
    assert doc is not None
    sentences = sentences_of(doc)
    parts: list[str] = [hit.title + "\n"] if hit.title else []
    at = len(parts[0]) if parts else 0
    pieces = []
    previous = None
    for s in sorted(by_sentence):
        spans = _merge(by_sentence[s])
        whole = _covers(doc.text, spans, *sentences[s])
        if previous is not None:
            gap = GAP if s != previous + 1 else "\n" if "\n" in doc.text[sentences[previous][1]:sentences[s][0]] else " "
            parts.append(gap)
            at += len(gap)
        for i, (a, b) in enumerate(spans):
            if i:
                parts.append(GAP)
                at += len(GAP)
            text = doc.text[a:b].strip()
            pieces.append((s, a, b, at, whole))
            parts.append(text)
            at += len(text)
        previous = s
    return "".join(parts), pieces


def _covers(text: str, spans: Sequence[tuple[int, int]], a: int, b: int) -> bool:
    """Whether the spans cover every non-space character of text[a:b]."""
    covered = [c.isspace() for c in text[a:b]]
    for x, y in spans:
        for i in range(max(x, a), min(y, b)):
            covered[i - a] = True
    return all(covered)


def pack(hits: Sequence[Hit], words: int, level: str = "sentence") -> Context:
    """The hits' pieces packed into at most `words` words (see the module)."""
    if words < 1:
        raise ValueError(f"a context needs a budget of at least 1 word, got {words}")
    taken: dict[str, dict[int, list[tuple[int, int]]]] = {}
    docs: dict[str, Hit] = {}
    used: dict[str, int] = {}  # words of each document's block
    total = 0
    for hit in hits:
        for sentence, spans in _pieces(hit, level):
            have = taken.get(hit.doc_id, {}).get(sentence, [])
            if _merge(have) == _merge([*have, *spans]):
                continue  # nothing new
            trial = {s: list(v) for s, v in taken.get(hit.doc_id, {}).items()}
            trial.setdefault(sentence, []).extend(spans)
            block_words = len(_block(docs.get(hit.doc_id, hit), trial)[0].split())
            if total - used.get(hit.doc_id, 0) + block_words <= words:
                total += block_words - used.get(hit.doc_id, 0)
                taken[hit.doc_id], used[hit.doc_id] = trial, block_words
                docs.setdefault(hit.doc_id, hit)
        if total >= words:
            break
    return _assemble(taken, docs, words)


def _assemble(taken: dict[str, dict[int, list[tuple[int, int]]]], docs: dict[str, Hit], budget: int) -> Context:
    """The context's text, documents in the order their first piece was taken, and its citations."""
    blocks, citations, at = [], [], 0
    for doc_id, by_sentence in taken.items():
        text, pieces = _block(docs[doc_id], by_sentence)
        if blocks:
            at += 2  # "\n\n"
        full = docs[doc_id].document_text
        citations += [Citation(doc_id, docs[doc_id].title, s, a, b, at + offset, whole, page_at(full, a))
                      for s, a, b, offset, whole in pieces]
        blocks.append(text)
        at += len(text)
    text = "\n\n".join(blocks)
    return Context(text, len(text.split()), budget, tuple(citations))
