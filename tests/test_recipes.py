"""A checkpoint's own recipe is read when it loads: propdex's own loads, any other is a one-line error."""
import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import BertModel

from propdex.cli import main
from propdex.encoders import Backbone, Document, load_encoder
from propdex.encoders.recipe import Recipe


def _checkpoint(tmp_path, tiny_dir, name, modules=None, pooling=None, st_config=None, config=None, files=None):
    out = tmp_path / name
    shutil.copytree(tiny_dir, out)
    if modules is not None:
        (out / "modules.json").write_text(json.dumps(
            [{"idx": i, "name": str(i), "path": path, "type": kind} for i, (path, kind) in enumerate(modules)]))
    if pooling is not None:
        (out / "1_Pooling").mkdir()
        (out / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **pooling}))
    if st_config is not None:
        (out / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    if config is not None:
        (out / "config.json").write_text(json.dumps({**json.loads((out / "config.json").read_text()), **config}))
    for f, content in (files or {}).items():
        (out / f).write_text(json.dumps(content))
    return out


ST = "sentence_transformers.models."
MEAN = {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}


def test_a_sentence_transformers_model_that_mean_pools_loads_with_its_recipe(tmp_path, tiny_dir):
    path = _checkpoint(tmp_path, tiny_dir, "mean", [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling"), ("2_Normalize", ST + "Normalize")],
                       MEAN, {"prompts": {}})
    recipe = Backbone.load(str(path), device="cpu").recipe
    assert (recipe.library, recipe.pooling, recipe.normalize, recipe.changes_vectors) == ("sentence-transformers", ("mean",), True, False)
    assert Backbone.load(str(tiny_dir), device="cpu").recipe == Recipe()  # a plain model: propdex's own pooling
    packaged = Backbone.load(device="cpu").recipe  # the packaged MiniLM is one, and changes nothing
    assert packaged.library == "sentence-transformers" and not packaged.changes_vectors


def _dense(folder, n_in, n_out, activation="torch.nn.modules.activation.Tanh"):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"in_features": n_in, "out_features": n_out, "bias": True,
                                                    "activation_function": activation}))
    torch.manual_seed(1)
    save_file({"linear.weight": torch.randn(n_out, n_in), "linear.bias": torch.randn(n_out)}, str(folder / "model.safetensors"))


def test_a_recipe_with_cls_pooling_a_dense_layer_and_prompts_is_followed(tmp_path, tiny_dir):
    """CLS pooling, a Dense layer and e5-style prompts: the vector is the recipe's (recomputed here from the
    backbone's own states), the prompt reaches queries and documents but never becomes a unit, and the manifest says so."""
    path = _checkpoint(tmp_path, tiny_dir, "cls", [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling"), ("2_Dense", ST + "Dense"),
                                                   ("3_Normalize", ST + "Normalize")],
                       {"pooling_mode": "cls"}, {"prompts": {"query": "query: ", "document": "passage: "}})
    _dense(path / "2_Dense", 32, 16)
    single = load_encoder("single", backbone=str(path), device="cpu", title=False)
    assert single.dim == 16 and single.config()["recipe"]["pooling"] == ["cls"]
    backbone, tokenizer = single.backbone, single.backbone.tokenizer
    state = load_file(str(path / "2_Dense" / "model.safetensors"))

    def by_hand(text):
        enc = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            cls = backbone.model(**enc).last_hidden_state[0, 0]
        return torch.nn.functional.normalize(torch.tanh(cls @ state["linear.weight"].T + state["linear.bias"]), dim=0).numpy()

    query = single.encode_queries(["who wrote it"])[0].vectors[0]
    np.testing.assert_allclose(query, by_hand("query: who wrote it"), atol=1e-5)
    assert np.abs(query - by_hand("who wrote it")).max() > 1e-3  # the prompt made a difference
    doc = Document("d", "Some text about zebras. And more.")
    np.testing.assert_allclose(single.encode(single.passages(doc))[0].vectors[0], by_hand("passage: Some text about zebras. And more."),
                               atol=1e-5)
    tokens = load_encoder("tokens", backbone=str(path), device="cpu", title=False)
    units = tokens.encode(tokens.passages(doc))[0].units
    spans = [doc.text[u.spans[0][0]:u.spans[0][1]] for u in units]
    assert spans[0] == "some" or spans[0] == "Some"
    assert "passage" not in spans and tokens.encode_queries(["who wrote it"])[0].vectors.shape[0] == 3  # the prompt is no unit


@pytest.mark.parametrize("name, kwargs, message", [
    ("cnn", {"modules": [("", ST + "Transformer"), ("1_CNN", ST + "CNN")]}, "a CNN module \\(1_CNN\\)"),
    ("mode", {"modules": [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling")], "pooling": {"pooling_mode": "median"}},
     "pools by 'median'"),
    ("dot", {"modules": [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling")], "pooling": MEAN,
             "st_config": {"similarity_fn_name": "dot"}}, "dot product of unnormalised vectors"),
    ("pylate", {"modules": [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling")], "pooling": MEAN,
                "st_config": {"query_prefix": "[Q] ", "document_prefix": "[D] "}}, "PyLate ColBERT checkpoint with a Pooling module"),
    ("colbert-l2", {"config": {"architectures": ["HF_ColBERT"]}, "files": {"artifact.metadata": {"similarity": "l2"}}},
     "colbert-ai checkpoint scored by l2 similarity"),
    ("colbert-flipr", {"files": {"artifact.metadata": {"interaction": "flipr"}}}, "colbert-ai checkpoint scored by .* flipr interaction"),
])
def test_a_recipe_propdex_cannot_follow_is_refused_by_name(tmp_path, tiny_dir, capsys, name, kwargs, message):
    path = _checkpoint(tmp_path, tiny_dir, name, **kwargs)
    with pytest.raises(ValueError, match=message):
        Backbone.load(str(path), device="cpu")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "One sentence."}\n')
    assert main(["index", str(corpus), "--out", str(tmp_path / "idx"), "--backbone", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and ("cannot follow" in err or "pools by" in err)
    assert not (tmp_path / "idx" / "manifest.json").exists()


def _with_linear(path, dim=16, legacy_bin=False):
    """The tiny model as colbert-ai saves a checkpoint: the transformer under `bert.`, the projection beside it;
    `legacy_bin`: as pytorch_model.bin in torch's pre-zip format (older checkpoints)."""
    state = load_file(str(path / "model.safetensors"))
    state = {**{f"bert.{k}": v for k, v in state.items()}, "linear.weight": torch.randn(dim, 32)}
    if legacy_bin:
        (path / "model.safetensors").unlink()
        torch.save(state, path / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    else:
        save_file(state, str(path / "model.safetensors"))
    return path


def test_a_colbert_ai_checkpoint_loads_with_its_settings_or_colbert_ais_defaults(tmp_path, tiny_dir):
    """artifact.metadata's lengths, markers and masking are followed; a checkpoint saved without it reads as
    colbert-ai reads one, with ColBERTConfig's defaults; the transformer's weights load from under `bert.`."""
    meta = {"query_maxlen": 24, "doc_maxlen": 100, "attend_to_mask_tokens": True, "mask_punctuation": False, "dim": 16}
    given = _with_linear(_checkpoint(tmp_path, tiny_dir, "given", config={"architectures": ["HF_ColBERT"]}, files={"artifact.metadata": meta}))
    backbone = Backbone.load(str(given), device="cpu")
    late = backbone.recipe.late
    assert backbone.recipe.library == "colbert-ai" and backbone.recipe.token_dim(32) == 16
    assert (late.query_marker, late.query_length, late.document_length, late.attend_to_expansion, late.skiplist) == ("[unused0]", 24, 100, True, ())
    plain = BertModel.from_pretrained(str(tiny_dir))
    assert torch.equal(backbone.model.embeddings.word_embeddings.weight, plain.embeddings.word_embeddings.weight)
    tokens = load_encoder("tokens", backbone=str(given), device="cpu", title=False)
    query = tokens.encode_queries(["who wrote it?"])[0]
    assert query.vectors.shape == (24, 16) and np.allclose(np.linalg.norm(query.vectors, axis=1), 1, atol=1e-5)
    bare = _with_linear(_checkpoint(tmp_path, tiny_dir, "bare", config={"architectures": ["HF_ColBERT"]}), legacy_bin=True)
    late = Backbone.load(str(bare), device="cpu").recipe.late
    assert (late.document_marker, late.query_length, late.document_length, late.attend_to_expansion) == ("[unused1]", 32, 220, False)
    assert "," in late.skiplist and "." in late.skiplist
    with pytest.raises(ValueError, match="without linear.weight: the checkpoint is damaged"):
        Backbone.load(str(_checkpoint(tmp_path, tiny_dir, "damaged", files={"artifact.metadata": {}})), device="cpu")


def test_a_dense_layer_whose_activation_is_not_torchs_is_refused(tmp_path, tiny_dir):
    path = _checkpoint(tmp_path, tiny_dir, "act", [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling"), ("2_Dense", ST + "Dense")], MEAN)
    _dense(path / "2_Dense", 32, 16, activation="mypackage.Swish")
    with pytest.raises(ValueError, match="runs no checkpoint's own code"):
        Backbone.load(str(path), device="cpu")


@pytest.mark.parametrize("grain, command", [("proposition", "proposition"), ("crossthought", "crossthought"),
                                            ("nugget:weights=nugget", "nugget")])
def test_a_trained_head_refuses_a_backbone_it_was_not_trained_for(tiny_dir, grain, command):
    name, _, option = grain.partition(":")
    options = dict([option.split("=")]) if option else {}
    with pytest.raises(ValueError, match=f"trained for sentence-transformers/all-MiniLM-L6-v2, not for this backbone.*propdex train {command} --backbone"):
        load_encoder(name, backbone=str(tiny_dir), device="cpu", **options)


def test_a_trained_head_takes_the_packaged_minilm_by_its_directory():
    """The same weights by another name (the packaged directory itself) are the backbone the head was trained for."""
    from propdex.encoders.backbone import resolve_backbone

    encoder = load_encoder("proposition", backbone=str(resolve_backbone("sentence-transformers/all-MiniLM-L6-v2")), device="cpu")
    assert encoder.encode_queries(["who wrote it"])[0].vectors.shape[0] == 1
