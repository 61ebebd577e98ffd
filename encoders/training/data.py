"""Training data readers: PropSegment segmentations, SICK, STS-B."""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..segment import Proposition, words

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
