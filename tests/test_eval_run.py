"""`propdex eval` end to end on --limit runs of every task."""
import json

import pytest

from conftest import HOTPOT
from propdex.cli import main
from propdex.eval.render import markdown
from propdex.eval.runner import evaluate
from propdex.eval.scoring import TOP1_ORIGINS
from propdex.eval.systems import System, split_systems
from paths import DATA


def test_system_specs_parse_options():
    s = System.parse("tokens:factory=Flat:nprobe=8")
    assert (s.name, s.options) == ("tokens", {"factory": "Flat", "nprobe": "8"})
    assert s.mask_aware() and not System.parse("single").mask_aware() and System.parse("single:mask=1").mask_aware()


def test_a_factory_keeps_its_commas_in_a_list_of_systems():
    assert split_systems("tokens,tokens:store=codes:factory=IVF4096,PQ64,single,bm25") == [
        "tokens", "tokens:store=codes:factory=IVF4096,PQ64", "single", "bm25"]
    assert split_systems("single:factory=OPQ96,IVF4096,PQ96+bm25,nugget:ratio=0.1") == [
        "single:factory=OPQ96,IVF4096,PQ96+bm25", "nugget:ratio=0.1"]
    # Without a factory before it, a piece that names no system stays a system (and fails as one).
    assert split_systems("single,PQ64") == ["single", "PQ64"]


@pytest.mark.slow
def test_hotpotqa_limit_run_with_every_system(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["-q", "eval", "hotpotqa", str(HOTPOT), "--limit", "4", "--systems", "bm25,single,tokens:factory=Flat",
                 "--work", str(tmp_path / "work"), "--out", str(out), "--plot", str(tmp_path / "r.png"), "--device", "cpu"])
    assert code == 0
    result = json.loads(out.read_text())
    assert set(result["systems"]) == {"bm25", "single", "tokens:factory=Flat"}
    assert result["data"]["n_queries"] == 4 and "hotpot_dev_distractor_600.json" in result["data"]["sha256"]
    assert "torch" in result["versions"] and result["command"].startswith("propdex")
    for name, s in result["systems"].items():
        assert set(s["metrics"]) == {f"{m}@{k}" for m in ("Recall", "AllGold") for k in (2, 5, 10, 20, 50, 100)}
        assert all(0.0 <= v <= 1.0 for v in s["metrics"].values())
        assert s["metrics"]["Recall@100"] == 1.0  # 4 questions, ~40 paragraphs: everything is in the top 100
        assert s["latency_ms_p95"] >= s["latency_ms_p50"] > 0
    tokens = result["systems"]["tokens:factory=Flat"]
    assert tokens["vectors_per_doc"] > 20 * result["systems"]["single"]["vectors_per_doc"]
    assert tokens["bytes_per_vector"] == pytest.approx(4 * 384, rel=0.01)  # flat float32
    assert (tmp_path / "r.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "| tokens:factory=Flat |" in printed and "Recall@10" in printed


def test_a_search_window_reuses_the_index_of_its_system(tmp_path):
    result = evaluate("hotpotqa", str(HOTPOT), ["tokens:factory=Flat", "tokens:factory=Flat:window=1"], limit=4, work=tmp_path)
    whole, windowed = (result["systems"][s] for s in ("tokens:factory=Flat", "tokens:factory=Flat:window=1"))
    assert whole["index_dir"] == windowed["index_dir"]  # a search option: no second index is built
    assert windowed["encode_s"] == whole["encode_s"]
    assert windowed["metrics"]["Recall@100"] == whole["metrics"]["Recall@100"] == 1.0


def test_beir_limit_run_bm25():
    result = evaluate("beir", str(DATA / "beir" / "scifact"), ["bm25"], limit=20)
    m = result["systems"]["bm25"]["metrics"]
    assert set(m) == {"nDCG@10", "Recall@100", "MRR@10"}
    assert 0.4 < m["nDCG@10"] < 0.95  # BM25 is a strong baseline on SciFact
    assert "| bm25 |" in markdown(result)


def test_propsegment_levels_bm25():
    folder = str(DATA / "propsegment" / "v1")
    result = evaluate("propsegment", folder, ["bm25"])
    run = result["systems"]["bm25"]
    unit, top1 = run["metrics"], run["top1"]
    sentence = evaluate("propsegment", folder, ["bm25"], level="sentence")["systems"]["bm25"]["metrics"]
    doc = evaluate("propsegment", folder, ["bm25"], level="doc")["systems"]["bm25"]["metrics"]
    assert set(unit) == {"P@1", "R@5", "R@10", "R@20"}
    # coarser units are easier to hit: recall grows with the level
    assert unit["R@5"] < sentence["R@5"] < doc["R@5"]
    assert 0.2 < unit["P@1"] < 0.4
    # every top-1 has one origin; past the query's own sentence, a sibling's
    # place goes to the next proposition, which gains at most the sibling top-1s
    assert sum(top1[o] for o in TOP1_ORIGINS) == 349
    assert top1["gold"] == round(349 * unit["P@1"])
    assert top1["gold"] < top1["gold_past_siblings"] <= top1["gold"] + top1["query_sentence"]
    # nested segmentations: BM25 ranks a sibling that repeats the query's words first
    assert 0 < top1["sibling_contains_query"] < top1["query_sentence"]
    assert f"| bm25 | {top1['gold']} | {top1['query_sentence']} |" in markdown(result)
    assert markdown(result).count(f"| {top1['sibling_contains_query']} |") >= 1


def test_covers_compares_characters_not_span_boundaries():
    from propdex.eval.scoring import _covers

    assert _covers([(0, 10)], [(2, 4), (6, 9)])
    assert _covers([(0, 5), (5, 9)], [(3, 7)])  # adjacent spans cover a span across their seam
    assert not _covers([(0, 5), (6, 9)], [(3, 7)])
    assert not _covers([(2, 4)], [(0, 10)])


def test_malformed_spec_names_itself_and_the_grammar():
    with pytest.raises(ValueError, match=r"'crossthought:control'.*option=value.*grammar"):
        System.parse("crossthought:control")
    assert not System.parse("tokens:title=0").titles() and System.parse("tokens").titles()


def test_a_fusion_is_a_hybrid_search_and_other_fusions_are_refused(tmp_path):
    from propdex.retriever import fusion

    result = evaluate("hotpotqa", str(HOTPOT), ["single", "single+bm25", "single+bm25:fusion=minmax"], limit=4, work=tmp_path)
    systems = result["systems"]
    assert systems["single+bm25"]["fusion"] == "rrf" and systems["single+bm25:fusion=minmax"]["fusion"] == "minmax"
    assert "fusion" not in systems["single"]
    # One index serves all three: fusion is a search setting.
    assert len({s["index_dir"] for s in systems.values()}) == 1
    for name in ("single+bm25", "single+bm25:fusion=minmax"):
        assert 0 < systems[name]["metrics"]["Recall@10"] <= 1
    assert fusion.rrf([["x"], ["x"]])[0][1] == pytest.approx(2 / 61)
    for spec in ("bm25+bm25:title=0", "single+tokens", "single+tokens+bm25", "bm25+single", "single+bm25:title=0"):
        with pytest.raises(ValueError, match="search --hybrid"):
            evaluate("hotpotqa", str(HOTPOT), [spec], limit=2, work=tmp_path)


def test_second_hop_spec_adds_documents_the_question_does_not_name():
    result = evaluate("hotpotqa", str(HOTPOT), ["bm25", "bm25:hops=2"], limit=40)
    one, two = result["systems"]["bm25"], result["systems"]["bm25:hops=2"]
    assert two["hops"] == 2 and "hops" not in one
    # Places 1-4 are the first hop's, so AllGold@2 cannot change; on these
    # questions the second hop completes pairs the first missed.
    assert two["metrics"]["AllGold@2"] == one["metrics"]["AllGold@2"]
    assert two["metrics"]["AllGold@10"] > one["metrics"]["AllGold@10"]
    with pytest.raises(ValueError, match="hops must be 1 or 2"):
        evaluate("hotpotqa", str(HOTPOT), ["bm25:hops=3"], limit=5)
    with pytest.raises(ValueError, match="fusion= needs systems"):
        evaluate("hotpotqa", str(HOTPOT), ["bm25:fusion=minmax"], limit=5)


def test_second_hop_at_sentence_level_offers_each_hop_documents_best_sentence(tmp_path):
    result = evaluate("hotpotqa", str(HOTPOT), ["single", "single:hops=2", "single+bm25:hops=2"], level="sentence", limit=40, work=tmp_path)
    one, two = result["systems"]["single"], result["systems"]["single:hops=2"]
    assert two["hops"] == 2 and "hops" not in one and two["index_dir"] == one["index_dir"]
    assert two["metrics"]["Recall@2"] == one["metrics"]["Recall@2"]  # places 1-4 are the first hop's
    assert two["metrics"]["Recall@10"] > one["metrics"]["Recall@10"]
    assert result["systems"]["single+bm25:hops=2"]["hops"] == 2  # the search fuses and hops at sentence level too
    with pytest.raises(ValueError, match="BM25 alone ranks documents"):
        evaluate("hotpotqa", str(HOTPOT), ["bm25:hops=2"], level="sentence", limit=5, work=tmp_path)


def test_cached_index_whose_spec_changed_meaning_is_neither_reused_nor_in_the_way(tmp_path, tiny, hotpot_docs):
    from propdex.encoders import load_encoder
    from propdex.indexer.build import IndexWriter
    from propdex.eval.indexes import cached_index_dir

    untitled = load_encoder("single", backbone=tiny, title=False)
    first = cached_index_dir(tmp_path, "single", untitled)
    assert first == tmp_path / "single"
    IndexWriter(first, untitled).build(hotpot_docs[:3])
    assert cached_index_dir(tmp_path, "single", load_encoder("single", backbone=tiny, title=False)) == first
    # The same label now means another encoder (titles on): a directory of its own, built without error.
    titled = load_encoder("single", backbone=tiny)
    moved = cached_index_dir(tmp_path, "single", titled)
    assert moved != first and moved.parent == tmp_path and moved.name.startswith("single-")
    IndexWriter(moved, titled).build(hotpot_docs[:3])
    assert cached_index_dir(tmp_path, "single", titled) == moved


def test_cached_codes_index_built_by_an_old_default_or_layout_is_neither_reused_nor_in_the_way(tmp_path, tiny):
    """A `store=codes` index from an older codes rule (another default factory)
    or layout (FAISS index files, 8-byte ids, codes without their scales), or
    built with the other store, is not what the spec builds now."""
    import json

    from propdex.encoders import load_encoder
    from propdex.eval.indexes import cached_index_dir
    from propdex.indexer import ann

    encoder = load_encoder("tokens", backbone=tiny)
    n = 610_000
    now = ann.default_factory(n, encoder.dim, "codes")

    def cached(factory: str, index_file: str, training: str | None = "quick", scaled: bool = True) -> None:
        (tmp_path / "codes").mkdir(exist_ok=True)
        index = {"backend": "faiss", "factory": factory, "vector_norm": 1.0} | ({"training": training} if training else {})
        index |= {"scaled_codes": True} if scaled else {}
        (tmp_path / "codes" / "manifest.json").write_text(json.dumps({
            "format": "propdex-index", "version": 2, "status": "complete", "encoder": encoder.config(), "counts": {"vectors": n},
            "settings": {"store": "codes"}, "index": index, "shards": [{"name": "shard-00000", "index": index_file}]}))

    cached(now, ann.CODES_FILE)
    assert cached_index_dir(tmp_path, "codes", encoder, "codes") == tmp_path / "codes"
    # Codes written before each row kept its scale: stage 2 reads them the slower way, so their timings are not today's.
    cached(now, ann.CODES_FILE, scaled=False)
    assert cached_index_dir(tmp_path, "codes", encoder, "codes").name.startswith("codes-")
    # Trained in full before the size rule: what `training=full` builds, not what today's default does at this size.
    cached(now, ann.CODES_FILE, training=None)
    assert cached_index_dir(tmp_path, "codes", encoder, "codes", training="full") == tmp_path / "codes"
    assert cached_index_dir(tmp_path, "codes", encoder, "codes").name.startswith("codes-")
    cached(now, ann.CODES_FILE)
    cached("OPQ87_348,IVF1024,PQ87", ann.CODES_FILE)  # an older rule's choice
    old_rule = cached_index_dir(tmp_path, "codes", encoder, "codes")
    assert old_rule.name.startswith("codes-")
    # ...unless the spec names that factory itself: then the index is what it asks for.
    assert cached_index_dir(tmp_path, "codes", encoder, "codes", factory="OPQ87_348,IVF1024,PQ87") == tmp_path / "codes"
    cached(now, "index.faiss")  # today's factory in yesterday's layout
    old_layout = cached_index_dir(tmp_path, "codes", encoder, "codes")
    assert old_layout.name.startswith("codes-") and old_layout != old_rule
    # A float16 spec is never answered by a codes index (float16 was the default store before codes).
    cached(now, ann.CODES_FILE)
    other_store = cached_index_dir(tmp_path, "codes", encoder, "float16", factory=now)
    assert other_store.name.startswith("codes-") and other_store not in (old_rule, old_layout)


def test_cached_binary_index_of_another_hashing_map_is_not_reused(tmp_path, tiny):
    """`store=binary` without `hashing=` means today's default map: an index
    built under the learned heads (the default before pca) is another index."""
    import json

    from propdex.encoders import load_encoder
    from propdex.eval.indexes import cached_index_dir
    from propdex.indexer import binary

    encoder = load_encoder("tokens", backbone=tiny)
    (tmp_path / "bits").mkdir()
    for method, reused in (("pca", True), ("learned", False)):
        (tmp_path / "bits" / "manifest.json").write_text(json.dumps({
            "format": "propdex-index", "version": 2, "status": "complete", "encoder": encoder.config(), "counts": {"vectors": 1000},
            "settings": {"store": "binary"}, "shards": [{"name": "shard-00000", "index": binary.BITS_FILE}],
            "index": {"backend": "faiss", "factory": "BFlat", "hashing": {"method": method, "bits": 256}}}))
        assert (cached_index_dir(tmp_path, "bits", encoder, "binary") == tmp_path / "bits") is reused, method
        assert (cached_index_dir(tmp_path, "bits", encoder, "binary", hashing=method) == tmp_path / "bits")


def test_beir_metrics_score_the_ranking_in_the_order_returned():
    """A searcher's hits past its first page may score above the page's
    last; eval measures the order the user gets, not a re-sort by score."""
    from propdex.eval.datasets import Task
    from propdex.eval.scoring import Outcome, score

    task = Task("t", corpus=[], queries=[], gold_docs={"q": {"b"}}, qrels={"q": {"b": 1}})
    returned = Outcome({"q": ["b", "a", "c"]}, {"q": [0.5, 0.9, 0.1]}, [1.0], {})
    assert score(task, "doc", returned)["MRR@10"] == 1.0  # sorted by score, "a" would come first: 0.5


@pytest.mark.slow
def test_context_figures_are_those_of_index_context(tmp_path):
    """eval --words scores the contexts `Index.context` returns: recomputed
    from the product's own call, the figures agree question by question."""
    import propdex
    from propdex.eval.datasets import load_hotpotqa
    from propdex.eval.metrics import holds_answer

    result = evaluate("hotpotqa", str(HOTPOT), ["tokens+bm25"], level="sentence", limit=10, work=tmp_path, words=(40, 120))
    figures = result["systems"]["tokens+bm25"]["context"]
    task = load_hotpotqa(HOTPOT, limit=10)
    index = propdex.Index.open(result["systems"]["tokens+bm25"]["index_dir"])
    for words in (40, 120):
        answered, scored, support = 0, 0, 0.0
        for q in task.queries:
            context = index.context(q.text, words, level="sentence", hybrid=True, hops=1)
            assert context.words <= words
            gold = task.gold_sentences[q.id]
            support += len(gold & {(c.doc_id, c.sentence) for c in context.citations if c.whole}) / len(gold)
            if task.answers[q.id].lower() not in ("yes", "no"):
                scored += 1
                answered += holds_answer(context.text, task.answers[q.id])
        assert figures[f"answer@{words}"] == pytest.approx(answered / scored)
        assert figures[f"support@{words}"] == pytest.approx(support / len(task.queries))
    assert figures["support@120"] > figures["support@40"]  # more words hold more supporting sentences here
    index.close()


def test_exact_reference_ranks_as_the_searcher_rescoring_every_document(tmp_path, tiny, hotpot_docs):
    """exact=1's blocked scan (eval.exact) is the Searcher's stage 2 over every document, with no stage 1."""
    import numpy as np

    from propdex.encoders import load_encoder
    from propdex.eval.exact import exact_rankings
    from propdex.indexer.build import IndexWriter
    from propdex.retriever import Searcher

    encoder = load_encoder("tokens", backbone=tiny)
    IndexWriter(tmp_path / "ix", encoder, store="float16").build(hotpot_docs[:30])
    questions = ["Which magazine was started first?", "Who directed the film about the river?"]
    every = [d.id for d in hotpot_docs[:30]]
    skip = {every[3]}
    ranked = exact_rankings(tmp_path / "ix", [e.vectors.astype(np.float32) for e in encoder.encode_queries(questions)], 12,
                            exclude=[skip, set()])
    searcher = Searcher.load(tmp_path / "ix", encoder=encoder)
    expected = searcher.search_batch(questions, k=12, within=[every, every], exclude=[skip, set()], window=0)
    searcher.close()
    for mine, theirs in zip(ranked, expected):
        assert [d for d, _ in mine] == [h.doc_id for h in theirs]
        assert np.allclose([s for _, s in mine], [h.score for h in theirs], atol=1e-4)
    assert every[3] not in [d for d, _ in ranked[0]]


def test_exact_reference_needs_a_float16_index(tmp_path):
    with pytest.raises(ValueError, match="exact=1 ranks documents by MaxSim over a float16 index"):
        evaluate("hotpotqa", str(HOTPOT), ["tokens:factory=Flat:exact=1"], limit=2, work=tmp_path)
