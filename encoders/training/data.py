"""Training data readers: PropSegment segmentations, SICK, STS-B, Wikipedia text."""
from __future__ import annotations

import bz2
import csv
import html
import json
import re
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from ..segment import Proposition, words
from ..text import split_sentences

WIKI = "SOURCE_WIKI_CLUSTERS"


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
    folder = Path(folder)
    texts: dict[tuple[str, int], tuple[str, str]] = {}
    for cluster in json.loads((folder / f"document_clusters.{split}.json").read_text(encoding="utf-8")):
        if cluster["source_dataset"] != WIKI:
            continue
        for doc in cluster["documents"]:
            for i, sent in enumerate(doc["sentences"]):
                texts[(str(doc["document_id"]), i)] = (str(cluster["cluster_id"]), sent["sentence_text"])
    out = []
    for rec in json.loads((folder / f"propositions.{split}.json").read_text(encoding="utf-8")):
        sid = rec["sentence_id"]
        key = (str(sid["document_id"]), int(sid["sentence_index"]))
        if key not in texts:
            continue
        responses = rec["segmentation_responses"]
        refs = [r for r in responses if r.get("is_reference_response")]
        if not refs:
            continue

        def props(response: dict) -> tuple[Proposition, ...]:
            return tuple(dict.fromkeys(tuple(sorted(set(p["token_indices"]))) for p in response.get("propositions", []) if p["token_indices"]))

        cluster, text = texts[key]
        others = tuple(props(r) for r in responses if not r.get("is_reference_response") and r.get("propositions"))
        out.append(SegmentedSentence(cluster, key[0], key[1], text, words(text), props(refs[0]), others))
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
_DOC = re.compile(r'<doc ([^>]*)>\n(.*?)</doc>', re.S)
_ATTR = re.compile(r'(\w+)="([^"]*)"')


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
    """Articles of a WikiExtractor folder (or one file) with their sections, in file order."""
    for path in wiki_files(folder, split):
        opener = bz2.open if path.suffix == ".bz2" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            raw = f.read()
        for m in _DOC.finditer(raw):
            attrs = dict(_ATTR.findall(m.group(1)))
            title = html.unescape(attrs.get("title", ""))
            lines = [line.strip() for line in m.group(2).split("\n") if line.strip()]
            if lines and html.unescape(lines[0]) == title:
                lines = lines[1:]
            sections: list[tuple[str, list[str]]] = [("", [])]
            for line in lines:
                if is_heading(line):
                    sections.append((line.rstrip("."), []))
                else:
                    sections[-1][1].append(line)
            yield Article(attrs.get("id", ""), title, tuple((h, "\n".join(body)) for h, body in sections if body))


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
