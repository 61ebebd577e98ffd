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
    assert set(top) == {"rank", "hop", "doc_id", "title", "score", "text", "passage", "metadata", "sentence", "spans", "page"}
    assert top["hop"] == 1 and top["page"] is None  # a document without pages
    assert top["sentence"]["text"] == top["text"] and top["passage"]["sentences"] == [top["sentence"]["index"]] * 2 and top["metadata"] == {}
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


def test_a_folder_of_notes_indexes_searches_and_updates_by_path(tmp_path):
    """The notes user's first try: a folder of Markdown and text files, no
    format named; a hit says which file; an edited note replaces itself."""
    notes = tmp_path / "notes"
    (notes / "kitchen").mkdir(parents=True)
    bread = notes / "kitchen" / "bread.md"
    bread.write_text("# Sourdough\n\nFeed the starter twice a day.\nBake it at 250 C for 20 minutes,\nwith steam.\n")
    (notes / "garden.txt").write_text("The garden project has a budget of 400 euros.\n")
    (notes / "scan.pdf").write_bytes(b"%PDF-1.7\n\x00\xff")
    out = tmp_path / "idx"
    run = propdex("index", str(notes), "--out", str(out), "--device", "cpu")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "indexed 2 documents" in run.stdout and '"unreadable": 1' in run.stdout
    run = propdex("search", str(out), "How hot should the oven be for bread?", "-k", "1", "--level", "sentence")
    assert run.returncode == 0, run.stderr
    assert f"Sourdough ({bread})" in run.stdout and "20 minutes, with steam." in run.stdout  # one sentence over two lines

    bread.write_text("# Sourdough\n\nBake it at 230 C for 40 minutes in a Dutch oven.\n")
    run = propdex("add", str(out), str(bread), "--update")
    assert run.returncode == 0, run.stderr[-2000:]
    hits = json.loads(propdex("search", str(out), "oven temperature for bread", "-k", "5", "--json").stdout)["results"]
    assert [h["doc_id"] for h in hits].count(str(bread)) == 1
    assert "230 C" in next(h["text"] for h in hits if h["doc_id"] == str(bread))
    assert json.loads(propdex("info", str(out)).stdout)["counts"]["documents"] == 2
