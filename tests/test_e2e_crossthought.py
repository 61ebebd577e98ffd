"""End to end: a Cross-Thought index of real HotpotQA paragraphs with MiniLM and the shipped weights."""
from __future__ import annotations

import numpy as np
import pytest

from propdex.encoders import Kind, load_encoder
from propdex.indexer.build import IndexWriter
from propdex.retriever import Searcher

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def encoder(minilm):
    return load_encoder("crossthought", backbone=minilm)


def test_crossthought_index_stores_one_unit_per_short_sequence_and_finds_the_paragraph(encoder, minilm, hotpot_docs, tmp_path):
    docs = hotpot_docs[:60]
    out = tmp_path / "ct"
    manifest = IndexWriter(out, encoder).build(docs)
    assert manifest["encoder"]["name"] == "crossthought" and manifest["encoder"]["weights"] == "crossthought-3"
    sequences = [p for d in docs for p in encoder.passages(d)]
    assert manifest["counts"]["vectors"] == len(sequences) > len(docs)
    for d in docs:
        mine = encoder.passages(d)
        pieces = [t for p in mine for t in minilm.tokenizer(p.text, add_special_tokens=False)["input_ids"]]
        assert pieces == minilm.tokenizer(d.text, add_special_tokens=False)["input_ids"]
        assert all(len(minilm.tokenizer(p.text, add_special_tokens=False)["input_ids"]) <= 64 for p in mine)
    assert encoder.dim == 4 * 384 and encoder.attention_blocks == 0
    found = found_sentence = 0
    with Searcher.load(out, encoder=encoder) as searcher:
        for target in docs[:20]:
            hits = searcher.search(target.sentence_text(0), k=3)
            found += hits[0].doc_id == target.id
            for h in hits:
                assert all(u.kind == Kind.SLOT for u in h.units)
                assert all(0 <= a < b <= len(h.sentence_text) for a, b in h.spans)
                assert -2 <= h.score <= 2  # two cosines
            sentences = searcher.search(target.sentence_text(0), k=3, level="sentence")
            found_sentence += (sentences[0].doc_id, sentences[0].sentence_index) == (target.id, 0)
        pool = [d.id for d in docs[10:20]]
        (within,) = searcher.search_batch([docs[12].sentence_text(0)], k=20, within=[pool])
        assert {h.doc_id for h in within} <= set(pool) and within[0].doc_id == docs[12].id
    # A paragraph's own first sentence, among 60 paragraphs on 6 topics
    # (the shipped weights find 17 of 20 at both levels).
    assert found >= 14 and found_sentence >= 12


def test_a_sequence_vector_is_its_slots_and_singles_vector_of_the_same_sequence(encoder, minilm, hotpot_docs):
    """The default vector: the slot part of `words=0`, scaled to unit length,
    then exactly what `single` gives the same sequence; a query's inner
    product with it is the slots' cosine plus the means' cosine."""
    slots_alone = load_encoder("crossthought", backbone=minilm, words=0)
    single = load_encoder("single", backbone=minilm)
    doc = next(d for d in hotpot_docs if len(encoder.passages(d)) >= 2)
    passages = encoder.passages(doc)
    both = np.concatenate([e.vectors for e in encoder.encode(passages)])
    alone = np.concatenate([e.vectors for e in slots_alone.encode(passages)])
    mean = np.concatenate([e.vectors for e in single.encode(passages)])
    assert both.shape == (len(passages), 4 * 384)
    assert np.allclose(both[:, :1152], alone / np.linalg.norm(alone, axis=1, keepdims=True), atol=1e-5)
    assert np.allclose(both[:, 1152:], mean, atol=1e-5)
    query = "Which city hosted the 1936 Summer Olympics?"
    (q,), (q_alone,), (q_mean,) = (e.encode_queries([query]) for e in (encoder, slots_alone, single))
    cos = (q_alone.vectors / np.linalg.norm(q_alone.vectors)) @ (alone / np.linalg.norm(alone, axis=1, keepdims=True)).T
    assert np.allclose(q.vectors @ both.T, cos + q_mean.vectors @ mean.T, atol=1e-4)


def test_an_index_of_slots_alone_from_before_words_reopens_as_it_was_built(minilm, hotpot_docs, tmp_path):
    """A manifest that predates `words` stored the slots alone: it reopens
    with words=0 (attention scoring), and a default build refuses to resume it."""
    import json

    out = tmp_path / "old"
    IndexWriter(out, load_encoder("crossthought", backbone=minilm, words=0)).build(hotpot_docs[:4])
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["encoder"]["words"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    with Searcher.load(out) as searcher:
        assert not searcher.encoder.words and searcher.encoder.attention_blocks == 3 * 12
        assert 0 < searcher.search(hotpot_docs[0].sentence_text(0), k=1)[0].score <= 1  # an attention weight
    with pytest.raises(ValueError, match="other encoder"):
        IndexWriter(out, load_encoder("crossthought", backbone=minilm)).build(hotpot_docs[:4])


def test_control_weights_score_by_slot_cosine(minilm):
    control = load_encoder("crossthought", backbone=minilm, weights="crossthought-mlm-1", words=0)
    assert control.attention_blocks == 0 and control.dim == 384
    (e,) = control.encode_queries(["Which city hosted the 1936 Summer Olympics?"])
    assert np.allclose(np.linalg.norm(e.vectors, axis=1), 1, atol=1e-5)


def test_slots_read_their_own_sequence_and_leave_the_backbone_states_untouched(minilm):
    """On real MiniLM: the words' states are exactly the backbone's own (no
    word reads a slot), and a sequence's slots do not change with the other
    sequences of the batch (they see only their own sequence)."""
    import torch

    encoder = load_encoder("crossthought", backbone=minilm)
    texts = ["The Eiffel Tower is in Paris.", "Photosynthesis turns light into chemical energy in plants.", "Ada Lovelace wrote the first program."]
    tok = minilm.tokenizer
    together = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        slots, words = encoder.ct.states(together["input_ids"], together["attention_mask"])
        plain = minilm.model(**together).last_hidden_state
        for i, text in enumerate(texts):
            alone = tok([text], return_tensors="pt")
            own, _ = encoder.ct.states(alone["input_ids"], alone["attention_mask"])
            assert torch.allclose(own[0], slots[i], atol=1e-4)
    real = together["attention_mask"].bool()
    assert torch.allclose(words[real], plain[real], atol=1e-5)
    assert slots.shape == (3, 3, 384)


def test_an_index_built_with_the_inline_lora_weights_reopens_with_them(minilm):
    """Before the frozen reader, `crossthought-5` named LoRA weights with the
    slots inline; an index that recorded that name and its sha256 gets them."""
    from propdex.encoders import encoder_from_config
    from propdex.encoders.provenance import verified_sha256
    from propdex.encoders import weights_path

    sha = verified_sha256(weights_path("crossthought-lora-5"))
    old = encoder_from_config({"name": "crossthought", "backbone": minilm.name, "dim": 1920, "weights": "crossthought-5",
                               "weights_sha256": sha, "title": True}, backbone=minilm)
    assert old.ct.inline and old.weights_sha256 == sha and old.config()["weights"] == "crossthought-5"
    new = load_encoder("crossthought", backbone=minilm)
    assert not new.ct.inline and new.weights_sha256 != sha
