"""The ONNX Runtime backbone (`runtime=onnx`, `onnx-int8`) against eager torch, on real MiniLM."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")

from propdex.encoders import Backbone, load_encoder  # noqa: E402
from propdex.encoders.base import hidden_states, tokenize  # noqa: E402
from propdex.indexer.build import IndexWriter  # noqa: E402
from propdex.retriever import Searcher  # noqa: E402


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("propdex-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROPDEX_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def onnx(cache):
    return Backbone.load(device="cpu", runtime="onnx")


@pytest.fixture(scope="module")
def int8(cache):
    return Backbone.load(device="cpu", runtime="onnx-int8")


def _passages(hotpot_docs, n=24):
    return [d.text[:400] for d in hotpot_docs[:n]]


def test_onnx_states_equal_torch_states_layer_by_layer(minilm, onnx, hotpot_docs):
    texts = _passages(hotpot_docs, 12)  # two of the session's chunks, each cut to its own length
    enc, *_ = tokenize(minilm.tokenizer, texts, [""] * len(texts), 128)
    for layers in (None, (2, 4, 6), (-1,)):
        with torch.inference_mode():
            want = hidden_states(minilm, enc, layers).float()
        got = hidden_states(onnx, enc, layers)
        assert got.shape == want.shape
        real = enc["attention_mask"].bool()
        assert torch.allclose(got[real], want[real], atol=2e-4), (layers, (got[real] - want[real]).abs().max())


def test_int8_vectors_stay_close_to_torch_and_rank_the_same(minilm, int8, hotpot_docs):
    def vectors(backbone):
        encoder = load_encoder("single", backbone=backbone)
        return np.concatenate([e.vectors for e in encoder.encode([p for d in hotpot_docs[:40] for p in encoder.passages(d)])])

    want, got = vectors(minilm), vectors(int8)
    cos = (want * got).sum(1) / np.linalg.norm(want, axis=1) / np.linalg.norm(got, axis=1)
    assert cos.min() > 0.97 and cos.mean() > 0.99
    assert not np.allclose(want, got, atol=1e-4)  # int8 weights do change the numbers
    # Each passage is still its own int8 vector's nearest neighbour among the torch vectors.
    assert ((got @ want.T).argmax(1) == np.arange(len(want))).all()


def test_int8_vector_of_a_text_does_not_depend_on_its_batch(int8, hotpot_docs):
    encoder = load_encoder("single", backbone=int8)
    passages = [p for d in hotpot_docs[:12] for p in encoder.passages(d)]
    together = encoder.encode(passages)
    alone = encoder.encode(passages[3:4])
    assert np.array_equal(together[3].vectors, alone[0].vectors)


def test_export_leaves_the_torch_model_as_it_was(cache, hotpot_docs, tmp_path, monkeypatch):
    """The same Backbone object still runs torch for adapted and trained models after exporting."""
    monkeypatch.setenv("PROPDEX_CACHE", str(tmp_path))
    backbone = Backbone.load(device="cpu", runtime="onnx")
    texts = _passages(hotpot_docs, 4)
    enc, *_ = tokenize(backbone.tokenizer, texts, [""] * len(texts), 128)
    with torch.inference_mode():
        before = backbone.model(**enc).last_hidden_state
    backbone.session  # noqa: B018 - exports now
    assert not backbone.model.training
    with torch.inference_mode():
        assert torch.equal(backbone.model(**enc).last_hidden_state, before)


def test_export_is_made_once_and_reused(cache, onnx):
    onnx.session  # noqa: B018 - made on first use
    folders = list((cache / "onnx").iterdir())
    assert len(folders) == 1 and not list(folders[0].glob("*.part"))
    graph = folders[0] / "model.onnx"
    stamp = graph.stat().st_mtime_ns
    again = Backbone.load(device="cpu", runtime="onnx")
    assert again.session.path == graph
    assert graph.stat().st_mtime_ns == stamp


def test_search_with_onnx_queries_finds_what_torch_indexed(tmp_path, minilm, onnx, hotpot_docs):
    IndexWriter(tmp_path / "idx", load_encoder("single", backbone=minilm)).build(hotpot_docs[:30])
    doc = hotpot_docs[7]
    query = doc.text.split(". ")[0]
    with Searcher.load(tmp_path / "idx", device="cpu", runtime="onnx") as searcher:
        assert searcher.encoder.backbone.runtime == "onnx"
        assert searcher.search(query, k=1)[0].doc_id == doc.id
    # The library's front door (and `propdex serve --runtime`, which opens the index through it) takes it too.
    import propdex

    with propdex.Index.open(tmp_path / "idx", device="cpu", runtime="onnx") as index:
        assert index.encoder.backbone.runtime == "onnx"
        assert index.search(query, k=1)[0].doc_id == doc.id


def test_bad_runtimes_fail_with_one_line():
    with pytest.raises(ValueError, match="unknown runtime 'tensorrt'"):
        Backbone.load(device="cpu", runtime="tensorrt")
    from propdex.encoders.runtime import check_runtime

    with pytest.raises(ValueError, match="runs on the CPU"):
        check_runtime("onnx", torch.device("cuda"))


def test_index_cli_records_the_runtime(tmp_path, cache, hotpot_docs):
    import json

    from propdex.cli import main

    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in hotpot_docs[:5]))
    assert main(["-q", "index", str(corpus), "--out", str(tmp_path / "idx"), "--encoder", "single", "--runtime", "onnx-int8", "--device", "cpu"]) == 0
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["backbone"]["runtime"] == "onnx-int8"


def test_bench_runtimes_take_turns_and_compare_with_torch(cache):
    from paths import DATA
    from propdex.eval.bench import runtimes

    result = runtimes(DATA / "beir" / "scifact", 6, ["onnx-int8"], repeats=2)
    assert result["docs"] == 6 and set(result) >= {"torch", "onnx-int8"}
    torch_row, int8_row = result["torch"], result["onnx-int8"]
    assert len(torch_row["seconds_each"]) == len(int8_row["seconds_each"]) == 2
    assert torch_row["speedup"] == 1.0 and torch_row["cosine_to_torch_min"] > 0.9999
    assert 0.97 < int8_row["cosine_to_torch_min"] < 0.99999
    assert int8_row["speedup"] == pytest.approx(torch_row["seconds"] / int8_row["seconds"], rel=0.05)  # seconds are rounded to 10 ms
