"""On a GPU the backbone runs in half precision (Backbone.load's default
there); the modules loaded beside it must compute in its dtype. A bf16
backbone on the CPU stands in for the GPU's: every shipped encoder gives the
float32 backbone's vectors, to bf16's precision."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from propdex.encoders import Backbone, load_encoder
from propdex.encoders.base import Document

DOCS = [
    Document("paris", "Paris is the capital of France. It lies on the Seine, which flows to the Channel.", title="Paris"),
    Document("pets", "The cat sat on the mat while the dog slept by the fire.", title="Pets"),
]
SPECS = ["single", "tokens", "proposition", "proposition:beside=1", "nugget", "nugget:weights=lora",
         "crossthought", "crossthought:words=0", "crossthought:weights=crossthought-lora-5"]


@pytest.fixture(scope="module")
def half():
    return Backbone.load(device="cpu", dtype=torch.bfloat16)


def _vectors(spec: str, backbone: Backbone) -> np.ndarray:
    encoder = load_encoder(spec, backbone=backbone)
    docs = encoder.encode([p for d in DOCS for p in encoder.passages(d)])
    queries = encoder.encode_queries(["What is the capital of France?"])
    return np.concatenate([e.vectors for e in docs + queries])


@pytest.mark.parametrize("spec", SPECS)
def test_every_encoder_runs_on_a_half_precision_backbone(spec, minilm, half):
    assert (half.dtype, minilm.dtype) == (torch.bfloat16, torch.float32)
    full, low = _vectors(spec, minilm), _vectors(spec, half)
    assert full.shape == low.shape
    cosine = (full * low).sum(1) / np.linalg.norm(full, axis=1) / np.linalg.norm(low, axis=1)
    assert cosine.min() > 0.99, (spec, cosine.min())


def test_training_through_the_backbone_keeps_float32_weights(tiny_dir):
    """Training that passes gradients through the backbone loads it in
    float32 on every device; on a CPU, autocast changes nothing."""
    bb = Backbone.load(str(tiny_dir), device="cpu", dtype=torch.float32)
    with bb.autocast():
        assert not torch.is_autocast_enabled("cpu")
        x = bb.model(input_ids=torch.tensor([[101, 2000, 102]])).last_hidden_state
    assert bb.dtype == x.dtype == torch.float32
