"""What stage 2 re-scores: the float16 copy (a memory-mapped array per shard)
or, with store="codes", the ANN index's own codes decoded, so each vector is
stored once."""
from __future__ import annotations

from dataclasses import replace

import faiss
import numpy as np
import pytest
from paths import DATA

import propdex
from propdex.cli import main
from propdex.encoders import load_encoder
from propdex.indexer import ann
from propdex.indexer.build import IndexWriter
from propdex.indexer.manifest import read_manifest
from propdex.indexer.readers import read_corpus
from propdex.indexer.store import VECTORS, RowWriter, ShardStore
from propdex.retriever import Searcher

SCIFACT = DATA / "beir" / "scifact" / "corpus.jsonl"
QUERIES = ["cell membrane proteins", "cancer risk in children", "vitamin D deficiency", "brain white matter development",
           "antibiotic resistance in bacteria", "effects of smoking on the lung"]


def _docs(n: int):
    return [d for _, d in zip(range(n), read_corpus([SCIFACT]))]


@pytest.fixture(scope="module")
def pair(tmp_path_factory, minilm):
    """Real MiniLM token vectors of 60 SciFact abstracts, indexed twice with one
    IVF-PQ factory: stage 2 from float16, and from the codes; and a third
    time as 4-bit codes (`codes4`)."""
    encoder = load_encoder("tokens", backbone=minilm)
    root = tmp_path_factory.mktemp("stores")
    docs = _docs(60)
    for name, store, factory in (("float16", "float16", "IVF16,PQ96"), ("codes", "codes", "IVF16,PQ96"), ("codes4", "codes", "OPQ16,IVF16,PQ192x4")):
        IndexWriter(root / name, encoder, factory=factory, store=store, bm25=False, shard_docs=40).build(docs)
    return root, encoder


def test_codes_keep_each_vector_once_as_the_same_ann_index_without_its_ids(pair):
    root, _ = pair
    f16, codes = read_manifest(root / "float16"), read_manifest(root / "codes")
    assert codes["settings"]["store"] == "codes" and f16["settings"]["store"] == "float16"
    assert codes["index"]["trained_sha256"] == f16["index"]["trained_sha256"]  # one codec: the same training
    # A reader of version 1 would take the codes for FAISS files, one of version 2 codes ending in their scale for damaged ones.
    assert (codes["version"], f16["version"]) == (3, 1) and codes["index"]["scaled_codes"]
    assert all(s["stored"] is None and not (root / "codes" / s["name"] / VECTORS).exists() for s in codes["shards"])
    codec = ann.read_faiss(root / "codes" / codes["index"]["trained"])
    rng = np.random.default_rng(0)
    for a, b in zip(f16["shards"], codes["shards"]):
        file = root / "float16" / a["name"] / VECTORS
        assert a["stored"] == VECTORS and file.stat().st_size == a["stored_bytes"]
        assert np.load(file, mmap_mode="r").shape == (a["vectors"], 384)
        # A codes shard is one row a vector: its list number (1 byte for 16 lists), 96 PQ codes and its float32 scale, no 8-byte id.
        rows, scales = ann.read_codes(root / "codes" / b["name"] / b["index"], codec, True)
        assert b["index"] == ann.CODES_FILE and rows.shape == (b["vectors"], 1 + 96) and scales.shape == (b["vectors"],)
        assert b["index_bytes"] == b["vectors"] * (1 + 96 + 4) + 128  # and the .npy header
        # They are the float16 index's codes: the same reconstructions, the same stage-1 answers.
        faiss_index = ann.read_faiss(root / "float16" / a["name"] / a["index"])
        ids = rng.choice(a["vectors"], 50, replace=False)
        np.testing.assert_allclose(ann.decoder(codec, rows)(ids), ann.decoder(faiss_index)(ids), atol=1e-6)
        # A row's scale takes its decoded vector back to the length every indexed vector had.
        lengths = np.linalg.norm(ann.decoder(codec, rows)(ids), axis=1)
        np.testing.assert_allclose(scales[ids] * lengths, codes["index"]["vector_norm"], rtol=1e-6)
        rebuilt = ann.index_from_codes(codec, rows)
        assert rebuilt.ntotal == faiss_index.ntotal == b["vectors"]
        assert int(faiss.extract_index_ivf(rebuilt).quantizer.this) == int(faiss.downcast_index(codec).quantizer.this)
        q = np.load(file, mmap_mode="r")[ids[:5]].astype(np.float32)
        for nprobe in (1, 4):
            want, got = ann.search(faiss_index, q, 20, nprobe), ann.search(rebuilt, q, 20, nprobe)
            np.testing.assert_array_equal(got[1], want[1])
            np.testing.assert_allclose(got[0], want[0], atol=1e-5)
    assert main(["verify", str(root / "codes")]) == 0 and main(["verify", str(root / "float16")]) == 0


def test_decoded_vectors_stay_within_the_quantiser_error(pair):
    """IVF-PQ96 on 384-d (the default code size), trained on these 11k
    vectors: decoded vectors point where their float16 copies do."""
    root, _ = pair
    manifest = read_manifest(root / "float16")
    s = manifest["shards"][0]
    exact = ShardStore(root / "float16" / s["name"])
    decoded = ShardStore(root / "codes" / s["name"])
    assert exact.has_vectors and not decoded.has_vectors
    with pytest.raises(ValueError, match="keeps no vectors"):
        decoded.vectors([0])
    codes = read_manifest(root / "codes")
    codec = ann.read_faiss(root / "codes" / codes["index"]["trained"])
    rows, scales = ann.read_codes(root / "codes" / s["name"] / codes["shards"][0]["index"], codec, True)
    decoded.decoder = ann.decoder(codec, rows)
    ordinals = list(range(len(exact)))
    a = np.concatenate([v for v, _ in exact.vectors(ordinals)]).astype(np.float32)
    b = np.concatenate([v for v, _ in decoded.vectors(ordinals)])
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert len(a) == s["vectors"] and cos.mean() > 0.8 and cos.min() > 0.4, (cos.mean(), cos.min())
    # Codes change vectors' lengths, unevenly; the index knows its vectors were unit vectors, and stage 2 scales them back.
    lengths = np.linalg.norm(b, axis=1)
    assert codes["index"]["vector_norm"] == pytest.approx(1.0, abs=1e-3)
    assert lengths.std() > 0.01, lengths.std()
    for stored in (None, scales):  # measured at each decode (codes written before scales), or by the stored scales
        decoded.decoder = ann.decoder(codec, rows, codes["index"]["vector_norm"], stored)
        c = np.concatenate([v for v, _ in decoded.vectors(ordinals)])
        np.testing.assert_allclose(np.linalg.norm(c, axis=1), codes["index"]["vector_norm"], rtol=1e-5)
        np.testing.assert_allclose(c / np.linalg.norm(c, axis=1, keepdims=True), b / lengths[:, None], atol=1e-5)
    # Rows come back per document, in the order asked, unit records alongside.
    for (va, sa), (vb, sb) in zip(exact.vectors([5, 2]), decoded.vectors([5, 2])):
        assert va.shape == vb.shape and np.array_equal(sa, sb)
    exact.close()
    decoded.close()


def test_stage_two_from_codes_ranks_as_from_float16(pair):
    """On real queries the two stores rank the same candidates nearly alike
    (scores from codes run lower: a decoded vector is shorter than its own)."""
    root, encoder = pair
    with Searcher.load(root / "float16", encoder=encoder) as f16, Searcher.load(root / "codes", encoder=encoder) as codes:
        top1 = 0
        for q in QUERIES:
            a = {h.doc_id: h.score for h in f16.search(q, k=20)}
            b = {h.doc_id: h.score for h in codes.search(q, k=20)}
            top1 += next(iter(a)) == next(iter(b))
            shared = [d for d in a if d in b]
            assert len(shared) >= 15
            ra = np.argsort(np.argsort([a[d] for d in shared]))
            rb = np.argsort(np.argsort([b[d] for d in shared]))
            assert np.corrcoef(ra, rb)[0, 1] > 0.8  # Spearman's rho of the shared candidates
        assert top1 >= len(QUERIES) - 1


def test_codes_written_before_scales_search_as_codes_with_them(pair, tmp_path):
    """An index whose codes rows end at the code (written before rows kept
    their scale: manifest version 2) still opens, verifies and answers as the
    same codes with their scales: stage 2 measures each decoded row instead."""
    import json
    import shutil

    from propdex.indexer.manifest import sha256_file

    root, encoder = pair
    old = tmp_path / "codes4-v2"
    shutil.copytree(root / "codes4", old)
    manifest = json.loads((old / "manifest.json").read_text())
    codec = ann.read_faiss(old / manifest["index"]["trained"])
    for s in manifest["shards"]:
        file = old / s["name"] / s["index"]
        rows = np.array(ann.read_codes(file, codec, True)[0])
        with open(file, "wb") as f:
            np.save(f, rows)
        s["index_sha256"], s["index_bytes"] = sha256_file(file), file.stat().st_size
    del manifest["index"]["scaled_codes"]
    manifest["version"] = 2
    (old / "manifest.json").write_text(json.dumps(manifest))
    assert main(["verify", str(old)]) == 0
    with Searcher.load(root / "codes4", encoder=encoder) as new, Searcher.load(old, encoder=encoder) as before:
        for q in QUERIES:
            for level in ("doc", "sentence"):
                a, b = new.search(q, k=10, level=level), before.search(q, k=10, level=level)
                assert [h.doc_id for h in a] == [h.doc_id for h in b]
                np.testing.assert_allclose([h.score for h in a], [h.score for h in b], rtol=1e-5)
    # A later add to it writes its codes as the index's other shards are written, and it stays readable by version 2.
    IndexWriter.open(old, encoder).add([replace(d, id=f"new-{d.id}") for d in _docs(3)])
    grown = read_manifest(old)
    assert grown["version"] == 2 and len(grown["shards"]) > len(manifest["shards"])
    for s in grown["shards"]:
        ann.read_codes(old / s["name"] / s["index"], codec, False)  # no scales: else "damaged"
    with Searcher.load(old, encoder=encoder) as searcher:
        assert searcher.search(QUERIES[0], k=3)


def test_a_shards_stage_one_keeps_the_codec_it_shares_alive(pair):
    """Shards share the codec's quantizer and rotation: the stage-1 index
    must hold the codec, however the caller lets go of it."""
    import gc

    root, _ = pair
    for name in ("codes", "codes4"):
        manifest = read_manifest(root / name)
        s = manifest["shards"][0]
        codec = ann.read_faiss(root / name / manifest["index"]["trained"])
        rows = ann.read_codes(root / name / s["name"] / s["index"], codec, True)[0]
        q = ann.decoder(codec, rows)(np.arange(8))
        stage1 = ann.index_from_codes(codec, rows)
        want = ann.search(stage1, q, 10, 4)
        del codec
        gc.collect()
        others = [ann.read_faiss(root / name / manifest["index"]["trained"]) for _ in range(3)]  # would reuse freed memory
        got = ann.search(stage1, q, 10, 4)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        del others


def test_four_bit_codes_are_scanned_in_simd_blocks_and_decoded_a_byte_at_a_time(pair):
    """Stage 1 scans 4-bit codes in FAISS's fast-scan layout, built from the
    plain lists of the same codes; stage 2 decodes them through an 8-bit
    codebook of code pairs, to the vectors FAISS's own 4-bit decoder gives;
    and a search ranks as from float16."""
    root, encoder = pair
    manifest = read_manifest(root / "codes4")
    codec = ann.read_faiss(root / "codes4" / manifest["index"]["trained"])  # read back, as a searcher reads it
    rng = np.random.default_rng(0)
    for s in manifest["shards"]:
        rows = ann.read_codes(root / "codes4" / s["name"] / s["index"], codec, True)[0]
        assert rows.shape == (s["vectors"], 1 + 96)  # 192 codes of 4 bits: as many bytes as the 8-bit PQ96
        stage1 = ann.index_from_codes(codec, rows)
        assert isinstance(faiss.downcast_index(faiss.extract_index_ivf(stage1)), faiss.IndexIVFPQFastScan)
        assert stage1.ntotal == s["vectors"]
        # Every shard's stage 1 scans through the codec's own coarse quantizer and rotation, not copies of them.
        inner = faiss.downcast_index(faiss.downcast_index(codec).index)
        assert int(faiss.extract_index_ivf(stage1).quantizer.this) == int(inner.quantizer.this)
        assert int(faiss.downcast_index(stage1).chain.at(0).this) == int(faiss.downcast_index(codec).chain.at(0).this)
        ids = rng.choice(s["vectors"], 200, replace=False)
        np.testing.assert_allclose(ann.decoder(codec, rows)(ids), codec.sa_decode(np.ascontiguousarray(rows[ids])), atol=1e-6)
        decode, rotate = ann.scoring_decoder(codec, rows)
        assert rotate is not None and ann._byte_codec(faiss.downcast_index(faiss.downcast_index(codec).index)) is not None
        # The plain scan of the same codes (what a searcher built before) finds what the fast scan finds.
        plain = faiss.clone_index(codec)
        faiss.extract_index_ivf(plain).add_sa_codes(np.ascontiguousarray(rows), np.arange(len(rows), dtype=np.int64))
        q = ann.decoder(codec, rows)(ids[:20]) + 0.05 * rng.standard_normal((20, 384)).astype(np.float32)
        want, got = ann.search(plain, q, 10, 4)[1], ann.search(stage1, q, 10, 4)[1]
        assert np.mean([len(set(a) & set(b)) for a, b in zip(want, got)]) >= 8
    # As the 8-bit codes of test_stage_two_from_codes_ranks_as_from_float16 do.
    with Searcher.load(root / "float16", encoder=encoder) as f16, Searcher.load(root / "codes4", encoder=encoder) as codes4:
        top1 = 0
        for q in QUERIES:
            a = [h.doc_id for h in f16.search(q, k=20)]
            b = [h.doc_id for h in codes4.search(q, k=20)]
            top1 += a[0] == b[0]
            assert len(set(a) & set(b)) >= 15, (q, a, b)
        assert top1 >= len(QUERIES) - 1
    assert main(["verify", str(root / "codes4")]) == 0


def test_shards_that_share_a_codec_share_one_pair_codebook(pair, monkeypatch):
    """The pair codec that decodes 4-bit codes a byte at a time is built once
    for all shards of a searcher, and decodes as the 4-bit codec does."""
    root, encoder = pair
    manifest = read_manifest(root / "codes4")
    codec = ann.read_faiss(root / "codes4" / manifest["index"]["trained"])
    decoding = ann.decoding_codec(codec)
    inner = faiss.downcast_index(faiss.downcast_index(decoding).index)
    assert (inner.pq.M, inner.pq.nbits) == (96, 8)
    assert int(inner.quantizer.this) == int(faiss.downcast_index(faiss.downcast_index(codec).index).quantizer.this)
    rows = ann.read_codes(root / "codes4" / manifest["shards"][0]["name"] / manifest["shards"][0]["index"], codec, True)[0]
    ids = np.arange(0, len(rows), 7)
    want = codec.sa_decode(np.ascontiguousarray(rows[ids]))
    np.testing.assert_allclose(ann.decoder(decoding, rows)(ids), want, atol=1e-6)
    del codec  # the decoding codec keeps what it routes through alive
    np.testing.assert_allclose(ann.decoder(decoding, rows)(ids), want, atol=1e-6)
    eight_bit = ann.read_faiss(root / "codes" / read_manifest(root / "codes")["index"]["trained"])
    assert ann.decoding_codec(eight_bit) is eight_bit  # nothing to swap
    from propdex.indexer import decoding

    built = []
    real = decoding._byte_codec  # where `decoding_codec` finds it
    monkeypatch.setattr(decoding, "_byte_codec", lambda index: built.append(real(index)) or built[-1])
    with Searcher.load(root / "codes4", encoder=encoder) as searcher:
        assert len(manifest["shards"]) == 2 and sum(b is not None for b in built) == 1
        assert searcher.search(QUERIES[0], k=5)
    assert sum(b is not None for b in built) == 1  # stage 2 of both shards decoded through it


def test_compaction_decodes_every_shard_through_one_codec(pair, tmp_path, monkeypatch):
    """Compaction opens every shard it rewrites at once; their codes decode
    through one read of the trained codec, not one a shard."""
    import shutil

    root, encoder = pair
    shutil.copytree(root / "codes4", tmp_path / "codes4")
    index = propdex.Index(tmp_path / "codes4", encoder)
    ids = [d.id for d in _docs(60)]
    assert index.delete([ids[0], ids[45]])["deleted"] == 2  # one from each shard
    reads = []
    real = ann.read_faiss
    monkeypatch.setattr(ann, "read_faiss", lambda path, *a, **kw: reads.append(path.name) or real(path, *a, **kw))
    assert IndexWriter.open(tmp_path / "codes4", encoder).compact()["rewritten"] == 2
    # One read decodes both shards (it was one a shard); `_add` reads it once more to encode the new shards' codes.
    assert reads.count(read_manifest(tmp_path / "codes4")["index"]["trained"]) == 2
    monkeypatch.undo()
    index.refresh()
    assert len(index) == 58 and ids[0] not in index and ids[1] in index
    assert index.search(QUERIES[0], k=5)
    index.close()
    assert main(["verify", str(tmp_path / "codes4")]) == 0


@pytest.mark.parametrize("backend", ["faiss", "hnsw"])
def test_flat_and_hnsw_codes_are_the_vectors_and_a_living_index_keeps_working(tmp_path, tiny, backend):
    """Flat and HNSW hold float32 vectors: store="codes" scores exactly, and
    add, delete and compact (from decoded vectors) give a fresh build's results."""
    encoder = load_encoder("tokens", backbone=tiny)
    docs = _docs(24)
    index = propdex.Index.create(tmp_path / "codes", encoder, shard_docs=8, store="codes", backend=backend)
    index.add(docs[:16])
    index.add(docs[16:])
    index.delete([docs[3].id])
    index.compact()
    live = [d for d in docs if d.id != docs[3].id]
    IndexWriter(tmp_path / "fresh", encoder, shard_docs=8, backend=backend).build(live)
    with Searcher.load(tmp_path / "fresh", encoder=encoder) as fresh:
        for q in QUERIES[:3]:
            expected = [(h.doc_id, round(h.score, 2)) for h in fresh.search(q, k=8)]
            assert [(h.doc_id, round(h.score, 2)) for h in index.search(q, k=8)] == expected
    assert not list((tmp_path / "codes").glob(f"shard-*/{VECTORS}"))
    assert main(["verify", str(tmp_path / "codes")]) == 0
    index.close()


def test_a_truncated_vector_file_is_caught_at_load(tmp_path, tiny):
    encoder = load_encoder("single", backbone=tiny)
    IndexWriter(tmp_path / "ix", encoder, bm25=False, store="float16").build(_docs(10))
    file = tmp_path / "ix" / "shard-00000" / VECTORS
    file.write_bytes(file.read_bytes()[:-64])
    with pytest.raises(ValueError, match="damaged"):
        Searcher.load(tmp_path / "ix", encoder=encoder)


def test_store_is_checked_and_kept_by_later_writers(tmp_path, tiny):
    encoder = load_encoder("single", backbone=tiny)
    with pytest.raises(ValueError, match="unknown store 'int4'"):
        IndexWriter(tmp_path / "bad", encoder, store="int4")
    IndexWriter(tmp_path / "ix", encoder, store="codes", bm25=False).build(_docs(6))
    writer = IndexWriter.open(tmp_path / "ix", encoder)
    assert writer.settings["store"] == "codes"
    writer.close()
    with pytest.raises(ValueError, match="other settings"):
        IndexWriter(tmp_path / "ix", encoder, store="float16", bm25=False)
    index = propdex.Index(tmp_path / "ix", encoder)
    index.add([replace(_docs(7)[6], id="new")])
    assert not list((tmp_path / "ix").glob(f"shard-*/{VECTORS}")) and "new" in index
    index.close()


def test_codes_that_stage_two_scores_get_an_opq_rotation_by_default():
    # Codes that only route stage 1 (beside the float16 copy): dim/8 bytes of fast-scan codes, no rotation.
    assert ann.default_factory(1_407_293, 384) == "IVF4096,PQ96x4fs"
    # Codes that stage 2 scores fill the byte budget, ~sqrt(N) lists: 4-bit codes of 2 dims, two a byte, where
    # they cover >= 80% of the rotated dims; else 8-bit codes of >= 4 dims, ~80% of the rotated dims kept.
    assert ann.default_factory(1_407_293, 384, "codes") == "OPQ192,IVF1024,PQ192x4"  # at most dim/4 bytes
    assert ann.default_factory(610_000, 384, "codes") == "OPQ188_376,IVF1024,PQ188x4"
    assert ann.default_factory(610_000, 384, "codes", 50) == "OPQ44_264,IVF1024,PQ44"  # fewer codes, more dims each
    assert ann.default_factory(20_000, 384, "codes") == "Flat"  # small corpora: the float32 vectors themselves
    with pytest.raises(ValueError, match="code-bytes"):
        ann.codes_factory(60_000, 384, 12)


@pytest.mark.parametrize("budget, four_bit", [(20, True), (16, False)])
def test_the_default_codes_fill_their_byte_budget_on_disk(tmp_path, budget, four_bit):
    # List numbers and codes, the codec's centroids, OPQ rows and codebooks as they are written: within the budget, and not far under it.
    n, dim = 20_000, 64
    x = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    factory = ann.codes_factory(n, dim, budget)
    assert factory.startswith("OPQ") and factory.endswith("x4") == four_bit, factory
    codec = ann.train(factory, x[:10_000])
    opq = faiss.downcast_VectorTransform(faiss.downcast_index(codec).chain.at(0))
    assert (opq.pq is not None and opq.pq.nbits == 4) == four_bit  # the rotation was trained for the codes that follow it
    ann.write_faiss(codec, tmp_path / "trained.faiss")
    rows = RowWriter(tmp_path / ann.CODES_FILE, codec.sa_code_size(), "|u1")
    for chunk in np.array_split(x, 3):
        rows.append(ann.encode(codec, chunk))
    assert rows.finish() == n
    per_vector = sum((tmp_path / f).stat().st_size for f in ("trained.faiss", ann.CODES_FILE)) / n
    assert budget - 3 < per_vector <= budget, (factory, per_vector)
    # What FAISS's own index file would spend on the same codes: 8 bytes an id more, less 2 of list number.
    ann.write_faiss(ann.fill(codec, [x]), tmp_path / "ix.faiss")
    assert (tmp_path / "ix.faiss").stat().st_size / n > per_vector + 5


def test_an_opq_rotation_is_undone_for_the_whole_batch_as_faiss_undoes_it_per_vector():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    index = ann.fill(ann.train("OPQ8,IVF8,PQ8", x), [x])
    ids = np.array([3, 0, 3999, 17], dtype=np.int64)
    decoded = ann.decoder(index)(ids)
    assert np.allclose(decoded, index.reconstruct_batch(ids), atol=1e-5)
    assert ((decoded * x[ids]).sum(1) > 0.5).all()  # and they are the vectors, roughly


def test_stage_two_scores_rotated_queries_against_rotated_codes_as_it_would_unrotated_ones():
    """Also behind an OPQ that keeps fewer dimensions than it reads."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[[5, 77, 1200]] + 0.1 * rng.standard_normal((3, 32)).astype(np.float32)
    ids = np.array([3, 0, 3999, 17, 5], dtype=np.int64)
    # OPQ8_24 projects to 24 of the 32 dimensions: the query is mapped down, not the codes up.
    for factory, rotated in (("OPQ8,IVF8,PQ8", True), ("OPQ8_24,IVF8,PQ8", True), ("IVF8,PQ8", False), ("Flat", False)):
        index = ann.fill(ann.train(factory, x), [x])
        decode, rotate = ann.scoring_decoder(index)
        assert (rotate is not None) == rotated
        expected = q @ ann.decoder(index)(ids).T
        got = (rotate(q) if rotate else q) @ decode(ids).T
        np.testing.assert_allclose(got, expected, atol=1e-5)
        if rotated and decode(ids).shape[1] == q.shape[1]:  # the codes really are read in another space: un-rotated, they score otherwise
            assert not np.allclose(q @ decode(ids).T, expected, atol=1e-2)


def test_a_decoder_keeps_the_index_it_reads_alive():
    """FAISS's downcast and sub-index wrappers do not own their C++ index:
    a decoder of a temporary index must hold it (this crashed once)."""
    import gc

    rng = np.random.default_rng(1)
    x = rng.standard_normal((3000, 16)).astype(np.float32)
    for factory in ("IVF4,PQ4", "OPQ4,IVF4,PQ4", "Flat"):
        decode = ann.decoder(faiss_copy := ann.fill(ann.train(factory, x), [x]))
        expected = faiss_copy.reconstruct_batch(np.arange(5, dtype=np.int64))
        del faiss_copy
        gc.collect()
        np.testing.assert_allclose(decode(np.arange(5, dtype=np.int64)), expected, atol=1e-5)


def test_the_common_length_of_indexed_vectors_is_found_or_refused():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1000, 32)).astype(np.float32)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    assert ann.common_norm(unit.astype(np.float16).astype(np.float32)) == pytest.approx(1.0, abs=1e-3)  # float16 rounding is tolerated
    assert ann.common_norm(np.concatenate([unit, unit], 1)) == pytest.approx(np.sqrt(2), abs=1e-5)  # two unit halves (beside=1, words)
    assert ann.common_norm(x) is None  # raw vectors: nothing to scale back to
    assert ann.common_norm(np.concatenate([unit, 0.9 * unit])) is None



def test_shards_that_share_a_codec_search_as_one_index_of_the_same_codes(pair, monkeypatch):
    """Stage 1 over two shards of one codec finds what one index holding
    both shards' codes finds: each query vector keeps its best hits over all
    shards (not a page a shard), inside a filter too; a query is mapped and
    assigned to lists once a search, and rotated for stage 2 once, not once
    a shard."""
    root, encoder = pair

    manifest = read_manifest(root / "codes4")
    codec = ann.read_faiss(root / "codes4" / manifest["index"]["trained"])
    rows = [ann.read_codes(root / "codes4" / s["name"] / s["index"], codec, True)[0] for s in manifest["shards"]]
    whole = ann.index_from_codes(codec, np.concatenate(rows))
    assigned, alone = [], []
    real_assign, real_search = ann.assign, ann.search
    monkeypatch.setattr(ann, "assign", lambda *a: assigned.append(1) or real_assign(*a))
    monkeypatch.setattr(ann, "search", lambda *a, **kw: alone.append(1) or real_search(*a, **kw))
    rng = np.random.default_rng(1)
    with Searcher.load(root / "codes4", encoder=encoder) as two:
        assert len(two.shards) == 2 and two.shards[0].rotate is two.shards[1].rotate
        q = np.concatenate([e.vectors for e in encoder.encode_queries(QUERIES[:3])])
        masks = [rng.random(len(r)) < 0.3 for r in rows]
        for shard_masks, allowed in (([None, None], None), (masks, np.concatenate(masks))):
            hits = two._stage1.search(q, 20, 4, shard_masks)
            base = np.cumsum([0, len(rows[0])])
            got = [set() for _ in q]
            for s, (scores, docs, at) in enumerate(hits):
                for i, j in zip(*np.nonzero(docs >= 0)):
                    got[i].add((base[s] + two.shards[s].store.offsets[docs[i, j]] + at[i, j], round(float(scores[i, j]), 4)))
            want_scores, want_ids = ann.search(whole, q, 20, 4, allowed)
            want = [{(int(v), round(float(sc), 4)) for v, sc in zip(ids, sc_row) if v >= 0} for ids, sc_row in zip(want_ids, want_scores)]
            for g, w in zip(got, want):
                # Every hit of the one index, and past them only vectors tied with its 20th (ties are kept).
                cut = min(sc for _, sc in w)
                assert len(w) == 20 and w <= g and all(sc == cut for _, sc in g - w)
        assert len(alone) == 2  # the reference's two searches: neither shard searched alone
        del assigned[:]
        assert two.search_batch(QUERIES, k=10)
        assert len(assigned) == 1


@pytest.mark.parametrize("name", ["float16", "codes4"])
def test_stage_two_scores_exactly_the_windows_stage_one_hit(pair, name):
    """By default stage 2 decodes and scores only a candidate's windows that
    hold a stage-1 hit: there its similarities are exactly those of scoring
    every window, elsewhere -inf, and a document's score is its exact best
    window's wherever that window was hit (never more)."""
    from propdex.retriever import rescoring, scoring
    from propdex.retriever.candidates import query_rows

    root, encoder = pair
    window, skipped, decoded, total = 24, 0, 0, 0
    with Searcher.load(root / name, encoder=encoder) as searcher:
        shards, none = searcher.shards, [None] * len(searcher.shards)
        for text in QUERIES:
            q = encoder.encode_queries([text])[0].vectors
            hits = searcher._stage1.search(q, 64, 4, none)
            chosen, hit = searcher._stage1.candidates(q, query_rows(hits, slice(0, len(q))), 32, 10, 64, none, window)
            fast = {c.key: c for c in rescoring.rescore(shards, q, chosen, 32, set(), window=window, hit=hit)}
            exact = {c.key: c for c in rescoring.rescore(shards, q, chosen, 32, set(), window=window)}
            assert fast.keys() == exact.keys() == set(chosen.tolist())
            for key, c in fast.items():
                groups, _ = scoring.sentence_windows(c.unit_sentences, window)
                scored = np.isin(groups, groups[hit[key]])
                assert np.isfinite(c.sim[:, scored]).all() and np.isneginf(c.sim[:, ~scored]).all()
                np.testing.assert_allclose(c.sim[:, scored], exact[key].sim[:, scored], rtol=1e-6, atol=1e-6)
                best = groups == int(np.argmax(scoring.group_maxsim(exact[key].sim, groups, groups.max() + 1)))
                if scored[best].all():
                    assert c.score == pytest.approx(exact[key].score, abs=1e-5)
                assert c.score <= exact[key].score + 1e-5
                # What a hit shows, read from the scored columns, is what the whole (m, n) matrix gives.
                assert c.best_window(window) == scoring.best_window(c.sim, c.unit_sentences, window)
                covered = c.unit_sentences[:, 1] >= c.unit_sentences[:, 0]
                np.testing.assert_array_equal(c.unit_scores(), np.where(covered, scoring.unit_scores(c.sim), -np.inf))
                sentence = int(np.argmax(c.sentence_scores()))
                inside = np.flatnonzero((c.unit_sentences[:, 0] <= sentence) & (c.unit_sentences[:, 1] >= sentence))
                assert c.matched_units(sentence) == sorted(set(inside[c.sim[:, inside].argmax(axis=1)].tolist()))
                skipped += int((~scored).any())
                decoded, total = decoded + int(scored.sum()), total + len(scored)
    assert skipped and decoded < total


def test_unit_records_of_one_width_are_found_by_arithmetic_as_by_walking():
    """A document's unit records are read at the same place whether every
    unit has one span (found by arithmetic) or the widths differ (walked)."""
    from propdex.encoders.units import Kind, Unit
    from propdex.indexer.store import pack_units, unpack_units

    uniform = [Unit("d", i // 3, ((i, i + 2),), Kind.TOKEN, i // 3) for i in range(9)]
    mixed = uniform[:4] + [Unit("d", 1, ((0, 2), (5, 9)), Kind.TOKEN, 2), Unit("d", 2, (), Kind.TOKEN, 2)] + uniform[4:]
    for units in (uniform, mixed):
        sentences, packed = pack_units(units)
        assert unpack_units("d", sentences, packed) == units
        assert unpack_units("d", sentences, packed, [len(units) - 1, 0]) == [units[-1], units[0]]


@pytest.mark.parametrize("name", ["codes", "codes4"])
def test_a_device_decodes_standalone_codes_as_faiss_does(pair, name):
    """torch's table lookups decode 8-bit codes, and 4-bit codes behind OPQ
    (in the rotated space), to the rows FAISS's stage-2 decoder gives."""
    import torch

    from propdex.indexer.decoding import CodesDecoder
    from propdex.retriever import loading

    root, _ = pair
    manifest = read_manifest(root / name)
    cpu = loading.open_shards(root / name, manifest, False)
    try:
        codec = ann.read_faiss(root / name / manifest["index"]["trained"])
        device = CodesDecoder(codec, manifest["index"].get("vector_norm"), "cpu")
        for shard, entry in zip(cpu, manifest["shards"]):
            codes, scales = ann.read_codes(root / name / entry["name"] / entry["index"], codec, True)
            ids = np.arange(0, entry["vectors"], 7)
            decoded = device.reader(codes, scales)(ids)
            assert isinstance(decoded, torch.Tensor) and decoded.shape == (len(ids), shard.store.decoded_dim)
            np.testing.assert_allclose(decoded.numpy(), shard.store.decoder(ids), rtol=1e-5, atol=1e-6)
    finally:
        loading.close_shards(cpu)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="needs CUDA"))])
def test_stage_two_on_a_device_ranks_as_on_the_cpu(pair, device):
    """Stage 2 with its codes decoded and multiplied by torch on a device
    (a GPU; the CPU stands in where there is none) gives the hits and
    scores of FAISS's decoding (and a float16 store its own), at every
    level, for the same query vectors
    (a GPU's query encoder runs in half precision: that is the encoder's
    difference, not stage 2's)."""
    import torch

    from propdex.retriever import loading

    root, encoder = pair
    for name in ("codes4", "float16"):
        path = root / name
        manifest = read_manifest(path)
        with Searcher.load(path, encoder=encoder) as cpu, \
                Searcher(path, manifest, encoder, loading.open_shards(path, manifest, False, torch.device(device)), None) as other:
            if name == "codes4":  # codes decode on the device; a float16 store's rows stay memory-mapped on the CPU
                rows = other.shards[0].store.vector_rows([0])[0]
                assert isinstance(rows, torch.Tensor) and rows.device.type == device
            for q in QUERIES:
                for level in ("doc", "sentence"):
                    a, b = cpu.search(q, k=10, level=level), other.search(q, k=10, level=level)
                    assert [h.doc_id for h in a] == [h.doc_id for h in b]
                    np.testing.assert_allclose([h.score for h in a], [h.score for h in b], rtol=1e-4)


@pytest.mark.parametrize("factory", ["IVF64,PQ16x4", "IVF64,PQ8", "IVF300,PQ32x4", "OPQ16,IVF64,PQ16x4"])
def test_tables_decode_standalone_codes_to_the_floats_faiss_decodes(factory):
    """Stage 2's table decoder on the CPU (numpy's gather of a sub-vector a
    byte, a list number of one or two bytes) gives FAISS's decoding bit for
    bit, 8-bit codes and 4-bit pairs alike, behind OPQ in the rotated
    space, and scaled to the index's common length as FAISS's decoder
    scales them: the scores do not depend on which decodes."""
    from propdex.indexer.decoding import CodesDecoder

    rng = np.random.default_rng(0)
    x = rng.standard_normal((20000, 64)).astype(np.float32)
    index = faiss.index_factory(64, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    rows = ann.encode(index, x)
    ids = rng.permutation(len(x))[:3000]
    for norm in (None, 1.0):
        want = ann.scoring_decoder(index, rows, norm)[0](ids)
        got = CodesDecoder(index, norm).reader(rows)(ids)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32 and np.array_equal(got, want)
    with pytest.raises(ValueError, match="4 or 8 bits"):
        CodesDecoder(faiss.index_factory(64, "IVF64,Flat", faiss.METRIC_INNER_PRODUCT), None)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_a_fresh_fast_scan_index_finds_every_hit_it_is_asked_for(k):
    """FAISS's fast-scan heap once returned no hit for a query at k = 3 on an
    index built in memory other arrays had just left; stage 1 asks for more."""
    import io

    x = np.random.default_rng(0).standard_normal((3000, 32)).astype(np.float32)
    missing = []
    for rep in range(3):
        dirt = [np.full(n, 7.5, np.float32) for n in (8, 64, 256, 1024)]
        del dirt
        index = faiss.index_factory(32, "IVF16,PQ16x4fs", faiss.METRIC_INNER_PRODUCT)
        index.train(x)
        index.add(x)
        scores, ids = ann.search(index, x[:2], k, nprobe=4)
        print(scores[:, 0], ids[:, 0], file=io.StringIO())  # allocates and frees, as a user's print does
        assert ids.shape == (2, k)
        missing += [rep] * int((ids < 0).any())
    assert not missing
