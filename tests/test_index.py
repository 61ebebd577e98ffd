"""Index writer and searcher on real HotpotQA paragraphs with a tiny random backbone."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from propdex.encoders import load_encoder
from propdex.indexer import ann
from propdex.indexer.build import IndexWriter
from propdex.indexer.manifest import read_manifest, sha256_file
from propdex.indexer.factory import ivf_lists
from propdex.indexer.readers import Skip
from propdex.indexer.store import ShardStore
from propdex.retriever import Searcher
from propdex.retriever.scoring import maxsim

ROOT = Path(__file__).resolve().parents[1]


def build(tmp_path, backbone, docs, name="ix", **kw):
    enc = load_encoder(kw.pop("encoder", "tokens"), backbone=backbone)
    return enc, IndexWriter(tmp_path / name, enc, shard_docs=kw.pop("shard_docs", 50), **kw).build(docs)


def test_build_writes_shards_manifest_and_exact_store(tmp_path, tiny, hotpot_docs):
    enc, manifest = build(tmp_path, tiny, hotpot_docs, store="float16")
    ix = tmp_path / "ix"
    assert manifest["status"] == "complete"
    assert manifest["counts"]["documents"] == len(hotpot_docs)
    assert len(manifest["shards"]) == -(-len(hotpot_docs) // 50)
    assert manifest["index"]["factory"] == "Flat"  # tiny corpus
    assert manifest["backbone"]["weights_sha256"] == enc.backbone.weights_hash
    for s in manifest["shards"]:
        assert sha256_file(ix / s["name"] / "meta.lmdb" / "data.mdb") == s["lmdb_sha256"]
        assert sha256_file(ix / s["name"] / s["index"]) == s["index_sha256"]
    assert not list(ix.glob("*.tmp"))
    # the store gives back exactly what was encoded
    doc = hotpot_docs[7]
    store = ShardStore(ix / manifest["shards"][0]["name"])
    ordinal = store.ordinal(doc.id)
    assert store.document(ordinal) == doc
    expected = enc.encode(enc.passages(doc))
    vec, sen = store.vectors([ordinal])[0]
    np.testing.assert_allclose(vec.astype(np.float32), np.concatenate([e.vectors for e in expected]), atol=2e-3)
    assert store.units(ordinal) == [u for e in expected for u in e.units]
    assert sen.tolist() == [[u.sentence, u.last_sentence] for e in expected for u in e.units]


def test_a_shard_is_written_a_few_documents_at_a_time(tmp_path, tiny, hotpot_docs, monkeypatch):
    """A shard's vectors never sit in memory together: the writer gets them
    ENCODE_DOCS documents at a time, and the shard is the one a single batch writes."""
    from propdex.indexer import encoding
    from propdex.indexer.store import ShardWriter

    _, whole = build(tmp_path, tiny, hotpot_docs[:40], name="whole", shard_docs=40, store="float16")
    batches = []
    real_add = ShardWriter.add

    def add(self, docs, encoded):
        batches.append(len(docs))
        real_add(self, docs, encoded)

    monkeypatch.setattr(encoding, "ENCODE_DOCS", 7)
    monkeypatch.setattr(ShardWriter, "add", add)
    _, streamed = build(tmp_path, tiny, hotpot_docs[:40], name="streamed", shard_docs=40, store="float16")
    assert batches == [7, 7, 7, 7, 7, 5]
    assert streamed["counts"] == whole["counts"] and len(streamed["shards"]) == 1
    a, b = ShardStore(tmp_path / "whole" / "shard-00000"), ShardStore(tmp_path / "streamed" / "shard-00000")
    assert b.offsets.tolist() == a.offsets.tolist()
    assert [b.document(o) for o in range(40)] == [a.document(o) for o in range(40)]
    assert [b.units(o) for o in range(40)] == [a.units(o) for o in range(40)]
    np.testing.assert_allclose(np.concatenate(list(b.iter_vectors())), np.concatenate(list(a.iter_vectors())), atol=2e-3)
    stored = np.load(tmp_path / "streamed" / "shard-00000" / "vectors.f16", mmap_mode="r")
    assert stored.shape == (streamed["counts"]["vectors"], tiny.dim)
    # A scan reads the file in bounded chunks, the same rows as the memory map.
    chunks = list(b.iter_vectors(rows=100))
    assert max(len(c) for c in chunks) == 100 and len(chunks) == -(-len(stored) // 100)
    np.testing.assert_array_equal(np.concatenate(chunks), np.asarray(stored, dtype=np.float32))
    # Long documents make smaller chunks: never more than ENCODE_PASSAGES passages, save one document alone.
    enc = load_encoder("tokens", backbone=tiny)
    passages = [len(enc.passages(d)) for d in hotpot_docs[:40]]
    cap = max(passages) + 1
    monkeypatch.setattr(encoding, "ENCODE_PASSAGES", cap)
    batches.clear()
    _, capped = build(tmp_path, tiny, hotpot_docs[:40], name="capped", shard_docs=40, store="float16")
    assert sum(batches) == 40 and max(batches) <= 7 and len(batches) > 6
    bounds = np.cumsum([0] + batches)
    assert all(sum(passages[a:b]) <= cap for a, b in zip(bounds[:-1], bounds[1:]))
    assert capped["counts"] == whole["counts"]


def test_search_levels_agree_with_brute_force_maxsim(tmp_path, tiny, hotpot_docs):
    enc, _ = build(tmp_path, tiny, hotpot_docs)
    query = "Which American director was born in 1966?"
    q = enc.encode_queries([query])[0].vectors
    brute = sorted(
        ((maxsim(q @ np.concatenate([e.vectors for e in enc.encode(enc.passages(d))]).T), d.id) for d in hotpot_docs),
        reverse=True,
    )
    with Searcher.load(tmp_path / "ix", encoder=enc) as s:
        hits = s.search(query, k=5, rerank=len(hotpot_docs), candidates=10_000, window=0)  # whole documents
        assert [h.doc_id for h in hits] == [d for _, d in brute[:5]]
        assert hits[0].score == pytest.approx(brute[0][0], abs=0.05)
        sentences = s.search(query, k=5, level="sentence")
        assert sentences[0].score <= hits[0].score + 1e-4  # a sentence's MaxSim never beats its document's
        for h in sentences:
            doc = next(d for d in hotpot_docs if d.id == h.doc_id)
            assert h.sentence_text == doc.sentence_text(h.sentence_index)
            assert all(0 <= a < b <= len(h.sentence_text) for a, b in h.spans)
        units = s.search(query, k=3, level="unit")
        assert len(units) == 3 and all(len(h.units) == 1 for h in units)


def test_window_scores_a_document_by_its_best_window_of_sentences(tmp_path, tiny, hotpot_docs):
    from propdex.retriever.scoring import window_maxsim

    enc, _ = build(tmp_path, tiny, hotpot_docs)
    query = "Which American director was born in 1966?"
    q = enc.encode_queries([query])[0].vectors

    def best_window(doc, window):
        encoded = enc.encode(enc.passages(doc))
        units = [u for e in encoded for u in e.units]
        sentences = np.array([(u.sentence, u.last_sentence) for u in units])
        return window_maxsim(q @ np.concatenate([e.vectors for e in encoded]).T, sentences, window)

    every = {"rerank": len(hotpot_docs), "candidates": 10_000}
    with Searcher.load(tmp_path / "ix", encoder=enc) as s:
        for window in (4, 30):
            brute = sorted(((best_window(d, window), d.id) for d in hotpot_docs), reverse=True)
            hits = s.search(query, k=5, window=window, **every)
            assert [h.doc_id for h in hits] == [d for _, d in brute[:5]]
            assert hits[0].score == pytest.approx(brute[0][0], abs=0.05)
        # By default a document scores by its best passage-sized window: the encoder's passage, in vectors.
        assert s.window == enc.passage_units == enc.max_length - 2
        default = sorted(((best_window(d, s.window), d.id) for d in hotpot_docs), reverse=True)
        assert [h.doc_id for h in s.search(query, k=5, **every)] == [d for _, d in default[:5]]
        # window=0 is the whole document, as is a window wider than any document.
        whole = [h.doc_id for h in s.search(query, k=5, window=0, **every)]
        assert whole == [h.doc_id for h in s.search(query, k=5, window=100_000, **every)]
        with pytest.raises(ValueError, match="window must be 0"):
            s.search(query, window=-1)


def test_duplicate_empty_and_bad_records_are_counted_not_indexed(tmp_path, tiny, hotpot_docs):
    docs = hotpot_docs[:5]
    records = [*docs, docs[0], Skip("malformed_json", "x.jsonl:3")]
    _, manifest = build(tmp_path, tiny, records, shard_docs=3)
    assert manifest["counts"]["documents"] == 5
    assert manifest["skipped"] == {"duplicate_id": 1, "malformed_json": 1}
    assert manifest["counts"]["inputs"] == 7


def test_refuses_foreign_directories_and_other_settings(tmp_path, tiny, hotpot_docs):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    enc = load_encoder("tokens", backbone=tiny)
    with pytest.raises(ValueError, match="not empty"):
        IndexWriter(foreign, enc)
    build(tmp_path, tiny, hotpot_docs[:5])
    with pytest.raises(ValueError, match="other settings"):
        IndexWriter(tmp_path / "ix", enc, shard_docs=7)
    with pytest.raises(ValueError, match="no index"):
        Searcher.load(foreign)
    with pytest.raises(ValueError, match="invalid FAISS factory"):
        IndexWriter(tmp_path / "other", enc, factory="IVFbanana")


def test_pq_factory_and_hnsw_backend_find_the_same_top_documents(tmp_path, tiny, hotpot_docs):
    enc, flat = build(tmp_path, tiny, hotpot_docs, name="flat")
    _, pq = build(tmp_path, tiny, hotpot_docs, name="pq", factory="IVF16,PQ8", store="float16")  # codes only route stage 1
    _, hnsw = build(tmp_path, tiny, hotpot_docs, name="hnsw", backend="hnsw")
    assert pq["index"]["factory"] == "IVF16,PQ8" and hnsw["index"]["factory"] == "HNSW"
    query = "the British rock band formed in London"
    results = {}
    for name in ("flat", "pq", "hnsw"):
        with Searcher.load(tmp_path / name, encoder=enc) as s:
            # Deep enough that stage 1 reaches the same documents: stage 2 ranks them exactly.
            results[name] = [h.doc_id for h in s.search(query, k=5, nprobe=16, candidates=512)]
    assert results["pq"] == results["flat"] and results["hnsw"] == results["flat"]
    pq_bytes = sum((tmp_path / "pq" / s["name"] / "index.faiss").stat().st_size for s in pq["shards"])
    flat_bytes = sum((tmp_path / "flat" / s["name"] / "index.faiss").stat().st_size for s in flat["shards"])
    assert pq_bytes < flat_bytes / 4


@pytest.mark.parametrize("factory", ["IVF16,Flat", "OPQ8,IVF16,PQ8"])
def test_nprobe_is_per_call(factory):
    """A call's nprobe decides what it probes and leaves the index's default alone."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = ann.fill(ann.train(factory, x), [x])
    q = x[:50] + 0.05 * rng.standard_normal((50, 32)).astype(np.float32)
    _, one = index.search(q, 10, params=ann.search_params(index, 1))
    _, all_lists = index.search(q, 10, params=ann.search_params(index, 16))
    _, default = index.search(q, 10)  # nprobe 1, FAISS's default: the calls above set nothing
    assert (one == default).all() and (one != all_lists).any()
    assert ann.search_params(ann.make_index("Flat", 32), 8) is None


def test_search_nprobe_does_not_stick(tmp_path, tiny, hotpot_docs):
    enc, _ = build(tmp_path, tiny, hotpot_docs, name="pq", factory="IVF16,PQ8")
    query = "the British rock band formed in London"
    with Searcher.load(tmp_path / "pq", encoder=enc, nprobe=1) as s:
        before = [(h.doc_id, h.score) for h in s.search(query, k=5, candidates=2, rerank=5)]
        wide = [(h.doc_id, h.score) for h in s.search(query, k=5, candidates=2, rerank=5, nprobe=16)]
        after = [(h.doc_id, h.score) for h in s.search(query, k=5, candidates=2, rerank=5)]
    assert after == before and wide != before
    with pytest.raises(ValueError, match="nprobe"):
        Searcher.load(tmp_path / "pq", encoder=enc, nprobe=0)


def test_default_nprobe_follows_the_lists_of_the_index_it_searches(tmp_path, tiny, hotpot_docs):
    from propdex.retriever.searcher import default_nprobe

    # Multi-vector queries probe 1/256 of the lists, 4 to 16.
    assert [default_nprobe(30, n) for n in (0, 64, 1024, 2048, 4096, 16384)] == [4, 4, 4, 8, 16, 16]
    # One-vector queries 512 lists, or every list of a smaller index (at least 128: FAISS stops at the lists it has).
    assert [default_nprobe(1, n) for n in (0, 64, 512, 1024, 2048, 4096, 65536)] == [128, 128, 512, 512, 512, 512, 512]
    enc, _ = build(tmp_path, tiny, hotpot_docs, name="pq", factory="IVF16,PQ8")
    flat, _ = build(tmp_path, tiny, hotpot_docs, name="flat")
    with Searcher.load(tmp_path / "pq", encoder=enc) as s, Searcher.load(tmp_path / "flat", encoder=flat) as f:
        assert (s.lists, f.lists) == (16, 0)


def test_pooled_vectors_are_probed_in_as_many_times_the_lists(tmp_path, tiny, hotpot_docs):
    """A stored vector that is the mean of m token states is probed in m
    times the lists a token is (capped by the lists there are); a
    one-vector query is not affected. Nuggets pool 1/r states a vector,
    pooled tokens F, comma chunks and plain tokens one."""
    from propdex.encoders import load_encoder
    from propdex.retriever.searcher import default_nprobe

    assert [default_nprobe(30, n, 4.0) for n in (0, 8, 512, 4096)] == [16, 8, 16, 64]
    assert default_nprobe(30, 1024, 10.0) == 40 and default_nprobe(1, 4096, 4.0) == 512
    pooled = {spec: load_encoder(name, backbone=tiny, **options).pooled_tokens for spec, (name, options) in {
        "nugget": ("nugget", {}), "nugget r=0.1": ("nugget", {"ratio": 0.1}), "nugget comma": ("nugget", {"select": "comma"}),
        "tokens": ("tokens", {}), "tokens pool=2": ("tokens", {"pool": 2})}.items()}
    assert pooled == {"nugget": 4.0, "nugget r=0.1": 10.0, "nugget comma": 1.0, "tokens": 1.0, "tokens pool=2": 2.0}
    enc, _ = build(tmp_path, tiny, hotpot_docs, name="pq", factory="IVF16,PQ8", encoder="nugget")
    queries = [d.text[:80] for d in hotpot_docs[::20]]
    with Searcher.load(tmp_path / "pq", encoder=enc) as s:
        ranked = {p: [[(h.doc_id, round(h.score, 5)) for h in s.search(q, k=5, nprobe=p)] for q in queries] for p in (None, 4, 16)}
    assert ranked[None] == ranked[16] != ranked[4]  # the default probes all 16 lists, not 16 // 256 -> 4


def test_default_rerank_is_smaller_for_multi_vector_queries():
    from propdex.retriever.searcher import default_rerank

    assert (default_rerank(30), default_rerank(1)) == (32, 64)


def test_a_page_is_the_same_whatever_k(tmp_path, tiny, hotpot_docs, hotpot_questions):
    """Stage 1's first `rerank` documents rank ahead of the rest, so asking
    for more hits never reorders the ones asked for before."""
    enc, _ = build(tmp_path, tiny, hotpot_docs, name="pq", factory="IVF16,PQ8")
    queries = [q["question"] for q in hotpot_questions[:12]]
    ahead = 0
    with Searcher.load(tmp_path / "pq", encoder=enc) as s:
        for q in queries:
            page = [(h.doc_id, h.score) for h in s.search(q, k=3, rerank=4)]
            deep = [(h.doc_id, h.score) for h in s.search(q, k=20, rerank=4)]
            assert deep[:3] == page and len(deep) == 20
            # Past the first four, a document may score above one of them: it was ranked after them.
            ahead += max(score for _, score in deep[4:]) > min(score for _, score in deep[:4])
            for level in ("sentence", "unit"):
                assert s.search(q, k=20, rerank=4, level=level)[:3] == s.search(q, k=3, rerank=4, level=level)
    assert ahead  # the tiers decided something: one sorted list would have reordered the page


def test_default_candidates_name_enough_documents_for_a_one_vector_query():
    from propdex.retriever.searcher import default_candidates

    assert default_candidates(10, 30, 32, 270.0) == 64  # multi-vector: per query vector
    assert default_candidates(10, 1, 64, 1.1) == 128  # two hits a re-scored document
    assert default_candidates(10, 1, 64, 46.0) == 64 * 16  # at most 16 a document
    assert default_candidates(100, 1, 200, 1.0) == 1000  # never under 10k


def test_default_factory_scales_with_the_corpus():
    assert ann.default_factory(1_000, 384) == "Flat"
    assert ann.default_factory(1_000_000, 384) == "IVF4096,PQ96x4fs"
    assert ann.default_factory(200_000, 64) == "IVF2048,PQ16x4fs"
    factory = ann.default_factory(60_000, 384)
    nlist = int(factory.split(",")[0][3:])
    assert 60_000 // nlist >= 39
    # From GRAPH_LISTS lists up, a query's vectors find their lists through an HNSW graph over the centroids;
    # the codes that stage 2 scores take twice their sqrt(N) lists there (halving what a probe streams).
    assert ann.default_factory(3_000_000, 384) == "IVF8192_HNSW32,PQ96x4fs"
    assert ann.default_factory(8_000_000, 384, "codes") == "OPQ192,IVF2048,PQ192x4"
    assert ann.default_factory(18_568_729, 384, "codes") == "OPQ192,IVF8192_HNSW32,PQ192x4"
    assert ann.default_factory(10**9, 384, "codes") == "OPQ192,IVF65536_HNSW32,PQ192x4"
    for n in (8_500_000, 18_568_729, 10**9):  # the graph's links count in the budget, which still holds
        shared = 4 * 384 * ivf_lists(ann.default_factory(n, 384, "codes")) * (1 + 2 * 32 / 384)
        assert 2 + 96 + (shared + 4 * 384 * 384 + 4 * 192 * 16 * 2) / n <= ann.CODE_BYTES


def _cli(args, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "propdex", *args], cwd=ROOT, env=env, **kw)


def test_sigkilled_build_resumes_to_the_same_index(tmp_path, tiny_dir):
    hotpot = Path(__file__).resolve().parents[2] / "shared/data/hotpotqa/hotpot_dev_distractor_600.json"
    args = lambda out: ["-q", "index", str(hotpot), "--out", str(out), "--backbone", str(tiny_dir),
                        "--shard-docs", "25", "--limit", "200", "--factory", "IVF8,PQ8", "--device", "cpu"]
    assert _cli(args(tmp_path / "whole"), stderr=subprocess.DEVNULL).wait() == 0

    victim = _cli(args(tmp_path / "killed"), stderr=subprocess.DEVNULL)
    manifest = tmp_path / "killed" / "manifest.json"
    deadline = time.time() + 120
    while time.time() < deadline:  # kill once at least two shards are committed
        if manifest.is_file() and len(json.loads(manifest.read_text())["shards"]) >= 2:
            break
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    killed_at = len(read_manifest(tmp_path / "killed")["shards"])
    assert read_manifest(tmp_path / "killed")["status"] == "encoding" and killed_at < 10
    assert _cli(args(tmp_path / "killed"), stderr=subprocess.DEVNULL).wait() == 0

    whole, resumed = read_manifest(tmp_path / "whole"), read_manifest(tmp_path / "killed")
    assert resumed["status"] == "complete"
    assert resumed["counts"] == whole["counts"]
    assert [s["lmdb_sha256"] for s in resumed["shards"]] == [s["lmdb_sha256"] for s in whole["shards"]]
    assert resumed["index"]["trained_sha256"] == whole["index"]["trained_sha256"]
    enc = load_encoder("tokens", backbone=str(tiny_dir), device="cpu", max_length=None)
    queries = ["Who directed the film?", "a band from England", "American politician born in 1950"]
    with Searcher.load(tmp_path / "whole", encoder=enc) as a, Searcher.load(tmp_path / "killed", encoder=enc) as b:
        for q in queries:
            assert [(h.doc_id, round(h.score, 4)) for h in a.search(q)] == [(h.doc_id, round(h.score, 4)) for h in b.search(q)]


def test_stage_times_split_a_search_into_its_stages(tmp_path, tiny, hotpot_docs):
    """Inside `stage_times` each stage's wall time is counted, and together
    they are most of the search's; outside it nothing is counted."""
    import time

    from propdex.retriever import stage_times

    enc, _ = build(tmp_path, tiny, hotpot_docs, shard_docs=100)
    with Searcher.load(tmp_path / "ix", encoder=enc) as s:
        s.search("the British rock band formed in London", k=5)
        with stage_times() as spent:
            started = time.perf_counter()
            for q in ("the British rock band formed in London", "an American film director", "a river in Europe"):
                s.search(q, k=5)
            wall = time.perf_counter() - started
        assert set(spent) == {"encode", "stage 1", "stage 2", "aggregate"}
        assert 0.5 * wall < sum(spent.values()) <= wall
        counted = dict(spent)
        s.search("a river in Europe", k=5, hybrid=True)
        assert spent == counted  # the block is over
        with stage_times() as fused:
            s.search("a river in Europe", k=5, hybrid=True)
        assert set(fused) == {"encode", "stage 1", "stage 2", "fusion"}


def test_a_small_corpus_trains_its_codec_quick_and_a_large_one_in_full(tmp_path, tiny, hotpot_docs, monkeypatch):
    """The size rule (README): `auto` trains quick below QUICK_BELOW vectors
    (k-means' sample, few OPQ refinements), in full from there; the manifest
    records which; an asked training wins."""
    from propdex.indexer import factory

    assert [factory.training("auto", n) for n in (60_000, factory.QUICK_BELOW - 1, factory.QUICK_BELOW)] == ["quick", "quick", "full"]
    assert factory.training("full", 1000) == "full" and factory.training("quick", 10**9) == "quick"
    with pytest.raises(ValueError, match="training must be one of"):
        factory.training("fast", 1000)
    assert factory.training_size("OPQ8,IVF512,PQ8", 10**6, "quick") == 40 * 512
    assert factory.training_size("OPQ8,IVF16,PQ8", 10**6, "quick") == 40 * 256  # an 8-bit PQ's 256 centroids
    assert factory.training_size("OPQ8,IVF512,PQ8", 10**6, "full") == 65_536
    assert factory.training_size("OPQ8,IVF512,PQ8", 5_000, "full") == 5_000
    assert factory.training_size("OPQ8,IVF512_HNSW32,PQ8", 10**6, "quick") == 40 * 512  # a graph over the lists
    trained = []
    real = ann.train
    monkeypatch.setattr(ann, "train", lambda f, sample, iterations=None: trained.append((len(sample), iterations)) or real(f, sample, iterations))
    for name, asked in (("auto", "auto"), ("full", "full")):
        _, m = build(tmp_path, tiny, hotpot_docs, name=name, factory="OPQ8,IVF16,PQ8", store="float16", training=asked)
        n = m["counts"]["vectors"]
        assert m["settings"]["training"] == asked and m["index"]["training"] == ("quick" if asked == "auto" else "full")
        assert m["index"]["trained_on"] == (min(n, 40 * 256) if asked == "auto" else min(n, 65_536))
    assert [t[1] for t in trained] == [factory.OPQ_ITERATIONS["quick"], factory.OPQ_ITERATIONS["full"]]


def test_lists_found_through_a_graph_are_all_probed_when_every_list_is_asked():
    """An `IVF{n}_HNSW32` index finds its lists through a graph that keeps
    only its efSearch best candidates. Asked for every list (as a starved
    filter asks), stage 1 must probe every list, and then rank exactly as
    an exhaustive scan of the same vectors; asked for a few, the graph's
    lists are the nearest centroids'."""
    from propdex.retriever.candidates import EVERY_LIST

    rng = np.random.default_rng(3)
    x = rng.standard_normal((6_000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[:5] + 0.1 * rng.standard_normal((5, 32)).astype(np.float32)
    index = ann.make_index("IVF128_HNSW32,Flat", 32)
    index.train(x)
    index.add(x)
    every = ann.assign(index, q, EVERY_LIST)
    assert every.lists.shape == (5, 128) and (np.sort(every.lists, axis=1) == np.arange(128)).all()
    exact = np.argsort(-(q @ x.T), axis=1, kind="stable")[:, :20]
    for scores, ids in (ann.search(index, q, 20, EVERY_LIST), ann.search_assigned(index, every, 20)):
        assert (ids == exact).all()
    fast = ann.make_index("IVF64,PQ16x4fs", 32)  # fast-scan sizes its buffers by nprobe: 2^30 of them would not fit
    fast.train(x)
    fast.add(x)
    assert ann.search_params(fast, EVERY_LIST).nprobe == 64
    assert (ann.search(fast, q, 20, EVERY_LIST)[1] == ann.search(fast, q, 20, 64)[1]).all()
    ivf = ann.faiss.extract_index_ivf(index)
    near = ann.assign(index, q, 8)
    centroids = ivf.quantizer.reconstruct_n(0, 128)
    best = np.argsort(-(q @ centroids.T), axis=1)[:, :8]
    assert np.mean([len(set(a) & set(b)) / 8 for a, b in zip(near.lists, best)]) >= 0.9


def test_a_documents_id_is_read_without_parsing_its_record(tmp_path, tiny, hotpot_docs):
    """Rankings, fusion and filters ask for ids alone (`ShardStore.doc_id`):
    the id must be the one the whole record gives, whatever quotes,
    backslashes or letters it holds."""
    from dataclasses import replace

    odd = ['say "when"', "C:\\temp\\", "ends in a backslash \\", "Zürich “Ω”", '\\"', '"']
    docs = [replace(d, id=i) for d, i in zip(hotpot_docs, odd)] + hotpot_docs[len(odd):20]
    _, manifest = build(tmp_path, tiny, docs)
    store = ShardStore(tmp_path / "ix" / manifest["shards"][0]["name"])
    assert [store.doc_id(o) for o in range(len(store))] == [store.document(o).id for o in range(len(store))]
    assert {store.doc_id(o) for o in range(len(store))} == {d.id for d in docs}


@pytest.mark.parametrize("hybrid", [False, True])
def test_a_search_reads_each_shown_document_once(tmp_path, tiny, hotpot_docs, monkeypatch, hybrid):
    """Sentence hits of one document share its one read, and candidates are
    named by id without reading their records: whole articles cost most of
    a hit's time."""
    build(tmp_path, tiny, hotpot_docs)
    reads = []
    real = ShardStore.document
    monkeypatch.setattr(ShardStore, "document", lambda self, o: reads.append(o) or real(self, o))
    with Searcher.load(tmp_path / "ix") as s:
        hits = s.search("Which magazine was started first?", k=30, level="sentence", hybrid=hybrid)
    shown = {h.doc_id for h in hits}
    assert len(shown) < len(hits)  # some document shows several sentences
    assert len(reads) == len(shown)


def test_the_second_hop_scores_only_the_documents_its_places_reach(tmp_path, tiny, hotpot_docs, hotpot_questions, monkeypatch):
    """At sentence level a hop document offers its best sentence, which takes
    scoring all of its sentences; documents are scored as the places reach
    them, and the hits are those of offering every hop document at once."""
    from propdex.retriever import fusion

    build(tmp_path, tiny, hotpot_docs)
    with Searcher.load(tmp_path / "ix") as s:
        real, asked = s.best_sentences, []
        monkeypatch.setattr(s, "best_sentences", lambda q, ids, **kw: asked.extend(ids) or real(q, ids, **kw))
        for question in [q["question"] for q in hotpot_questions[:6]]:
            asked.clear()
            hits = s.search(question, k=10, level="sentence", hybrid=True, hops=2)
            first = s.search(question, k=10, level="sentence", hybrid=True)
            second = [d for d, _ in s.lexical_search.hop(question, first[0].doc_id, 11)]
            offered = [(h.doc_id, h.sentence_index) for h in real(question, second)]
            expected = fusion.interleave([(h.doc_id, h.sentence_index) for h in first], offered)[:10]
            assert [(h.doc_id, h.sentence_index) for h in hits] == expected
            assert 0 < len(asked) < len(second)
