"""Metric functions against hand-computed values, and the BM25 baseline."""
import math

import pytest

from propdex.eval.bm25 import BM25Index, tokenize
from propdex.eval.metrics import (
    all_gold_at_k,
    beir_metrics,
    dedup_ranking,
    hotpotqa_metrics,
    mean_over_queries,
    precision_at_1,
    propsegment_metrics,
    recall_at_k,
    remove_ids,
)

RANKED = ["a", "b", "c", "d", "e"]


def test_recall_at_k():
    gold = {"b", "e", "z"}
    assert recall_at_k(RANKED, gold, 1) == 0
    assert recall_at_k(RANKED, gold, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, gold, 5) == pytest.approx(2 / 3)
    assert recall_at_k(RANKED, gold, 100) == pytest.approx(2 / 3)
    # a duplicated id in the ranking is not counted twice
    assert recall_at_k(["b", "b"], {"b", "c"}, 2) == 0.5


def test_all_gold_and_precision():
    assert all_gold_at_k(RANKED, {"a", "c"}, 2) == 0
    assert all_gold_at_k(RANKED, {"a", "c"}, 3) == 1
    assert all_gold_at_k(RANKED, {"a", "z"}, 5) == 0
    assert precision_at_1(RANKED, {"a"}) == 1
    assert precision_at_1(RANKED, {"b"}) == 0
    assert precision_at_1([], {"b"}) == 0
    with pytest.raises(ValueError):
        recall_at_k(RANKED, set(), 5)


def test_dedup_and_remove():
    ranked = ["s1:p1", "s2:p1", "s1:p2", "s3:p1", "s2:p9"]
    assert dedup_ranking(ranked, lambda i: i.split(":")[0]) == ["s1", "s2", "s3"]
    assert dedup_ranking([("d", 1), ("d", 2), ("e", 0)], lambda u: u[0]) == ["d", "e"]
    assert remove_ids(ranked, {"s1:p1"}) == ranked[1:]
    assert remove_ids(ranked, None) == ranked


def test_means_count_missing_queries_as_zero():
    gold = {"q1": {"a"}, "q2": {"b"}, "q3": {"x"}}
    runs = {"q1": ["a", "b"], "q2": ["a", "b"], "q_other": ["x"]}  # q3 missing
    assert mean_over_queries(precision_at_1, runs, gold) == pytest.approx(1 / 3)
    assert mean_over_queries(recall_at_k, runs, gold, k=2) == pytest.approx(2 / 3)
    m = propsegment_metrics(runs, gold)
    assert list(m) == ["P@1", "R@5", "R@10", "R@20"]
    assert m["P@1"] == pytest.approx(1 / 3) and m["R@5"] == pytest.approx(2 / 3)
    h = hotpotqa_metrics({"q": ["a", "x", "b"]}, {"q": {"a", "b"}})
    assert list(h) == [f"Recall@{k}" for k in (2, 5, 10, 20, 50, 100)] + [
        f"AllGold@{k}" for k in (2, 5, 10, 20, 50, 100)
    ]
    assert h["Recall@2"] == 0.5 and h["AllGold@2"] == 0
    assert h["Recall@5"] == 1 and h["AllGold@5"] == 1


def test_beir_metrics_by_hand():
    qrels = {
        "q1": {"d1": 2, "d2": 0, "d3": 1},  # graded; d2 judged non-relevant
        "q2": {"d4": 1},
        "q3": {"d5": 1},  # no run at all: scores 0 and still counts
    }
    run = {
        # ranks: d2 (grade 0), d1 (2), d9 (unjudged), d3 (1)
        "q1": {"d2": 4.0, "d1": 3.0, "d9": 2.0, "d3": 1.0},
        # the relevant document at rank 12: outside @10, inside @100
        "q2": {**{f"x{i}": 100.0 - i for i in range(11)}, "d4": 1.0},
        "q_unjudged": {"d1": 1.0},  # ignored
    }
    m = beir_metrics(run, qrels)
    assert set(m) == {"nDCG@10", "Recall@100", "MRR@10"}
    # q1: DCG = 2/log2(3) + 1/log2(5) (linear gains); IDCG = 2/log2(2) + 1/log2(3)
    ndcg_q1 = (2 / math.log2(3) + 1 / math.log2(5)) / (2 + 1 / math.log2(3))
    assert ndcg_q1 == pytest.approx(0.643322, abs=1e-6)
    assert m["nDCG@10"] == pytest.approx(ndcg_q1 / 3)
    # q1: first document with grade >= 1 at rank 2 (d2 is grade 0); q2: none in top 10
    assert m["MRR@10"] == pytest.approx(0.5 / 3)
    # q1 and q2 find all their relevant documents within 100; q3 nothing
    assert m["Recall@100"] == pytest.approx(2 / 3)


def test_tokenize():
    assert tokenize("Hello, World-2! naïve_case") == ["hello", "world", "2", "naïve", "case"]
    assert tokenize(" ,; ") == []


FILLER = [(f"f{i}", f"note {i} on subject s{i}") for i in range(20)]


def test_bm25_finds_its_document():
    # rank-bm25's idf is <= 0 for terms in half the documents or more, so the
    # collection needs filler to make the test words rare.
    docs = [
        ("cat", "The cat sat on the mat."),
        ("dog", "A dog barked at the mailman all morning."),
        ("fish", "Goldfish swim in a bowl of water."),
        ("dog2", "The dog slept."),
    ] + FILLER
    index = BM25Index(docs)
    assert len(index) == 24
    hits = index.search("Why did the dog bark at the mailman?", k=2)
    assert [i for i, _ in hits] == ["dog", "dog2"]
    assert hits[0][1] > hits[1][1] > 0
    assert index.search("goldfish bowl", 1)[0][0] == "fish"
    assert index.search("subject s7", 1)[0][0] == "f7"
    # exclude drops ids and still fills k
    assert [i for i, _ in index.search("dog", 2, exclude={"dog"})] == ["dog2", "cat"]
    assert len(index.search("dog", 100)) == 24
    assert index.search("zebra", 1)[0][1] == 0
    assert index.search("", 3) and index.search("", 3)[0][1] == 0


def test_bm25_ties_follow_insertion_order():
    docs = FILLER[:10] + [(f"d{i}", "alpha beta") for i in range(8)] + FILLER[10:]
    index = BM25Index(docs)
    hits = index.search("alpha", 5)
    assert [i for i, _ in hits] == ["d0", "d1", "d2", "d3", "d4"]
    assert len({s for _, s in hits}) == 1 and hits[0][1] > 0
