"""A fixed corpus gives the same `search --json` answers as when the golden file was written.

The golden file pins what a user sees (ids, ranks, texts, sentences, spans,
passages, hops, context packing) for doc, sentence and unit level, hybrid
fusion, the second hop and filters, so that a change of structure cannot
change an answer unnoticed. Everything but scores must be equal; scores are
written to 4 decimals and compared within 2e-4: BLAS may sum in another
order on another CPU, and a sum that lands beside a rounding boundary
rounds the other way there. The index is exact (Flat): a trained
codec's k-means takes other turns on another CPU and moves scores and
ranks. Regenerate it (after a change that means to alter answers) with
`PROPDEX_GOLDEN=write python -m pytest tests/test_same_answers.py`.
"""
import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from conftest import HOTPOT
from propdex.cli import main

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "search_json.jsonl"
QUERIES = [
    "Which American director was born in 1966?",
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?",
    "Were Scott Derrickson and Ed Wood of the same nationality?",
]
CASES = [
    [],
    ["--level", "sentence"],
    ["--level", "unit"],
    ["--hybrid"],
    ["--hybrid", "--fusion", "minmax"],
    ["--hybrid", "--hops", "2"],
    ["--level", "sentence", "--hybrid", "--hops", "2"],
    ["--bm25"],
    ["--where", "year>=2000", "--where", "team!=web"],
    ["--level", "sentence", "--where", "team=db"],
    ["--context", "80"],
]


def propdex(*args: str) -> str:
    """The `propdex` command, run in this process (the model loads once)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(args)) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    """60 HotpotQA paragraphs as JSONL, each with a year and a team to filter on."""
    questions = json.loads(HOTPOT.read_text())[:8]
    seen, rows = set(), []
    for q in questions:
        for title, sentences in q["context"]:
            if title not in seen:
                seen.add(title)
                n = len(rows)
                rows.append({"id": title, "title": title, "text": "".join(sentences),
                             "year": 1990 + 3 * (n % 12), "team": ("db", "web", "ml")[n % 3]})
    tmp = tmp_path_factory.mktemp("golden")
    corpus = tmp / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    propdex("index", str(corpus), "--out", str(tmp / "index"), "--factory", "Flat", "--device", "cpu")
    return tmp / "index"


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


SCORE_TOLERANCE = 2e-4


def differences(got, want, where: str = "") -> list[str]:
    """Where two answers differ: any key, id, text or span at all, a number
    by more than SCORE_TOLERANCE."""
    if isinstance(got, dict) and isinstance(want, dict):
        if got.keys() != want.keys():
            return [f"{where}: keys {sorted(got)} != {sorted(want)}"]
        return [d for k in got for d in differences(got[k], want[k], f"{where}.{k}")]
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{where}: {len(got)} items != {len(want)}"]
        return [d for i, (a, b) in enumerate(zip(got, want)) for d in differences(a, b, f"{where}[{i}]")]
    if isinstance(got, float) or isinstance(want, float):
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (got, want))
        return [] if numbers and abs(got - want) <= SCORE_TOLERANCE else [f"{where}: {got!r} != {want!r}"]
    return [] if got == want else [f"{where}: {got!r} != {want!r}"]


def test_differences_tolerate_rounding_only():
    want = {"results": [{"doc_id": "a", "score": 12.8123, "spans": [[0, 4]]}]}
    assert differences({"results": [{"doc_id": "a", "score": 12.8124, "spans": [[0, 4]]}]}, want) == []
    assert differences({"results": [{"doc_id": "a", "score": 12.8133, "spans": [[0, 4]]}]}, want)
    assert differences({"results": [{"doc_id": "b", "score": 12.8123, "spans": [[0, 4]]}]}, want)
    assert differences({"results": [{"doc_id": "a", "score": 12.8123, "spans": [[0, 5]]}]}, want)
    assert differences({"results": [{"doc_id": "a", "score": 12.8123}]}, want)
    assert differences({"results": []}, want)


def answers(index: Path) -> list[dict]:
    out = []
    for case in CASES:
        for q in QUERIES:
            args = ["--context", case[1], *case[2:]] if case[:1] == ["--context"] else ["-k", "5", *case]
            out.append({"args": case, "query": q,
                        "json": _rounded(json.loads(propdex("search", str(index), q, "--json", "--device", "cpu", *args)))})
    return out


def test_search_json_is_unchanged(index):
    got = answers(index)
    if os.environ.get("PROPDEX_GOLDEN") == "write":
        GOLDEN.write_text("".join(json.dumps(a, ensure_ascii=False, sort_keys=True) + "\n" for a in got))
    want = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
    assert [(a["args"], a["query"]) for a in got] == [(w["args"], w["query"]) for w in want]
    for a, w in zip(got, want):
        found = differences(a["json"], w["json"])
        assert not found, (a["args"], a["query"], found[:5])
