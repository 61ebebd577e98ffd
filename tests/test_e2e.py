"""End to end with the real MiniLM on real HotpotQA paragraphs, through the CLI."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import HOTPOT
from propdex.retriever import Searcher
from propdex.retriever.scoring import window_maxsim

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
N_DOCS = 200


def propdex(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "propdex", *args], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("e2e") / "hotpot"
    # IVF-PQ even on a small corpus, so stage 1 is approximate and stage 2 has work to do.
    run = propdex("index", str(HOTPOT), "--out", str(out), "--limit", str(N_DOCS), "--factory", "IVF32,PQ48", "--device", "cpu")
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"indexed {N_DOCS} documents" in run.stdout
    return out


@pytest.fixture(scope="module")
def searcher(index):
    with Searcher.load(index, device="cpu") as s:
        yield s


@pytest.fixture(scope="module")
def questions(searcher, hotpot_questions):
    """Questions whose gold paragraphs are all in the index."""
    indexed = {d for sh in searcher.shards for d in sh.store.doc_ids()}
    qs = [q for q in hotpot_questions if {t for t, _ in q["supporting_facts"]} <= indexed]
    assert len(qs) >= 15
    return qs


def test_questions_find_their_gold_paragraph_and_sentence(searcher, questions):
    texts = [q["question"] for q in questions]
    docs = searcher.search_batch(texts, k=5)
    sentences = searcher.search_batch(texts, k=5, level="sentence")
    doc_found = sent_found = 0
    for q, d, s in zip(questions, docs, sentences):
        gold = {(t, i) for t, i in q["supporting_facts"]}
        doc_found += bool({t for t, _ in gold} & {h.doc_id for h in d})
        sent_found += bool(gold & {(h.doc_id, h.sentence_index) for h in s})
    assert doc_found / len(questions) >= 0.9
    assert sent_found / len(questions) >= 0.8


def test_pq_stage1_plus_exact_stage2_matches_brute_force_maxsim(searcher, questions):
    stored = [(sh.store.document(o).id, v.astype(np.float32), sentences) for sh in searcher.shards
              for o, (v, sentences) in enumerate(sh.store.vectors(range(len(sh.store))))]
    texts = [q["question"] for q in questions]
    same = 0
    for query, hits, q in zip(texts, searcher.search_batch(texts, k=10), searcher.encoder.encode_queries(texts)):
        # The searcher's scoring, by brute force: MaxSim over each document's best passage-sized window.
        brute = sorted(((window_maxsim(q.vectors @ v.T, sentences, searcher.window), doc_id) for doc_id, v, sentences in stored),
                       reverse=True)[:10]
        same += [d for _, d in brute] == [h.doc_id for h in hits]
    assert same / len(texts) >= 0.9


def test_cli_search_json_and_info(index):
    run = propdex("search", str(index), "Which American director was born in 1966?", "-k", "3", "--level", "sentence", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["query"] == "Which American director was born in 1966?"
    assert [r["rank"] for r in out["results"]] == [1, 2, 3]
    top = out["results"][0]
    assert set(top) == {"rank", "hop", "doc_id", "title", "score", "text", "metadata", "sentence", "spans"} and top["hop"] == 1
    assert top["sentence"]["text"] in top["text"] and top["metadata"] == {}
    assert top["doc_id"] == "Scott Derrickson" and "1966" in top["sentence"]["text"]
    assert all(0 <= a < b <= len(top["sentence"]["text"]) for a, b in top["spans"])
    info = json.loads(propdex("info", str(index)).stdout)
    assert info["status"] == "complete" and info["counts"]["documents"] == N_DOCS and info["problems"] == []
    assert info["encoder"]["name"] == "tokens" and info["index"]["factory"] == "IVF32,PQ48"


@pytest.mark.parametrize(
    "args, message",
    [
        (["search", "/nonexistent/index", "q"], "no index at"),
        (["search", "INDEX", "   "], "empty query"),
        (["index", "/nonexistent/corpus.jsonl", "--out", "OUT"], "no such file"),
        (["search", "INDEX", "q", "--level", "paragraph"], "invalid choice"),
    ],
)
def test_user_errors_are_one_line_without_traceback(index, tmp_path, args, message):
    args = [a.replace("INDEX", str(index)).replace("OUT", str(tmp_path / "o")) for a in args]
    run = propdex(*args)
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
