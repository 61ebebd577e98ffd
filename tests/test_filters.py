"""Metadata filters with comparisons, negation and prefixes, against a brute-force filter on a real index."""
from dataclasses import replace

import pytest
from paths import DATA

from propdex.cli import main
from propdex.encoders import load_encoder
from propdex.indexer.build import IndexWriter
from propdex.indexer.readers import read_corpus
from propdex.retriever import Searcher
from propdex.retriever.settings import where_clause
from propdex.retriever.filters import from_clauses

QUERIES = ["cell membrane proteins", "vitamin D deficiency"]


def _docs(n: int):
    docs = [d for _, d in zip(range(n), read_corpus([DATA / "beir" / "scifact" / "corpus.jsonl"]))]
    return [replace(d, metadata={"year": 2000 + i % 25, "score": i / 10, "path": f"/notes/{'work' if i % 3 else 'home'}/{i}.md",
                                 "team": ["web", "infra", "data"][i % 3] if i % 5 else None, **({"tag": "x"} if i % 7 == 0 else {})})
            for i, d in enumerate(docs)]


FILTERS = [
    ({"year": {">=": 2020}}, lambda m: m["year"] >= 2020),
    ({"year": {">": 2005, "<=": 2010}}, lambda m: 2005 < m["year"] <= 2010),
    ({"score": {"<": 1.5}}, lambda m: m["score"] < 1.5),
    ({"path": {"prefix": "/notes/home/"}}, lambda m: m["path"].startswith("/notes/home/")),
    ({"team": {"!=": "web"}}, lambda m: m["team"] != "web"),  # documents whose team is null stay
    ({"team": {"not in": ["web", "infra"]}, "year": {"<": 2012}}, lambda m: m["team"] not in ("web", "infra") and m["year"] < 2012),
    ({"tag": {"!=": "x"}}, lambda m: m.get("tag") != "x"),  # documents without the field stay
    ({"year": {">=": "2020"}}, lambda m: False),  # a string bound never matches a number
]


@pytest.mark.parametrize("where, keep", FILTERS)
def test_comparisons_negation_and_prefixes_keep_what_a_brute_force_filter_keeps(tmp_path_factory, tiny, where, keep):
    root = tmp_path_factory.getbasetemp() / "filters-index"
    docs = _docs(50)
    encoder = load_encoder("tokens", backbone=tiny)
    if not (root / "manifest.json").is_file():
        IndexWriter(root, encoder, shard_docs=20).build(docs)
    meta = {d.id: d.metadata for d in docs}
    allowed = {d.id for d in docs if keep(d.metadata)}
    with Searcher.load(root, encoder=encoder) as s:
        for q in QUERIES:
            # Every vector a candidate: the filter alone decides what is left.
            everything = [h.doc_id for h in s.search(q, k=50, rerank=50, candidates=100_000)]
            hits = s.search(q, k=50, rerank=50, candidates=100_000, where=where)
            assert [h.doc_id for h in hits] == [d for d in everything if d in allowed], where
            assert all(keep(meta[h.doc_id]) for h in s.search(q, k=5, where=where, hybrid=True))
            assert all(keep(meta[h.doc_id]) for h in s.search(q, k=5, where=where, bm25=True))


def test_the_command_line_spells_every_operator_and_a_bad_filter_is_one_line(tmp_path, capsys):
    assert from_clauses([where_clause("year>=2020"), where_clause("year<2024"), where_clause("path^=/notes/"),
                         where_clause("team!=web"), where_clause('tag=["a","b"]')]) == {
        "year": {">=": 2020, "<": 2024}, "path": {"prefix": "/notes/"}, "team": {"!=": "web"}, "tag": {"==": ["a", "b"]}}
    with pytest.raises(ValueError, match="twice"):
        from_clauses([where_clause("year>=1"), where_clause("year>=2")])
    assert main(["search", str(tmp_path), "q", "--where", "year>=[1,2]"]) == 2
    assert "compares with one number or string" in capsys.readouterr().err
