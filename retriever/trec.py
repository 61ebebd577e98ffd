"""Topics in, TREC runs out: how propdex exchanges rankings with other tools.

A run is the format trec_eval, ir-measures, pyserini and PyLate share, one
line a retrieved item: `qid Q0 docno rank score tag`. Tools rank by score
(trec_eval breaks ties by docno), so a run is written with scores that never
rise down a ranking: a ranking whose own scores do (a second hop's places are
interleaved, not scored on one scale) is written with 1 / (60 + rank), the
rank's reciprocal-rank score. Read back, a run is ordered by score, then by
its rank column.

A docno is the document id, `ID#SENTENCE` for a sentence-level run, with
whitespace, `%` and `#` percent-escaped (HotpotQA's ids are titles with
spaces): `docno`/`parse_docno` are each other's inverse.

Topics (`read_topics`): a TSV file of `qid<TAB>text` lines, a BEIR
queries.jsonl (`_id`, `text`), or a HotpotQA JSON list (`_id`, `question`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import IO
from urllib.parse import unquote

from .fusion import RRF_K

_ESCAPE = re.compile(r"[\s%#]")


def docno(doc_id: str, sentence: int | None = None) -> str:
    """The run's name for a document, or for one of its sentences."""
    name = _ESCAPE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), doc_id)
    return name if sentence is None else f"{name}#{sentence}"


def parse_docno(name: str) -> Hashable:
    """A document id, or (document id, sentence index) for `ID#SENTENCE`."""
    head, sep, tail = name.partition("#")
    if not sep:
        return unquote(head)
    if not tail.isdigit():
        raise ValueError(f"docno {name!r}: a sentence is ID#INDEX")
    return unquote(head), int(tail)


def read_topics(path: str | Path) -> list[tuple[str, str]]:
    """(query id, text) pairs of a topics file, in file order."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no topics file {path}")
    with open(path, encoding="utf-8") as f:
        if path.suffix == ".jsonl":
            return [_record(path, n, line, "_id", "text") for n, line in enumerate(f, start=1) if line.strip()]
        if path.suffix == ".json":
            try:
                records = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not JSON ({e})") from None
            if not isinstance(records, list):
                raise ValueError(f"{path}: a JSON topics file is a list of {{'_id', 'question'}} records (HotpotQA's)")
            return [_record(path, n, json.dumps(r), "_id", "question") for n, r in enumerate(records, start=1)]
        topics = []
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            qid, sep, text = line.rstrip("\r\n").partition("\t")
            if not sep or not qid.strip() or not text.strip():
                raise ValueError(f"{path}:{n}: expected 'qid<TAB>text', got {line.strip()[:60]!r}")
            topics.append((qid.strip(), text.strip()))
    _check_unique(path, topics)
    return topics


def _record(path: Path, n: int, line: str, id_key: str, text_key: str) -> tuple[str, str]:
    what = "line" if path.suffix == ".jsonl" else "record"
    try:
        record = json.loads(line)
        qid, text = str(record[id_key]), record[text_key]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(f"{path}:{n}: {what} {n} is not a JSON object with {id_key!r} and {text_key!r}") from None
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{path}:{n}: {what} {n} has an empty {text_key!r}")
    return qid, text


def _check_unique(path: Path, topics: Sequence[tuple[str, str]]) -> None:
    seen: set[str] = set()
    for qid, _ in topics:
        if qid in seen:
            raise ValueError(f"{path}: query id {qid!r} appears twice")
        seen.add(qid)


def run_scores(scores: Sequence[float]) -> list[float]:
    """The scores a run writes for a ranking: its own where they never rise,
    else each rank's 1 / (RRF_K + rank)."""
    if all(a >= b for a, b in zip(scores, scores[1:])):
        return list(scores)
    return [1 / (RRF_K + r) for r in range(1, len(scores) + 1)]


def write_run(out: IO[str], qid: str, ranking: Sequence[tuple[str, int | None, float]], tag: str) -> None:
    """One query's lines: `ranking` holds (document id, sentence index or
    None, score), best first."""
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"a run tag is one word, got {tag!r}")
    for rank, ((doc_id, sentence, _), score) in enumerate(zip(ranking, run_scores([s for *_, s in ranking])), start=1):
        out.write(f"{qid} Q0 {docno(doc_id, sentence)} {rank} {score:.6g} {tag}\n")


def read_run(path: str | Path) -> dict[str, list[Hashable]]:
    """Query id -> ranked items (document ids, or (id, sentence) pairs),
    best first: by score, then by the rank column."""
    rows: dict[str, list[tuple[float, int, Hashable]]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            parts = line.split()
            if len(parts) != 6:
                raise ValueError(f"{path}:{n}: a run line is 'qid Q0 docno rank score tag', got {line.strip()[:80]!r}")
            qid, _, name, rank, score, _ = parts
            try:
                rows.setdefault(qid, []).append((-float(score), int(rank), parse_docno(name)))
            except ValueError:
                raise ValueError(f"{path}:{n}: rank must be an integer and score a number, got {rank!r} {score!r}") from None
    return {q: _dedup(item for *_, item in sorted(r, key=lambda t: (t[0], t[1]))) for q, r in rows.items()}


def _dedup(items: Iterable[Hashable]) -> list[Hashable]:
    return list(dict.fromkeys(items))
