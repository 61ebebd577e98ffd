"""Training data: PropSegment segmentations, SICK, STS-B, Wikipedia text.

PropSegment and WikiExtractor files are read by the index's readers
(propdex.indexer.readers: one reader per format). Training is a tool above
the encoders' runtime, which never imports it, so this creates no cycle.
"""
from __future__ import annotations

import csv
import logging
import re
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from propdex.indexer.readers import PropSegment, Skip, read_corpus

from ..segment import Proposition, words
from ..text import split_sentences

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class SegmentedSentence:
    cluster: str
    doc: str
    index: int
    text: str
    words: np.ndarray  # (n, 2) char spans
    propositions: tuple[Proposition, ...]  # the reference response's
    other_responses: tuple[tuple[Proposition, ...], ...]  # the other raters'


def propsegment_sentences(folder: str | Path, split: str) -> list[SegmentedSentence]:
    """Sentences with text and a reference segmentation, in file order.

    Only Wikipedia clusters carry text. Words are PropSegment's tokens, which
    `segment.words` reproduces exactly (checked in the tests)."""
    data = PropSegment(folder)
    sentences = data.sentences(split)
    out = []
    for rec in data.segmentations(split):
        sid = rec["sentence_id"]
        key = (str(sid["document_id"]), int(sid["sentence_index"]))
        if key not in sentences:
            continue
        responses = rec["segmentation_responses"]
        refs = [r for r in responses if r.get("is_reference_response")]
        if not refs:
            continue

        def props(response: dict) -> tuple[Proposition, ...]:
            return tuple(dict.fromkeys(tuple(sorted(set(p["token_indices"]))) for p in response.get("propositions", []) if p["token_indices"]))

        sentence = sentences[key]
        others = tuple(props(r) for r in responses if not r.get("is_reference_response") and r.get("propositions"))
        out.append(SegmentedSentence(sentence.cluster_id, key[0], key[1], sentence.text, words(sentence.text), props(refs[0]), others))
    return out


def sick_pairs(path: str | Path) -> list[tuple[str, str]]:
    """SICK pairs whose entailment holds both ways (entailment_AB and _BA)."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row.get("entailment_AB") == "A_entails_B" and row.get("entailment_BA") == "B_entails_A":
                pairs.append((row["sentence_A"], row["sentence_B"]))
    return pairs


def stsb_pairs(path: str | Path, min_score: float = 4.0) -> list[tuple[str, str]]:
    """STS-B pairs scored >= min_score (tab-separated, no quoting: score in column 5)."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) >= 7 and float(cols[4]) >= min_score:
                pairs.append((cols[5], cols[6]))
    return pairs


# WikiExtractor output of 100 files: wiki_00 .. wiki_69 train, wiki_70 ..
# wiki_99 are held out (reconstruction BLEU, the re-ranking task).
WIKI_EXTRACTED = "../shared/data/wikipedia/extracted"
WIKI_HELDOUT_FROM = 70


@dataclass(frozen=True)
class Article:
    id: str
    title: str
    sections: tuple[tuple[str, str], ...]  # (heading, text); the lead's heading is ""


def is_heading(line: str) -> bool:
    """WikiExtractor keeps section titles as short lines ending in a period
    ("Etymology and terminology."); body paragraphs are longer or end otherwise."""
    line = line.strip()
    return line.endswith(".") and 0 < len(line.split()) <= 10 and ". " not in line and not line[0].islower()


def wiki_files(folder: str | Path, split: str) -> list[Path]:
    """The split's WikiExtractor files under `folder` (or `folder` itself, a file)."""
    folder = Path(folder)
    files = [folder] if folder.is_file() else sorted(folder.rglob("wiki_*"))
    if not files:
        raise FileNotFoundError(f"no WikiExtractor files (wiki_*) under {folder}")
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be train or heldout, got {split!r}")
    number = lambda f: int(re.sub(r"\D", "", f.name.split(".")[0]) or 0)  # noqa: E731
    return [f for f in files if (number(f) >= WIKI_HELDOUT_FROM) == (split == "heldout")]


def wiki_articles(folder: str | Path = WIKI_EXTRACTED, split: str = "train") -> Iterator[Article]:
    """Articles of a WikiExtractor folder (or one file) with their sections,
    in file order, read by the index's reader (a damaged article is a
    logged skip, as when indexing)."""
    for path in wiki_files(folder, split):
        for doc in read_corpus([path], "wikiextractor"):
            if isinstance(doc, Skip):
                log.warning("skipped %s (%s)%s", doc.source, doc.reason, f": {doc.detail}" if doc.detail else "")
                continue
            lines = [line.strip() for line in doc.text.split("\n") if line.strip()]
            sections: list[tuple[str, list[str]]] = [("", [])]
            for line in lines:
                if is_heading(line):
                    sections.append((line.rstrip("."), []))
                else:
                    sections[-1][1].append(line)
            yield Article(doc.id, doc.title, tuple((h, "\n".join(body)) for h, body in sections if body))


T = TypeVar("T")


def wiki_sample(folder: str | Path, split: str, n: int, items: Callable[[str, str], Iterable[T]], seed: int = 0) -> list[T]:
    """Up to `n` training items drawn from the split's section texts (`items`
    turns one section's text and its article's title into zero or more): files in a seeded order,
    read only until there are enough, then a seeded shuffle."""
    rng = random.Random(seed)
    files = wiki_files(folder, split)
    rng.shuffle(files)
    pool: list[T] = []
    for path in files:
        pool.extend(item for article in wiki_articles(path, split) for _, text in article.sections for item in items(text, article.title))
        if len(pool) >= n:
            break
    rng.shuffle(pool)
    return pool[:n]


def packed_sentences(text: str, max_words: int) -> list[str]:
    """Consecutive sentences of `text` packed into chunks of at most
    `max_words` words (a longer sentence is a chunk of its own, cut)."""
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for a, b in split_sentences(text):
        sentence = text[a:b]
        n = len(sentence.split())
        if current and used + n > max_words:
            chunks.append(" ".join(current))
            current, used = [], 0
        current.append(" ".join(sentence.split()[:max_words]))
        used += min(n, max_words)
    if current:
        chunks.append(" ".join(current))
    return chunks
