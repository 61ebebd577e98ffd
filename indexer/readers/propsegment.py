"""PropSegment v1: one reader of its files for indexing, training and eval.

The index reads the Wikipedia clusters' documents (`read`, through
`read_corpus`); the segmenter's training reads segmentations and eval reads
relationships (`PropSegment`). Both go through the same cluster walk, so a
sentence index means the same sentence everywhere. News clusters carry no
text and are not read.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from propdex.encoders.text import Span, sentence_spans_from_list

from .base import FileSkip, Record, Skip, document
from .streams import load_json

log = logging.getLogger(__name__)

PROPSEGMENT_WIKI = "SOURCE_WIKI_CLUSTERS"  # news clusters (SOURCE_NEWSHEAD) carry no text
CLUSTER_FILE = re.compile(r"document_clusters\.[^.]+\.json(?:\.bz2|\.gz)?")


def cluster_files(folder: Path) -> list[Path]:
    """The folder's document_clusters.*.json files, sorted: dev before test."""
    return sorted(p for p in folder.iterdir() if CLUSTER_FILE.fullmatch(p.name))


def read(path: Path, max_chars: int) -> Iterator[Record]:
    """Documents of the Wikipedia clusters of a document_clusters.*.json file."""
    for cluster_id, doc in _wiki_documents(load_json(path), path):
        yield _document(doc, cluster_id, path, max_chars)


def _wiki_documents(data: object, path: Path) -> Iterator[tuple[object, object]]:
    """(cluster id, document record) of every Wikipedia cluster's documents."""
    if not isinstance(data, list):
        raise FileSkip(Skip("missing_field", str(path), "not a list of clusters"))
    for cluster in data:
        if isinstance(cluster, dict) and cluster.get("source_dataset") == PROPSEGMENT_WIKI:
            for doc in cluster.get("documents") or ():
                yield cluster.get("cluster_id"), doc


def _document(doc: object, cluster_id: object, path: Path, max_chars: int) -> Record:
    """A document with the data's own sentences as its sentence spans, so
    the propositions' sentence indices hold in the index too."""
    if not isinstance(doc, dict) or doc.get("document_id") is None:
        return Skip("missing_field", str(path), "document without document_id")
    source = f"{path}#{doc['document_id']}"
    text = doc.get("document")
    sentences = [s.get("sentence_text") if isinstance(s, dict) else None for s in doc.get("sentences") or ()]
    if not isinstance(text, str) or not all(isinstance(s, str) for s in sentences):
        return Skip("missing_field", source, "no document text or sentence_text")
    spans = _locate(text, sentences)
    if spans is None:
        # Keep the data's sentence indices valid, even if the text changes.
        log.warning("%s: sentences not found in the document text; joining them", source)
        text, spans = sentence_spans_from_list(sentences)
    return document(str(doc["document_id"]), text, f"cluster {cluster_id}", source, max_chars, spans)


def _locate(text: str, sentences: list[str]) -> list[Span] | None:
    """Stripped spans of `sentences` found in order in `text`, or None."""
    spans: list[Span] = []
    pos = 0
    for sentence in sentences:
        stripped = sentence.strip()
        start = text.find(stripped, pos)
        if start < 0:
            return None
        pos = start + len(stripped)
        spans.append((start, pos))
    return spans


@dataclass(frozen=True)
class PropSegmentSentence:
    """A sentence of a Wikipedia cluster: its text and the data's tokens."""

    cluster_id: str
    doc_id: str
    index: int
    record: dict[str, Any]  # {"sentence_text", "tokens": [{"text", "character_offset_of_token_in_sentence"}...]}

    @property
    def text(self) -> str:
        return self.record["sentence_text"]


class PropSegment:
    """PropSegment v1: the one reader of its files (document_clusters,
    propositions and relationships .{split}.json), for the index (documents,
    through `read_corpus`), the segmenter's training (segmentations) and
    eval (atomic-fact retrieval from the relationships). Files are read on
    first use, strictly (a malformed file is a ValueError naming it)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise ValueError(f"{self.folder}: no PropSegment folder there")
        self._files: dict[str, object] = {}

    def file(self, name: str) -> Path:
        path = self.folder / name
        if not path.is_file():
            raise ValueError(f"{path}: missing from the PropSegment folder")
        return path

    def _json(self, name: str) -> list[Any]:
        if name not in self._files:
            try:
                data = load_json(self.file(name))
            except FileSkip as e:
                raise ValueError(f"{e.skip.source}: {e.skip.detail}") from None
            if not isinstance(data, list):
                raise ValueError(f"{self.folder / name}: not a JSON list of records")
            self._files[name] = data
        return self._files[name]  # type: ignore[return-value]

    def sentences(self, split: str) -> dict[tuple[str, int], PropSegmentSentence]:
        """The split's Wikipedia sentences by (document id, sentence index), in file order."""
        name = f"document_clusters.{split}.json"
        try:
            documents = list(_wiki_documents(self._json(name), self.folder / name))
        except FileSkip as e:
            raise ValueError(f"{e.skip.source}: {e.skip.detail}") from None
        return {
            (str(doc["document_id"]), i): PropSegmentSentence(str(cluster_id), str(doc["document_id"]), i, sent)
            for cluster_id, doc in documents for i, sent in enumerate(doc["sentences"])
        }

    def segmentations(self, split: str) -> list[dict[str, Any]]:
        """propositions.{split}.json: per sentence, the raters' segmentation responses."""
        return self._json(f"propositions.{split}.json")

    def relationships(self, split: str) -> list[dict[str, Any]]:
        """relationships.{split}.json: hypothesis/premise proposition pairs with the raters' relations."""
        return self._json(f"relationships.{split}.json")
