"""Bring your own model: checkpoints saved by the real libraries, built here
from the packaged MiniLM (no hub is reachable), give in propdex the vectors
and the rankings their own library gives."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sysconfig
import venv
from pathlib import Path

import numpy as np
import pytest
from paths import DATA

import propdex
from propdex.encoders import Document, load_encoder
from propdex.encoders.backbone import resolve_backbone
from propdex.indexer.readers import read_corpus

pytestmark = pytest.mark.slow
SCIFACT = DATA / "beir" / "scifact"
QUERIES = ["what causes malaria?", "Effects of vitamin D on bone density in older adults", "microRNA regulation " * 90]
DOCS = ["Malaria is caused by Plasmodium parasites transmitted by mosquitoes.",
        "Vitamin D supplementation improved bone mineral density. A second sentence follows here, and it is longer."]


@pytest.fixture(scope="module")
def st_models(tmp_path_factory):
    """Three sentence-transformers checkpoints as the library saves them: bge-style (CLS pooling, a Dense
    projection, normalised, e5 prompts), several modes that leave the prompt out, and last-token pooling."""
    st = pytest.importorskip("sentence_transformers")
    import torch
    from sentence_transformers.models import Dense, Normalize, Pooling, Transformer

    minilm = str(resolve_backbone("sentence-transformers/all-MiniLM-L6-v2"))
    torch.manual_seed(0)
    recipes = {
        "cls-dense-prompts": ([Pooling(384, pooling_mode="cls"), Dense(384, 256, activation_function=torch.nn.Tanh()), Normalize()],
                              {"query": "query: ", "document": "passage: "}),
        "modes-without-prompt": ([Pooling(384, pooling_mode_max_tokens=True, pooling_mode_mean_tokens=True,
                                          pooling_mode_weightedmean_tokens=True, include_prompt=False)],
                                 {"query": "Represent this sentence for searching relevant passages: ", "passage": "passage: "}),
        "lasttoken": ([Pooling(384, pooling_mode="lasttoken")], {}),
    }
    out = {}
    for name, (modules, prompts) in recipes.items():
        folder = tmp_path_factory.mktemp(name)
        st.SentenceTransformer(modules=[Transformer(minilm), *modules], prompts=prompts, device="cpu").save(str(folder))
        out[name] = folder
    return out


@pytest.mark.parametrize("name", ["cls-dense-prompts", "modes-without-prompt", "lasttoken"])
def test_single_makes_the_vectors_sentence_transformers_makes(st_models, name):
    from sentence_transformers import SentenceTransformer

    path = str(st_models[name])
    theirs = SentenceTransformer(path, device="cpu")
    ours = load_encoder("single", backbone=path, device="cpu", title=False)
    queries = np.stack([e.vectors[0] for e in ours.encode_queries(QUERIES)])  # the last one is truncated, as theirs is
    assert np.abs(queries - theirs.encode_query(QUERIES, normalize_embeddings=True)).max() < 1e-5
    docs = [Document(str(i), t) for i, t in enumerate(DOCS)]
    vectors = np.stack([ours.encode(ours.passages(d))[0].vectors[0] for d in docs])
    assert np.abs(vectors - theirs.encode_document(DOCS, normalize_embeddings=True)).max() < 1e-5
    assert json.loads(json.dumps(ours.config()))["recipe"]["library"] == "sentence-transformers"


def test_rankings_over_scifact_equal_sentence_transformers_own(st_models, tmp_path):
    """300 SciFact queries over 1,000 abstracts that fit one window (the library truncates a longer one,
    propdex reads all of it): propdex's index returns the top 10 of the library's own vectors, in their order."""
    from sentence_transformers import SentenceTransformer

    path = str(st_models["cls-dense-prompts"])
    encoder = load_encoder("single", backbone=path, device="cpu", title=False)
    docs, queries = _scifact_slice(encoder)
    theirs = SentenceTransformer(path, device="cpu")
    # The library's own vectors, the documents' held at the index's float16 (near-ties would swap otherwise).
    stored = theirs.encode_document([d.text for d in docs], normalize_embeddings=True).astype(np.float16).astype(np.float32)
    scores = theirs.encode_query(queries, normalize_embeddings=True) @ stored.T
    want = [[docs[j].id for j in np.argsort(-row, kind="stable")[:10]] for row in scores]
    index = propdex.Index.create(tmp_path / "idx", encoder, store="float16")
    index.add({"id": d.id, "text": d.text} for d in docs)
    got = [[h.doc_id for h in hits] for hits in index.search_batch(queries, k=10)]
    index.close()
    assert sum(g == w for g, w in zip(got, want)) == 300


@pytest.fixture(scope="module")
def pylate_model(tmp_path_factory):
    """A PyLate ColBERT checkpoint as the library makes one from MiniLM: [Q]/[D] markers added to the vocabulary,
    a 128-d projection, queries expanded to 32 positions, documents cut at 300 (past the 256 MiniLM was saved
    with) with punctuation skipped."""
    models = pytest.importorskip("pylate.models")
    import torch

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("pylate")
    models.ColBERT(model_name_or_path=str(resolve_backbone("sentence-transformers/all-MiniLM-L6-v2")), device="cpu",
                   document_length=300).save(str(folder))
    return folder


def test_tokens_makes_the_vectors_pylate_makes(pylate_model):
    from pylate import models

    theirs = models.ColBERT(model_name_or_path=str(pylate_model), device="cpu")
    ours = load_encoder("tokens", backbone=str(pylate_model), device="cpu", title=False)
    assert ours.dim == 128 and ours.config()["recipe"]["late"]["query_length"] == 32
    for want, got in zip(theirs.encode(QUERIES, is_query=True), ours.encode_queries(QUERIES)):
        assert want.shape == got.vectors.shape == (32, 128) and np.abs(want - got.vectors).max() < 1e-5
    for text, want in zip(DOCS, theirs.encode(DOCS, is_query=False)):
        got = ours.encode(ours.passages(Document("d", text)))[0]
        assert want.shape == got.vectors.shape and np.abs(want - got.vectors).max() < 1e-5
        # [CLS], [D] and [SEP] are vectors for the document and spans of no sentence; the words are tokens of the text.
        assert [u.kind.name for u in got.units][:2] == ["SPECIAL", "SPECIAL"] and got.units[-1].kind.name == "SPECIAL"
        assert text[slice(*got.units[2].spans[0])] in text.split()[0]
    with pytest.raises(ValueError, match="index it with tokens"):
        load_encoder("single", backbone=str(pylate_model), device="cpu")


def test_rankings_over_scifact_equal_pylate_own(pylate_model, tmp_path):
    """300 SciFact queries over 1,000 abstracts that fit the checkpoint's 300 positions: propdex's index, every
    document re-scored (the slice is stage 2's), returns the MaxSim top 10 of PyLate's own vectors (the
    documents' held at the index's float16), in their order. Stage 1 is left out: its candidates come from
    each query vector's nearest document vectors, and in this untrained projection the [MASK]s' and specials'
    neighbours are much the same in every document, so they say little about which to re-score."""
    from pylate import models

    encoder = load_encoder("tokens", backbone=str(pylate_model), device="cpu", title=False)
    docs, queries = _scifact_slice(encoder)
    theirs = models.ColBERT(model_name_or_path=str(pylate_model), device="cpu")
    stored = theirs.encode([d.text for d in docs], is_query=False, batch_size=64)
    agree = _rankings_agree(encoder, docs, queries, theirs.encode(queries, is_query=True), np.concatenate(stored),
                            [len(d) for d in stored], tmp_path)
    assert len(docs) == 1000 and agree == 300


def _scifact_slice(encoder):
    """The first 1,000 SciFact abstracts that fit one of the encoder's windows (a library truncates a longer one,
    propdex reads all of it), and the first 300 queries."""
    fits = (d for d in read_corpus([SCIFACT / "corpus.jsonl"]) if len(encoder.passages(Document(d.id, d.text))) == 1)
    queries = [json.loads(line)["text"] for line in itertools.islice(open(SCIFACT / "queries.jsonl"), 300)]
    return list(itertools.islice(fits, 1000)), queries


# MaxSim (a sum over 32 query vectors) moved by float16 rounding the stored vectors one way or the other.
TIE = 1e-3


def _rankings_agree(encoder, docs, queries, query_vectors, flat, doclens, tmp_path) -> int:
    """On how many queries propdex's index, every document re-scored, returns the MaxSim top 10 of a library's own
    vectors (`flat`: the documents' concatenated, `doclens` each one's count; held at the index's float16), in
    their order. Two documents whose MaxSim under the library's vectors differ by less than TIE may come in
    either order: the index holds propdex's vectors, equal to the library's to 1e-5 before float16 rounds them,
    and a rounding that falls the other way can swap a near-tie."""
    flat = np.asarray(flat).astype(np.float16).astype(np.float32)
    owner = np.repeat(np.arange(len(docs)), doclens)
    scores, want = [], []
    for q in query_vectors:
        best = np.full((len(docs), len(q)), -np.inf, dtype=np.float32)
        np.maximum.at(best, owner, flat @ q.T)
        scores.append(best.sum(1))
        want.append([docs[j].id for j in np.argsort(-scores[-1], kind="stable")[:10]])
    index = propdex.Index.create(tmp_path / "idx", encoder, store="float16")
    index.add({"id": d.id, "text": d.text} for d in docs)
    got = [[h.doc_id for h in hits] for hits in index.search_batch(queries, k=10, candidates=1000, rerank=1000)]
    index.close()
    at = {d.id: i for i, d in enumerate(docs)}

    def agrees(g: list[str], w: list[str], s: np.ndarray) -> bool:
        return g == w or (len(g) == len(w) and np.abs(s[[at[i] for i in g]] - s[[at[i] for i in w]]).max() < TIE)

    return sum(agrees(g, w, s) for g, w, s in zip(got, want, scores))


INTEROP = Path(__file__).parent / "interop"


@pytest.fixture(scope="module")
def colbert_ai(tmp_path_factory):
    """colbert-ai in an environment of its own (tests/interop/colbert_ai.txt says why), and a checkpoint it makes
    from MiniLM: [unused0]/[unused1] markers, a 128-d projection, queries expanded to 32 positions, documents cut
    at 300 (past the 256 MiniLM was saved with) with punctuation masked. Returns the checkpoint and a function
    that runs colbert-ai's own Checkpoint on texts (queries, documents) and gives back its vectors."""
    root = tmp_path_factory.mktemp("colbert-ai")
    env = root / "env"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # The run's own packages (torch above all) come after the environment's pins, which win.
    ours = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    (Path(site) / "propdex-test-run.pth").write_text("\n".join(sorted(ours)) + "\n")
    pip = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "-r", INTEROP / "colbert_ai.txt"],
                         capture_output=True, text=True)
    if pip.returncode:
        pytest.skip(f"colbert-ai could not be installed beside transformers 4: {pip.stderr.strip().splitlines()[-1:]}")
    script = INTEROP / "colbert_ai_reference.py"
    offline = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

    def run(*args):
        done = subprocess.run([python, script, *map(str, args)], capture_output=True, text=True, env=offline, cwd=root)
        assert done.returncode == 0, done.stderr[-3000:]

    checkpoint = root / "checkpoint"
    run("make", resolve_backbone("sentence-transformers/all-MiniLM-L6-v2"), checkpoint)

    def encode(queries=(), documents=()):
        texts, out = root / "texts.json", root / "vectors.npz"
        texts.write_text(json.dumps({"queries": list(queries), "documents": list(documents)}))
        run("encode", checkpoint, texts, out)
        with np.load(out) as got:
            return {k: got[k] for k in got.files}

    return checkpoint, encode


def test_tokens_makes_the_vectors_colbert_ai_makes(colbert_ai):
    checkpoint, theirs = colbert_ai
    ours = load_encoder("tokens", backbone=str(checkpoint), device="cpu", title=False)
    late = ours.config()["recipe"]["late"]
    assert ours.dim == 128 and ours.config()["recipe"]["library"] == "colbert-ai"
    assert (late["query_marker"], late["document_marker"], late["query_length"], late["document_length"]) == ("[unused0]", "[unused1]", 32, 300)
    want = theirs(QUERIES, DOCS)
    got = ours.encode_queries(QUERIES)
    assert want["queries"].shape == (3, 32, 128)
    for w, g in zip(want["queries"], got):
        assert np.abs(w - g.vectors).max() < 1e-5
    flat = np.concatenate([ours.encode(ours.passages(Document("d", t)))[0].vectors for t in DOCS])
    assert want["documents"].shape == flat.shape and np.abs(want["documents"] - flat).max() < 1e-5
    with pytest.raises(ValueError, match="index it with tokens"):
        load_encoder("single", backbone=str(checkpoint), device="cpu")


def test_rankings_over_scifact_equal_colbert_ai_own(colbert_ai, tmp_path):
    """As for PyLate: 300 SciFact queries over 1,000 abstracts that fit the checkpoint's 300 positions, every
    document re-scored; propdex's top 10 is the MaxSim top 10 of colbert-ai's own vectors (held at float16)."""
    checkpoint, theirs = colbert_ai
    encoder = load_encoder("tokens", backbone=str(checkpoint), device="cpu", title=False)
    docs, queries = _scifact_slice(encoder)
    vectors = theirs(queries, [d.text for d in docs])
    agree = _rankings_agree(encoder, docs, queries, vectors["queries"], vectors["documents"], vectors["doclens"], tmp_path)
    assert len(docs) == 1000 and agree == 300
