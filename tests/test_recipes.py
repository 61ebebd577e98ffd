"""A checkpoint's own recipe is read when it loads: propdex's own loads, any other is a one-line error."""
import json
import shutil

import pytest

from propdex.cli import main
from propdex.encoders import Backbone


def _checkpoint(tmp_path, tiny_dir, name, modules=None, pooling=None, st_config=None, config=None, files=()):
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
    for f in files:
        (out / f).write_text("{}")
    return out


ST = "sentence_transformers.models."
MEAN = {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}


def test_a_sentence_transformers_model_that_mean_pools_loads_with_its_recipe(tmp_path, tiny_dir):
    path = _checkpoint(tmp_path, tiny_dir, "mean", [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling"), ("2_Normalize", ST + "Normalize")],
                       MEAN, {"prompts": {}})
    recipe = Backbone.load(str(path), device="cpu").recipe
    assert (recipe.library, recipe.pooling, recipe.normalize) == ("sentence-transformers", "mean_tokens", True)
    assert Backbone.load(str(tiny_dir), device="cpu").recipe.library == ""  # a plain model: propdex's own pooling
    assert Backbone.load(device="cpu").recipe.library == "sentence-transformers"  # the packaged MiniLM is one


@pytest.mark.parametrize("name, kwargs, message", [
    ("cls", {"modules": [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling")],
             "pooling": {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}}, "pools by cls_token"),
    ("prompts", {"modules": [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling")], "pooling": MEAN,
                 "st_config": {"prompts": {"query": "query: ", "document": "passage: "}}}, r"prompts \['document', 'query'\]"),
    ("dense", {"modules": [("", ST + "Transformer"), ("1_Pooling", ST + "Pooling"), ("2_Dense", ST + "Dense")], "pooling": MEAN},
     "a Dense module \\(2_Dense\\)"),
    ("pylate", {"modules": [("", ST + "Transformer"), ("1_Dense", "pylate.models.Dense.Dense")],
                "st_config": {"query_prefix": "[Q] ", "document_prefix": "[D] "}}, "PyLate ColBERT checkpoint"),
    ("colbert", {"config": {"architectures": ["HF_ColBERT"]}, "files": ["artifact.metadata"]}, "colbert-ai checkpoint"),
])
def test_a_recipe_propdex_cannot_follow_is_refused_by_name(tmp_path, tiny_dir, capsys, name, kwargs, message):
    path = _checkpoint(tmp_path, tiny_dir, name, **kwargs)
    with pytest.raises(ValueError, match=message):
        Backbone.load(str(path), device="cpu")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "One sentence."}\n')
    assert main(["index", str(corpus), "--out", str(tmp_path / "idx"), "--backbone", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "cannot follow" in err
    assert not (tmp_path / "idx" / "manifest.json").exists()
