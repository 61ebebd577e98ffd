"""End to end: nugget indexes of real HotpotQA paragraphs and SciFact abstracts with MiniLM."""
from __future__ import annotations

import csv
import json
import math

import pytest

from propdex.encoders import Kind, load_encoder
from propdex.indexer.build import IndexWriter
from propdex.indexer.readers import read_corpus
from propdex.retriever import Searcher

from paths import DATA

pytestmark = pytest.mark.slow
SCIFACT = DATA / "beir" / "scifact"


@pytest.fixture(scope="module")
def encoder(minilm):
    return load_encoder("nugget", backbone=minilm)


def test_nugget_index_stores_ceil_n_r_vectors_per_passage_and_finds_the_paragraph(encoder, minilm, hotpot_docs, tmp_path):
    docs = hotpot_docs[:60]
    out = tmp_path / "nuggets"
    manifest = IndexWriter(out, encoder, factory="PQ16").build(docs)
    assert manifest["encoder"]["name"] == "nugget" and manifest["encoder"]["ratio"] == 0.25
    # n counts what `tokens` would store for the passage: its words, title and punctuation left out.
    tokens = load_encoder("tokens", backbone=minilm)
    expected = sum(math.ceil(len(e.vectors) * 0.25) for d in docs for e in tokens.encode(tokens.passages(d)))
    assert manifest["counts"]["vectors"] == expected
    found = 0
    with Searcher.load(out, encoder=encoder) as searcher:
        for target in docs[:20]:
            hits = searcher.search(target.sentence_text(0), k=3)
            found += hits[0].doc_id == target.id
            for h in hits:
                assert all(u.kind == Kind.TOKEN for u in h.units)
                assert all(0 <= a < b <= len(h.sentence_text) for a, b in h.spans)
        sentences = searcher.search(docs[5].sentence_text(0), k=3, level="sentence")
        assert sentences[0].doc_id == docs[5].id
    # A paragraph's own first sentence, among 60 paragraphs on 6 topics.
    assert found >= 16


def test_nugget_index_of_scifact_abstracts_answers_the_claims_written_for_them(encoder, tmp_path):
    with open(SCIFACT / "qrels" / "test.tsv", encoding="utf-8") as f:
        qrels = [(q, d) for q, d, _ in list(csv.reader(f, delimiter="\t"))[1:]]
    claims = {str(r["_id"]): r["text"] for r in map(json.loads, (SCIFACT / "queries.jsonl").read_text().splitlines())}
    pairs = list({q: d for q, d in qrels}.items())[:20]
    gold = {d for _, d in pairs}
    corpus = list(read_corpus([SCIFACT], "beir"))
    docs = [d for d in corpus if d.id in gold] + [d for d in corpus[:200] if d.id not in gold][:40]
    out = tmp_path / "scifact"
    manifest = IndexWriter(out, encoder, factory="Flat").build(docs)
    tokens = load_encoder("tokens", backbone=encoder.backbone)
    stored = sum(len(e.vectors) for d in docs for e in tokens.encode(tokens.passages(d)))
    assert manifest["counts"]["vectors"] <= math.ceil(stored / 4) + len(docs)  # a quarter, rounded up per passage
    with Searcher.load(out, encoder=encoder) as searcher:
        top1 = sum(searcher.search(claims[q], k=1)[0].doc_id == d for q, d in pairs)
    assert top1 >= 15  # `tokens` finds 18 of these 20, `single` 19 (and nuggets 19)
