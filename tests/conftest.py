"""Shared fixtures: the real MiniLM backbone, and a tiny random one for fast unit tests."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from paths import DATA

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_600.json"


@pytest.fixture(scope="session")
def minilm():
    from propdex.encoders import Backbone

    return Backbone.load(device="cpu")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer BERT with MiniLM's tokenizer, saved like any HF model."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from propdex.encoders.backbone import resolve_backbone

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_backbone("sentence-transformers/all-MiniLM-L6-v2")))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128,
    )
    path = tmp_path_factory.mktemp("tiny-bert")
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny(tiny_dir):
    from propdex.encoders import Backbone

    return Backbone.load(str(tiny_dir), device="cpu", max_length=64)


@pytest.fixture(scope="session")
def hotpot_questions() -> list[dict]:
    return json.loads(HOTPOT.read_text())


@pytest.fixture(scope="session")
def hotpot_docs():
    """The HotpotQA paragraphs of the first 40 questions, via the real reader."""
    from propdex.indexer.readers import read_corpus

    questions = json.loads(HOTPOT.read_text())[:40]
    titles = {t for q in questions for t, _ in q["context"]}
    return [d for d in read_corpus([HOTPOT]) if getattr(d, "id", None) in titles]
