"""`propdex bench --peers`: propdex, exact MaxSim and PLAID side by side on real SciFact vectors."""
import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
from paths import DATA

from propdex.cli import main

SCIFACT = DATA / "beir" / "scifact"


def tiny_beir(folder: Path, n_docs: int) -> Path:
    """The first `n_docs` SciFact abstracts and the test queries judged against them."""
    (folder / "qrels").mkdir(parents=True)
    lines = (SCIFACT / "corpus.jsonl").read_text().splitlines()[:n_docs]
    ids = {json.loads(line)["_id"] for line in lines}
    (folder / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    header, *judged = (SCIFACT / "qrels" / "test.tsv").read_text().splitlines()
    judged = [j for j in judged if j.split("\t")[1] in ids]
    (folder / "qrels" / "test.tsv").write_text("\n".join([header, *judged]) + "\n")
    qids = {j.split("\t")[0] for j in judged}
    queries = [q for q in (SCIFACT / "queries.jsonl").read_text().splitlines() if json.loads(q)["_id"] in qids]
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n")
    return folder


def fake_fast_plaid(folder: Path, search_module: str) -> str:
    """An interpreter (a shell wrapper around this one) whose `fast_plaid.search` is `search_module`'s text."""
    import sys

    (folder / "site" / "fast_plaid" / "search").mkdir(parents=True)
    (folder / "site" / "fast_plaid" / "__init__.py").write_text("")
    (folder / "site" / "fast_plaid" / "search" / "__init__.py").write_text(search_module)
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{folder / "site"}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return str(python)


def test_a_peer_that_imports_but_is_broken_is_skipped_before_any_work(tmp_path):
    """A fast-plaid install whose compiled part fails to load (seen on a GPU
    machine: usearch without its numkong) is skipped with the import's own
    error up front; a missing interpreter or package says how to install it."""
    from propdex.eval.peers import missing_peers

    broken = fake_fast_plaid(tmp_path / "broken", 'raise ImportError("compiled.so: undefined symbol: nk_configure_thread")\n')
    working = fake_fast_plaid(tmp_path / "working", "class FastPlaid: pass\n")
    assert missing_peers(["fast-plaid"], working) == {}
    assert missing_peers(["fast-plaid"], broken) == {
        "fast-plaid": f"fast_plaid does not import under {broken}: ImportError: compiled.so: undefined symbol: nk_configure_thread"}
    nowhere = str(tmp_path / "no-env" / "bin" / "python")
    assert missing_peers(["fast-plaid"], nowhere)["fast-plaid"].startswith(f"fast_plaid is not importable by {nowhere} (")
    with pytest.raises(ValueError, match="unknown peers"):
        missing_peers(["plaid"], working)


def test_side_by_side_hands_over_each_system_as_it_is_measured(tmp_path, monkeypatch):
    """The bench keeps each system's figures on disk as they come
    (`progress`), so a run that dies later (here exact MaxSim, out of
    memory) has not thrown away the rounds already measured."""
    from propdex.eval import peers

    monkeypatch.setattr(peers, "read_manifest", lambda path: {})
    monkeypatch.setattr(peers, "store_of", lambda manifest: "float16")

    def child(fn, **kwargs):
        if fn is peers.measure_exact:
            raise RuntimeError("bench: measure_exact failed (exit 1): MemoryError")
        return {"nDCG@10": 0.5, "p50_ms": 10.0 + len(seen), "peak_rss_mb": 1.0, "window": kwargs["window"]}

    seen: list[dict] = []
    monkeypatch.setattr(peers, "in_child", child)
    with pytest.raises(RuntimeError, match="MemoryError"):
        peers.side_by_side(tmp_path, [("q1", "a query")], {}, [], threads=1, work=tmp_path, rounds=2,
                           progress=lambda so_far: seen.append(json.loads(json.dumps(so_far))))
    assert len(seen) == 4  # two systems (the index at its window and whole documents), two rounds each
    rounds = seen[-1]["propdex_rounds"]
    assert set(rounds) == {"propdex", "propdex:window=0"} and [len(r) for r in rounds.values()] == [2, 2]
    assert [r["p50_ms"] for r in rounds["propdex"]] == [10.0, 12.0]


def test_bench_side_by_side_skips_a_peer_that_is_not_installed(tmp_path, monkeypatch, caplog):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "colbert" else real(name, *a))
    corpus = tiny_beir(tmp_path / "beir", 40)
    out, codes = tmp_path / "bench.json", tmp_path / "codes"
    assert main(["-q", "index", str(corpus), "--encoder", "tokens", "--store", "codes", "--out", str(codes)]) == 0
    # fast-plaid imports but fails when it runs: the systems measured before it are kept, the failure recorded, the run fails.
    failing = fake_fast_plaid(tmp_path / "env", "class FastPlaid:\n    def __init__(self, **kw):\n"
                                                "        raise RuntimeError('no kernel image for this device')\n")
    monkeypatch.setenv("PROPDEX_CACHE", str(tmp_path / "cache"))  # the ONNX export, made once for every system's process
    assert main(["bench", "--corpus", str(corpus), "--sections", "", "--peers", "colbert-plaid,fast-plaid", "--threads", "1",
                 "--fast-plaid-python", failing, "--work", str(tmp_path / "work"), "--also", str(codes), "--out", str(out),
                 "--query-runtime", "onnx", "--rounds", "2"]) == 1
    result = json.loads(out.read_text())
    assert "fast-plaid" not in result["systems"] and "fast-plaid" not in result["skipped"] and "unfinished" not in result
    assert "no kernel image for this device" in result["failed"]["fast-plaid"]  # the cause, from two processes down
    # Every system encodes its queries on the runtime asked for, so only their search differs.
    assert result["query_runtime"] == "onnx"
    assert {e["query_runtime"] for e in [*result["systems"].values(), result["exact"]]} == {"onnx"}
    assert "skipping peer colbert-plaid: colbert is not installed" in caplog.text
    assert result["skipped"] == {"colbert-plaid": "colbert is not installed (pip install 'propdex[bench]')"}
    codes = "propdex:store=codes:factory=Flat"
    assert set(result["systems"]) == {"propdex", "propdex:window=0", codes, f"{codes}:window=0"} and result["threads"] == 1
    # The propdex systems took turns twice; each is credited with its median round (of two: the faster).
    assert result["rounds"] == 2
    for entry in (result["systems"][name] for name in ("propdex", "propdex:window=0", codes, f"{codes}:window=0")):
        assert len(entry["p50_ms_rounds"]) == 2 and entry["p50_ms"] == min(entry["p50_ms_rounds"])
    assert result["systems"][codes]["window"] == 254 and result["systems"][codes]["nDCG@10"] == result["systems"]["propdex"]["nDCG@10"]
    assert result["systems"]["propdex"]["window"] == 254 and result["systems"]["propdex:window=0"]["window"] == 0
    for entry in (result["systems"]["propdex"], result["exact"]):
        assert set(entry) >= {"nDCG@10", "bytes_per_vector", "p50_ms", "p95_ms", "build_s", "peak_rss_mb"}
        assert 0 < entry["nDCG@10"] <= 1 and entry["peak_rss_mb"] > 100
    assert result["systems"]["propdex"]["p50_ms"] <= result["systems"]["propdex"]["p95_ms"]
    assert 0 < result["systems"]["propdex"]["query_encode_p50_ms"] < result["systems"]["propdex"]["p50_ms"]
    assert result["exact"]["scan_ms_per_query"] > 0
    # A tiny corpus gets a Flat index: two stages re-score every candidate exactly, so whole documents agree with exact MaxSim.
    assert result["systems"]["propdex"]["factory"] == "Flat"
    assert result["systems"]["propdex:window=0"]["nDCG@10"] == result["exact"]["nDCG@10"]
    # Flat float32 index + float16 copy + offsets: 6 bytes a dimension and a little more.
    assert 6 * 384 < result["systems"]["propdex"]["bytes_per_vector"] < 6 * 384 + 64
    # The same corpus indexed with store=codes: Flat holds the float32 vectors once, so nothing is lost.
    same = result["systems"]["propdex:store=codes:factory=Flat:window=0"]
    assert same["nDCG@10"] == result["exact"]["nDCG@10"] and same["store"] == "codes"
    assert 4 * 384 < same["bytes_per_vector"] < 4 * 384 + 64


def test_peer_vectors_from_the_encoder_are_the_vectors_an_index_stores(tmp_path, caplog):
    """`--peer-vectors encoder` (a GPU machine without FAISS) skips the
    index: exact MaxSim must then rank what the index-based exact ranks."""
    from propdex.eval.datasets import load_beir
    from propdex.eval.exact import measure_exact
    from propdex.eval.peer_vectors import write_vectors
    from propdex.indexer.manifest import read_manifest

    corpus = tiny_beir(tmp_path / "beir", 40)
    out, work = tmp_path / "bench.json", tmp_path / "work"
    nowhere = str(tmp_path / "no-env" / "bin" / "python")
    assert main(["bench", "--corpus", str(corpus), "--sections", "", "--peers", "fast-plaid", "--peer-vectors", "encoder",
                 "--device", "cpu", "--threads", "1", "--fast-plaid-python", nowhere, "--work", str(work), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert f"skipping peer fast-plaid: fast_plaid is not importable by {nowhere}" in caplog.text
    assert result["systems"] == {} and "--fast-plaid-python" in result["skipped"]["fast-plaid"]
    made = result["vectors"]
    assert made["from"] == "encoder" and made["documents"] == 40 and made["encode_docs_per_s"] > 0
    assert made["device"].startswith("CPU") and made["dtype"] == "torch.float32"

    index = tmp_path / "ix"
    assert main(["-q", "index", str(corpus), "--encoder", "tokens", "--store", "float16", "--out", str(index)]) == 0
    manifest = read_manifest(index)
    assert made["vectors"] == manifest["counts"]["vectors"]
    stored = tmp_path / "stored"
    stored.mkdir()
    write_vectors(index, manifest, stored)
    # The same rows in the same order (batches differ only in padding).
    np.testing.assert_allclose(np.load(work / "peers" / "encoded" / "documents.npy").astype(np.float32),
                               np.load(stored / "documents.npy").astype(np.float32), atol=2e-3)
    np.testing.assert_array_equal(np.load(work / "peers" / "encoded" / "doclens.npy"), np.load(stored / "doclens.npy"))
    task = load_beir(corpus)
    exact = measure_exact(str(index), [(q.id, q.text) for q in task.queries], task.qrels, 1)
    assert result["exact"]["nDCG@10"] == exact["nDCG@10"] > 0
    assert result["exact"]["queries"] == len(task.queries) and result["exact"]["p50_ms"] <= result["exact"]["p95_ms"]


def test_peer_vectors_from_the_encoder_refuse_what_needs_an_index(tmp_path, capsys):
    for peers, sections in (("colbert-plaid", ""), ("fast-plaid", "search")):
        assert main(["bench", "--corpus", str(tmp_path), "--sections", sections, "--peers", peers, "--peer-vectors", "encoder",
                     "--work", str(tmp_path)]) == 2
        assert "bench --peer-vectors encoder builds no propdex index" in capsys.readouterr().err
    assert main(["bench", "--corpus", str(tmp_path), "--sections", "", "--peer-vectors", "encoder", "--work", str(tmp_path)]) == 2
    assert "give --peers fast-plaid with it" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_child_reports_its_own_peak_memory_not_its_parents(tmp_path):
    """Every system side by side runs in a child of the bench, which may
    have built an index first: getrusage's ru_maxrss carries the parent's
    peak through fork and exec, so a child would report the build's."""
    import subprocess
    import sys

    from propdex.indexer.build import peak_rss_mb

    ballast = np.ones(400 << 20, np.uint8)  # 400 MB resident here
    assert peak_rss_mb() > 400
    code = "from propdex.indexer.build import peak_rss_mb; print(peak_rss_mb())"
    child = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0 < child < 300, child
    peer = "import sys; sys.path.insert(0, sys.argv[1]); from fast_plaid_peer import peak_rss_mb; print(peak_rss_mb())"
    child = float(subprocess.run([sys.executable, "-c", peer, str(Path(__file__).parents[1] / "eval")], capture_output=True,
                                 text=True, check=True).stdout)
    assert 0 < child < 100, child
    del ballast


def test_a_system_is_credited_with_its_median_round_and_must_rank_alike_in_each():
    from propdex.eval.peers import median_round

    rounds = [{"nDCG@10": 0.7, "p50_ms": p, "peak_rss_mb": r} for p, r in ((31.0, 900.0), (27.5, 950.0), (29.0, 920.0))]
    assert median_round(rounds) == {"nDCG@10": 0.7, "p50_ms": 29.0, "peak_rss_mb": 950.0, "p50_ms_rounds": [31.0, 27.5, 29.0]}
    with pytest.raises(RuntimeError, match="ranked differently"):
        median_round([*rounds, {"nDCG@10": 0.71, "p50_ms": 30.0, "peak_rss_mb": 900.0}])


def test_an_unknown_peer_is_refused_before_any_work(tmp_path, capsys):
    assert main(["bench", "--corpus", str(tmp_path), "--sections", "", "--peers", "faiss-magic", "--work", str(tmp_path)]) == 2
    assert "unknown peers ['faiss-magic']; choose from colbert-plaid, fast-plaid" in capsys.readouterr().err


def test_plaid_peer_is_built_from_our_vectors_and_ranks_like_exact_maxsim(tmp_path, minilm):
    pytest.importorskip("colbert", reason="the PLAID peer needs the [bench] extra")
    from propdex.encoders import load_encoder
    from propdex.eval.datasets import load_beir
    from propdex.eval.exact import measure_exact
    from propdex.eval.peer_colbert import measure_plaid
    from propdex.indexer.build import IndexWriter
    from propdex.indexer.readers import read_corpus

    corpus = tiny_beir(tmp_path / "beir", 60)
    index = tmp_path / "ix"
    IndexWriter(index, load_encoder("tokens", backbone=minilm), factory="IVF32,PQ48", store="float16").build(read_corpus([corpus]))
    task = load_beir(corpus)
    queries = [(q.id, q.text) for q in task.queries]
    plaid = measure_plaid(str(index), queries, task.qrels, 1, str(tmp_path / "plaid"))
    exact = measure_exact(str(index), queries, task.qrels, 1)
    # 2-bit residuals at 384 dims: 96 bytes a vector, its centroid id 4 more, then the IVF and doclens.
    assert 100 < plaid["bytes_per_vector"] < 130
    assert plaid["nDCG@10"] >= exact["nDCG@10"] - 0.1


FAST_PLAID_PYTHON = os.environ.get("PROPDEX_FAST_PLAID_PYTHON")


@pytest.mark.skipif(not FAST_PLAID_PYTHON, reason="fast-plaid pins torch==2.11.0: set PROPDEX_FAST_PLAID_PYTHON to a Python that has it")
def test_fast_plaid_peer_is_built_in_its_own_environment_from_our_vectors(tmp_path, minilm):
    from propdex.encoders import load_encoder
    from propdex.eval.datasets import load_beir
    from propdex.eval.exact import measure_exact
    from propdex.eval.peer_fast_plaid import measure_fast_plaid
    from propdex.indexer.build import IndexWriter
    from propdex.indexer.readers import read_corpus

    corpus = tiny_beir(tmp_path / "beir", 60)
    index = tmp_path / "ix"
    IndexWriter(index, load_encoder("tokens", backbone=minilm), store="float16").build(read_corpus([corpus]))
    task = load_beir(corpus)
    queries = [(q.id, q.text) for q in task.queries]
    peer = measure_fast_plaid(str(index), queries, task.qrels, 1, str(tmp_path / "fp"), FAST_PLAID_PYTHON, "cpu")
    exact = measure_exact(str(index), queries, task.qrels, 1)
    # What it wrote for the peer is every stored vector, in index order.
    n = json.loads((index / "manifest.json").read_text())["counts"]["vectors"]
    assert np.load(tmp_path / "fp" / "documents.npy", mmap_mode="r").shape == (n, 384)
    assert np.load(tmp_path / "fp" / "doclens.npy").sum() == n
    assert peer["queries"] == len(queries) and peer["search_p50_ms"] < peer["p50_ms"] <= peer["p95_ms"]
    assert peer["device"] == "cpu" and peer["versions"]["torch"].startswith("2.11")
    # 2-bit residuals at 384 dims are 96 bytes a vector; codes, IVF and (on so few vectors) centroids add the rest.
    assert 96 < peer["bytes_per_vector"] < 200
    assert peer["nDCG@10"] >= exact["nDCG@10"] - 0.1


def test_the_exact_scan_is_maxsim_over_every_document_in_any_grouping(tmp_path):
    """Groups of queries and blocks of rows are how the scan bounds memory;
    no grouping may change a score. Documents without vectors score -inf."""
    from propdex.encoders.units import Document, Encoded, Kind, Unit
    from propdex.eval.exact import maxsim_every_document
    from propdex.indexer.store import ShardStore, ShardWriter

    rng = np.random.default_rng(0)
    sizes = [300, 0, 700, 1, 120, 500, 0, 90]  # 1,711 rows: more than one block of 1,024
    docs = [Document(f"d{i}", "text.", sentences=((0, 5),)) for i in range(len(sizes))]
    vectors = [rng.standard_normal((n, 8)).astype(np.float16) for n in sizes]
    encoded = [Encoded(v.astype(np.float32), [Unit(f"d{i}", 0, ((0, 4),), Kind.TOKEN)] * len(v)) for i, v in enumerate(vectors)]
    writer = ShardWriter(tmp_path / "shard", 8)
    writer.add(docs, encoded)
    writer.finish()
    writer.close()
    queries = [rng.standard_normal((n, 8)).astype(np.float32) for n in (2, 5, 1, 4)]
    expected = [[(q @ v.astype(np.float32).T).max(1).sum() if len(v) else -np.inf for v in vectors] for q in queries]
    store = ShardStore(tmp_path / "shard")
    try:
        for budget_mb in (512, 0):  # one group and one block; then groups of one query, blocks of 1024 rows
            got = list(maxsim_every_document(queries, store, budget_mb))
            np.testing.assert_allclose(np.array(got), np.array(expected), rtol=1e-5)
    finally:
        store.close()


ARTICLES = [("Ada Lovelace", "Ada Lovelace wrote the first program for the Analytical Engine."),
            ("Alan Turing", "Alan Turing proposed the Turing machine in 1936."),
            ("Anarchism", "Anarchism is a political philosophy that rejects hierarchy."),
            ("Aristotle", "Aristotle was a Greek philosopher, a student of Plato."),
            ("Athens", "Athens is the capital of Greece.")]


def _extracted(tmp_path):
    """A WikiExtractor folder of the five ARTICLES."""
    corpus = tmp_path / "extracted" / "AA"
    corpus.mkdir(parents=True)
    (corpus / "wiki_00").write_text("".join(f'<doc id="{i}" url="u{i}" title="{t}">\n{t}\n\n{body}\n</doc>\n'
                                            for i, (t, body) in enumerate(ARTICLES, 1)))
    return tmp_path / "extracted"


def test_encode_section_times_each_encoder_over_each_prefix_and_builds_nothing(tmp_path):
    out, work = tmp_path / "encode.json", tmp_path / "work"
    # No BEIR corpus and no index: the section reads only --scale-corpus.
    assert main(["bench", "--sections", "encode", "--corpus", str(tmp_path / "none"), "--scale-corpus", str(_extracted(tmp_path)),
                 "--scale-sizes", "4,2", "--scale-encoders", "single,tokens", "--device", "cpu", "--work", str(work), "--out", str(out)]) == 0
    encode = json.loads(out.read_text())["encode"]
    assert [(p["encoder"], p["documents"]) for p in encode["points"]] == [("single", 2), ("single", 4), ("tokens", 2), ("tokens", 4)]
    single, tokens = encode["points"][1], encode["points"][3]
    assert single["vectors"] == single["passages"] == 4  # one short article, one passage, one vector
    assert tokens["vectors"] > 4 * 5 and tokens["passages"] == 4
    assert all(p["encode_docs_per_s"] > 0 for p in encode["points"])
    assert encode["device"].startswith("CPU") and encode["dtype"] == "torch.float32"
    assert not work.exists()


def test_a_scale_point_spells_its_index_options_as_eval_systems_do_and_encodes_queries_on_the_runtime_asked(tmp_path):
    from propdex.eval.scale import index_command

    assert index_command("tokens") == ["--encoder", "tokens", "--training", "full"]
    assert index_command("nugget:ratio=0.1:store=binary:bits=128") == [
        "--encoder", "nugget:ratio=0.1", "--training", "full", "--store", "binary", "--bits", "128"]
    assert index_command("single:code_bytes=50:training=quick") == ["--encoder", "single", "--training", "quick", "--code-bytes", "50"]
    _extracted(tmp_path)
    out = tmp_path / "scale.json"
    assert main(["bench", "--sections", "scale", "--scale-corpus", str(tmp_path / "extracted"), "--scale-sizes", "3",
                 "--scale-encoders", "single:store=binary:bits=64:hashing=lsh", "--queries", "2", "--threads", "1",
                 "--query-runtime", "onnx", "--work", str(tmp_path / "work"), "--out", str(out)]) == 0
    curve = json.loads(out.read_text())["scale"]
    point, = curve["points"]
    # The searching process encoded its queries on the runtime asked for, and the curve says which.
    assert point["query_runtime"] == curve["query_runtime"] == "onnx"
    assert (point["encoder"], point["store"], point["factory"]) == ("single:store=binary:bits=64:hashing=lsh", "binary", "BFlat")
    rows = np.load(tmp_path / "work" / "scale" / "single_store=binary_bits=64_hashing=lsh-3" / "shard-00000" / "index.bits")
    assert rows.shape == (point["vectors"], 8)  # 64 bits a vector, no list number under a scan


def test_scale_curve_builds_each_prefix_once_and_projects_its_per_document_costs(tmp_path, monkeypatch, capfd):
    from propdex.eval import scale as scale_module

    monkeypatch.setattr(scale_module, "SCALE_SHARD_DOCS", 3)  # a point commits a shard at a time: a killed bench keeps them
    articles = ARTICLES
    _extracted(tmp_path)
    out, work = tmp_path / "scale.json", tmp_path / "work"
    args = ["bench", "--sections", "scale", "--scale-corpus", str(tmp_path / "extracted"), "--scale-sizes", "4,2",
            "--scale-encoders", "single", "--queries", "3", "--threads", "1", "--project", "4000", "--work", str(work),
            "--out", str(out)]
    assert main(args) == 0
    scale = json.loads(out.read_text())["scale"]
    assert [p["documents"] for p in scale["points"]] == [2, 4]  # smallest first
    for p in scale["points"]:
        assert p["vectors"] == p["documents"] and p["p50_ms"] <= p["p95_ms"] and p["peak_rss_mb"] > 100
        # Where a query's time goes, stage by stage, in the searching process (which holds the model: > 100 MB).
        assert set(p["stages_ms"]) == {"encode", "stage 1", "stage 2", "aggregate"} and min(p["stages_ms"].values()) > 0
        assert p["search_rss_mb"] > 100 and (p["store"], p["code_bytes"]) == ("codes", 100)
        assert p["bytes_per_doc"] == pytest.approx(p["bytes_per_vector"], rel=0.01)
    big = scale["points"][1]
    projected = scale["projected"]["single"]
    assert projected["from_documents"] == 4 and projected["vectors"] == 4000
    assert projected["encode_hours"] == round(big["encode_s"] * 1000 / 3600, 1)
    text = sum(len(t) + len(body) for t, body in articles[:4])  # the reader's text is the body (ASCII here)
    assert big["text_bytes"] == pytest.approx(text, rel=0.1) and scale["points"][0]["text_bytes"] < big["text_bytes"]
    assert projected["per_text_gb"]["vectors"] == round(big["vectors"] * 1e9 / big["text_bytes"])
    assert out.with_suffix(".png").stat().st_size > 1000
    shards = {n: [s["docs"] for s in json.loads((work / "scale" / f"single-{n}" / "manifest.json").read_text())["shards"]] for n in (2, 4)}
    assert shards == {2: [2], 4: [3, 1]}
    # A second run measures the committed indexes again and builds nothing.
    manifest = work / "scale" / "single-4" / "manifest.json"
    before = manifest.stat().st_mtime_ns
    assert main(args) == 0
    assert manifest.stat().st_mtime_ns == before
    # A point left by a build under other settings is refused by name, never measured as the spec.
    recorded = json.loads(manifest.read_text())
    recorded["settings"]["code_bytes"] = 60
    manifest.write_text(json.dumps(recorded))
    assert main(args) != 0
    assert "other settings" in capfd.readouterr().err


@pytest.mark.slow
def test_bench_runs_its_default_sections_on_a_small_corpus(tmp_path):
    """The sections `propdex bench` runs when none are named, end to end, so
    that a fault in any of them (or between them) cannot land unseen."""
    from propdex.eval import bench

    corpus = tiny_beir(tmp_path / "beir", 40)
    out = tmp_path / "bench.json"
    assert main(["-q", "bench", "--corpus", str(corpus), "--work", str(tmp_path / "work"), "--out", str(out),
                 "--throughput-docs", "20", "--queries", "8", "--recall-queries", "4", "--runtime-docs", "12",
                 "--runtime-repeats", "1", "--runtimes", "torch,onnx"]) == 0
    result = json.loads(out.read_text())
    assert set(bench.DEFAULT_SECTIONS) <= set(result)
    assert result["size"]["documents"] == 40 and result["size"]["vectors_per_doc"] > 1
    assert result["search"]["latency_ms_p50"] > 0 and result["throughput"]["docs"] == 20


@pytest.mark.slow
def test_bench_ingest_times_one_document_adds_to_a_living_index(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["-q", "bench", "--sections", "ingest", "--ingest-docs", "60", "--ingest-adds", "9", "--work", str(tmp_path),
                 "--out", str(out)]) == 0
    ingest = json.loads(out.read_text())["ingest"]
    assert ingest["documents"] == 60 and ingest["adds"] == 9 and ingest["added_found_by_bm25"] == 9
    assert ingest["add_commit_ms"]["p50_ms"] > 0 and ingest["bm25_rebuild_ms"] > 0
    assert ingest["shards_after"] < ingest["shards_before"] + 9  # the merge policy merged the small shards
