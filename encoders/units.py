"""The records that travel between readers, encoders, the index and the searcher.

A `Document` is text plus its sentence boundaries. Encoders cut documents into
`Passage`s (character windows that fit the model) and return, per passage, an
`Encoded`: float32 vectors and one `Unit` per vector saying exactly which text
the vector stands for.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

Span = tuple[int, int]


class Kind(IntEnum):
    """What a vector stands for. Stored as a small int in the index."""

    PASSAGE = 0  # a whole passage (one or more sentences)
    TOKEN = 1  # one token
    PROPOSITION = 2  # a set of possibly non-contiguous spans of one sentence
    SLOT = 3  # a short sequence, represented through its special-token slots (Cross-Thought)
    TITLE = 4  # a token of the document's title: counts for the document, never for a sentence
    SPECIAL = 5  # a ColBERT checkpoint's special token ([CLS], a marker, [SEP]): counts for the document, never for a sentence


@dataclass(frozen=True)
class Document:
    """A document with sentence boundaries as character offsets into `text`.

    `sentences` are half-open [start, end) spans, sorted and non-overlapping.
    `focus`, when given, restricts what is represented to these character
    spans; the rest of the text is context only (a proposition inside its
    sentence, say). Empty means the whole text. `source` says where a reader
    found it ("path:line", "path#id"), for messages; `repairs` what the
    reader changed to make it indexable ("lone_surrogates"), for the
    manifest's counts. Neither is stored with the document. `metadata`
    holds the input record's other fields (url, date, source...), stored
    with the document, returned with its hits and filtered on by `where=`.
    `stamp` says which version of a file the document was read from whole
    (its size and modification time), stored with it so that a sync passes
    over a file that has not changed since; like `source`, it is not what
    the document says, so equality leaves it out.
    """

    id: str
    text: str
    title: str = ""
    sentences: tuple[Span, ...] = ()
    focus: tuple[Span, ...] = ()
    source: str = field(default="", compare=False, repr=False)
    repairs: tuple[str, ...] = field(default=(), compare=False, repr=False)
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False, repr=False)
    stamp: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        # Checked at construction, and so by dataclasses.replace: a text
        # replaced under spans made for another would be cut wrong, or lose
        # the text no span covers, without a word.
        problem = _span_problem(self.text, self.sentences, whole=True)
        if problem:
            raise ValueError(f"document {self.id!r}: {problem} (sentences=() has the index split the text)")
        problem = _span_problem(self.text, self.focus, whole=False)
        if problem:
            raise ValueError(f"document {self.id!r}: focus {problem}")

    @classmethod
    def read_back(cls, id: str, text: str, title: str, sentences: tuple[Span, ...], focus: tuple[Span, ...],
                  metadata: Mapping[str, Any], stamp: str = "") -> "Document":
        """A document an index stored: its writer checked the spans, so they
        are not checked again, and an index written before the check reads."""
        doc = object.__new__(cls)
        for name, value in (("id", id), ("text", text), ("title", title), ("sentences", sentences), ("focus", focus),
                            ("source", ""), ("repairs", ()), ("metadata", metadata), ("stamp", stamp)):
            object.__setattr__(doc, name, value)
        return doc

    def sentence_text(self, i: int) -> str:
        start, end = self.sentences[i]
        return self.text[start:end]


def _span_problem(text: str, spans: tuple[Span, ...], whole: bool) -> str:
    """What is wrong with `spans` over `text`, or "": each span in bounds,
    sorted and non-overlapping; with `whole`, every non-whitespace character
    inside one of them (sentences cover the text; a focus need not)."""
    end, n = 0, len(text)
    for a, b in spans:
        if not 0 <= a <= b <= n:
            return f"span ({a}, {b}) lies outside its {n}-character text"
        if a < end:
            return f"span ({a}, {b}) starts before the previous span ends ({end}): spans must be sorted and not overlap"
        if whole and a > end and not text[end:a].isspace():
            return f"characters {end}..{a} ({text[end:a].strip()[:40]!r}) lie in no sentence span"
        end = b
    if whole and spans and n > end and not text[end:].isspace():
        return f"characters {end}..{n} ({text[end:].strip()[:40]!r}) lie in no sentence span"
    return ""


@dataclass(frozen=True, eq=False)
class Tokenized:
    """A document's text as the backbone's tokenizer cuts it, no specials:
    token ids, and each token's [start, end) char offsets in the text."""

    ids: np.ndarray  # (n,) int64
    offsets: np.ndarray  # (n, 2) int64


@dataclass(frozen=True)
class Passage:
    """A character window [start, end) of a document, aligned to sentences.

    `first_sentence` is the index of the sentence the window starts in. A
    sentence longer than the model window is cut into several passages, so a
    passage may start or end inside a sentence.

    `tokens`, when set, is the document's tokenization and the [first, last)
    token range of this window, for a window whose text, tokenized alone,
    gives exactly those tokens (it starts and ends between words): the
    encoder slices its tokens instead of tokenizing the text a second time.
    """

    doc: Document
    start: int
    end: int
    first_sentence: int
    tokens: tuple[Tokenized, int, int] | None = field(default=None, compare=False, repr=False)

    @property
    def text(self) -> str:
        return self.doc.text[self.start : self.end]

    @classmethod
    def of_text(cls, text: str, doc_id: str = "") -> "Passage":
        """A one-sentence passage: how queries enter an encoder."""
        return cls(Document(doc_id, text, sentences=((0, len(text)),)), 0, len(text), 0)


@dataclass(frozen=True)
class Unit:
    """What one vector stands for.

    `spans` are character offsets relative to the start of sentence `sentence`
    of document `doc_id`; a passage unit's span may run past that sentence, up
    to sentence `last_sentence`. A title (or special) unit has no spans and
    covers no sentence (`last_sentence` = `sentence` - 1).
    """

    doc_id: str
    sentence: int
    spans: tuple[Span, ...]
    kind: Kind
    last_sentence: int = -1

    def __post_init__(self) -> None:
        if self.kind in (Kind.TITLE, Kind.SPECIAL):
            object.__setattr__(self, "last_sentence", self.sentence - 1)
        elif self.last_sentence < 0:
            object.__setattr__(self, "last_sentence", self.sentence)


@dataclass
class Encoded:
    """Vectors (float32) and one unit per row. Rows are L2-normalised, except
    an encoder's whose vectors are attention-logit blocks (Cross-Thought)."""

    vectors: np.ndarray
    units: list[Unit] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or len(self.vectors) != len(self.units):
            raise ValueError(
                f"{len(self.units)} units for vectors of shape {self.vectors.shape}"
            )
