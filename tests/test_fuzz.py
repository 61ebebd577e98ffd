"""Fuzzing the two doors users feed: JSONL input and search arguments.
No traceback, no hang, nothing valid dropped."""
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from propdex.encoders import Document, load_encoder
from propdex.indexer.build import IndexWriter
from propdex.indexer.readers import Skip, _compression, read_corpus
from propdex.retriever import Searcher

doc_line = st.tuples(st.just("doc"), st.text(max_size=20), st.text(max_size=200), st.text(max_size=30))
junk_line = st.tuples(st.just("junk"), st.binary(max_size=80).map(lambda b: b.replace(b"\n", b" ").replace(b"\r", b" ")))


@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(doc_line, junk_line), max_size=12))
def test_jsonl_reader_yields_one_record_per_line_and_keeps_every_valid_document(tmp_path, lines):
    path = tmp_path / "fuzz.jsonl"
    raw, expected = [], []
    for i, line in enumerate(lines):
        if line[0] == "doc":
            _, suffix, text, title = line
            doc_id = f"d{i}-{suffix}"
            raw.append(json.dumps({"id": doc_id, "text": text, "title": title}).encode())
            if text.strip() and len(doc_id.encode()) <= 500:
                expected.append((doc_id, text, title))
        else:
            raw.append(line[1])
    path.write_bytes(b"\n".join(raw) + b"\n")
    records = list(read_corpus([path], "jsonl"))
    assert all(isinstance(r, (Document, Skip)) for r in records)
    if _compression(path):  # a compressed file's header by chance: read as one, broken, and said so
        assert records[-1].reason == "truncated_bz2" and records[-1].source == str(path)
        return
    assert len(records) == sum(1 for r in raw if r.strip())  # blank lines are not records
    docs = [(r.id, r.text, r.title) for r in records if isinstance(r, Document)]
    found = iter(docs)
    assert all(any(d == e for d in found) for e in expected)  # every valid document, in order


@pytest.fixture(scope="module")
def searcher(tmp_path_factory, tiny, hotpot_docs):
    path = tmp_path_factory.mktemp("fuzz") / "ix"
    enc = load_encoder("tokens", backbone=tiny)
    IndexWriter(path, enc, shard_docs=20, factory="IVF4,Flat").build(hotpot_docs[:60])
    with Searcher.load(path, encoder=enc) as s:
        yield s


small = st.none() | st.integers(-3, 40)


@settings(max_examples=120, deadline=5000)
@given(query=st.text(max_size=60), k=st.integers(-2, 40), level=st.sampled_from(["doc", "sentence", "unit", "page"]),
       nprobe=small, candidates=small, rerank=small, mode=st.sampled_from(["dense", "hybrid", "bm25"]), hops=st.integers(0, 3))
def test_search_answers_or_refuses_with_a_value_error(searcher, query, k, level, nprobe, candidates, rerank, mode, hops):
    try:
        hits = searcher.search(query, k=k, level=level, nprobe=nprobe, candidates=candidates, rerank=rerank,
                               hybrid=mode == "hybrid", bm25=mode == "bm25", hops=hops)
    except ValueError:
        return
    assert len(hits) <= k and [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(h.doc_id for h in hits)
