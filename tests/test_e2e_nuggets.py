"""End to end: a nugget index of real HotpotQA paragraphs with MiniLM and the shipped weights."""
from __future__ import annotations

import math

import pytest

from encoders import Kind, load_encoder
from indexer.build import IndexWriter
from retriever import Searcher

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def encoder(minilm):
    return load_encoder("nugget", backbone=minilm)


def test_nugget_index_stores_ceil_n_r_vectors_per_passage_and_finds_the_paragraph(encoder, minilm, hotpot_docs, tmp_path):
    docs = hotpot_docs[:60]
    out = tmp_path / "nuggets"
    manifest = IndexWriter(out, encoder, factory="PQ16").build(docs)
    assert manifest["encoder"]["name"] == "nugget" and manifest["encoder"]["ratio"] == encoder.ratio
    expected = 0
    for d in docs:
        title = encoder.title_of(d)  # the title is model input too: n counts its tokens
        for p in encoder.passages(d):
            n = len(minilm.tokenizer(*([title] if title else []), p.text)["input_ids"])
            expected += max(1, math.ceil(n * encoder.ratio))
    # Focus-free text: every nugget is stored, none invented (a [CLS]/[SEP] nugget included).
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
