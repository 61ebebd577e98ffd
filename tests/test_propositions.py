"""Propositions: words and spans, the segmenters, the sub-sentence encoder."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from encoders.segment import (
    ClauseSplitter, PairSegmenter, anchor_targets, anchors, jaccard_matches, segmentation_prf, word_spans, words,
)
from encoders.training.data import propsegment_sentences
from paths import DATA

PROPSEGMENT = DATA / "propsegment" / "v1"
ODD_TEXTS = [
    "",
    "Hello",
    " ".join(["word"] * 250 + ["and", "then", ",", "more"] * 63),  # ~500 words
    "北京是中华人民共和国的首都，也是全国的政治中心。",
    "القاهرة هي عاصمة مصر وأكبر مدنها.",
    "   \n\t  ",
    "!!! ??? ...",
]


@pytest.fixture(scope="module")
def sentences():
    return propsegment_sentences(PROPSEGMENT, "dev") + propsegment_sentences(PROPSEGMENT, "test")


def test_words_reproduce_propsegment_tokens(sentences):
    import json

    gold = {}
    for split in ("dev", "test"):
        for cluster in json.loads((PROPSEGMENT / f"document_clusters.{split}.json").read_text()):
            for doc in cluster["documents"]:
                for i, s in enumerate(doc["sentences"]):
                    gold[(str(doc["document_id"]), i)] = [(t["character_offset_of_token_in_sentence"], t["text"]) for t in s["tokens"]]
    for s in sentences:
        assert [(int(a), s.text[a:b]) for a, b in s.words] == gold[(s.doc, s.index)]


def test_token_indices_to_char_spans_to_subword_mask_round_trip(sentences, tiny):
    """A proposition's words -> char spans -> subword tokens under the mask ->
    the words those subwords fall in: the same words (every word the tokenizer
    keeps)."""
    checked = 0
    for s in sentences[:150]:
        enc = tiny.tokenizer(s.text, add_special_tokens=False, return_offsets_mapping=True)
        sub = np.array(enc["offset_mapping"]).reshape(-1, 2)
        kept = {i for i, (a, b) in enumerate(s.words) if ((sub[:, 0] < b) & (sub[:, 1] > a)).any()}
        for prop in s.propositions:
            spans = word_spans(s.text, s.words, prop)
            assert all(0 <= a < b <= len(s.text) for a, b in spans)
            under = np.zeros(len(sub), dtype=bool)
            for a, b in spans:
                under |= (sub[:, 0] < b) & (sub[:, 1] > a)
            back = {i for i, (a, b) in enumerate(s.words) if ((sub[under, 0] < b) & (sub[under, 1] > a)).any()}
            assert back == set(prop) & kept
            checked += 1
    assert checked > 300


def test_anchors_are_distinct_words_of_their_proposition():
    props = [(0, 1, 2, 5), (0, 1, 3, 4), (0, 1, 6)]
    a = anchors(props)
    assert a == [5, 4, 6]
    is_anchor, member = anchor_targets(7, props)
    assert is_anchor.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert np.flatnonzero(member[5]).tolist() == [0, 1, 2, 5]


def test_pair_segmenter_decodes_perfect_scores_back_to_the_propositions(tiny, sentences):
    """Decoding is exact: logits that equal the targets give back the gold
    propositions (those whose anchor no other proposition shares)."""
    seg = PairSegmenter(tiny, PairSegmenter.default_config(tiny.model.config.num_hidden_layers))
    for s in sentences[:40]:
        is_anchor, member = anchor_targets(len(s.words), s.propositions)

        class Oracle(torch.nn.Module):
            def forward(self, x, mask, clauses):
                return torch.from_numpy(20 * is_anchor - 10)[None], torch.from_numpy(20 * member - 10)[None]

        seg.head = Oracle()
        got = set(seg.decode(torch.zeros(len(s.words), tiny.dim), s.text, s.words))
        unique = [p for p, a in zip(s.propositions, anchors(s.propositions)) if anchors(s.propositions).count(a) == 1]
        assert set(unique) <= got
        assert len(got) == len(set(anchors(s.propositions)))


@pytest.mark.parametrize("text", ODD_TEXTS, ids=["empty", "one-word", "500-words", "chinese", "arabic", "blank", "punct"])
def test_segmenters_return_valid_propositions_for_any_text(tiny, text):
    n = len(words(text))
    for seg in (ClauseSplitter(), PairSegmenter(tiny, PairSegmenter.default_config(tiny.model.config.num_hidden_layers))):
        (props,) = seg.segment([text])
        for p in props:
            assert p and list(p) == sorted(set(p)) and all(0 <= i < n for i in p)
            for a, b in word_spans(text, words(text), p):
                assert 0 <= a < b <= len(text) and text[a:b].strip()
    assert ClauseSplitter().segment(["The cat sat, and the dog ran."]) == [[(0, 1, 2), (4, 5, 6, 7)]]


def test_segmentation_measure_matches_one_to_one():
    gold = [(0, 1, 2, 3, 4), (5, 6, 7)]
    assert jaccard_matches([(0, 1, 2, 3), (0, 1, 2, 3, 4)], gold, 0.8) == 1  # one gold, matched once
    assert jaccard_matches([(0, 1, 2, 3), (5, 6)], gold, 0.5) == 2
    prf = segmentation_prf([[(0, 1, 2, 3, 4), (9,)]], [gold], 0.8)
    assert prf == {"precision": 0.5, "recall": 0.5, "f1": 0.5}


def test_supcon_prefers_positives_together_and_same_sentence_negatives_apart():
    from encoders.training.proposition import supcon

    labels = torch.tensor([0, 0, 1, 1])
    good = torch.nn.functional.normalize(torch.tensor([[1.0, 0], [1, 0.05], [0, 1], [0.05, 1]]), dim=-1)
    bad = good[[0, 2, 1, 3]]
    assert supcon(good, labels, 0.05) < supcon(bad, labels, 0.05)
    # Restricted to its own group, a negative from another group no longer counts.
    near = torch.nn.functional.normalize(torch.tensor([[1.0, 0], [0.6, 0.8], [1, 0.01], [0, 1]]), dim=-1)
    labels = torch.tensor([0, 0, 1, 1])
    assert supcon(near, labels, 0.1, groups=torch.tensor([0, 0, 1, 1])) < supcon(near, labels, 0.1)
    z = torch.nn.functional.normalize(torch.randn(6, 8), dim=-1).requires_grad_()
    supcon(z, torch.tensor([0, 0, 1, 1, 2, 2]), 0.1).backward()
    assert z.grad is not None and z.grad.abs().sum() > 0


@pytest.fixture(scope="module")
def tiny_encoder(tiny, tiny_dir, tmp_path_factory):
    from encoders.proposition import PropositionEncoder, PropositionHead
    from encoders.provenance import save_weights

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("proposition")
    head = PropositionHead(2 * tiny.dim, 48, 16)
    config = {"backbone": str(tiny_dir), "dim": 2 * tiny.dim, "layers": [0, 2], "hidden": 48, "out_dim": 16}
    save_weights({f"head.{k}": v for k, v in head.state_dict().items()}, root / "head", config)
    PairSegmenter(tiny, PairSegmenter.default_config(tiny.model.config.num_hidden_layers)).save(root / "segmenter", {"backbone": str(tiny_dir)})
    return PropositionEncoder(tiny, head=str(root / "head"), segmenter=str(root / "segmenter"))


def test_encoder_shape_normalisation_determinism(tiny_encoder):
    from encoders import Document, Passage
    from encoders.text import split_sentences

    text = "Mark Ruffalo is an American actor, born in Kenosha. He directed a film in 2010, which won a prize."
    doc = Document("d", text, sentences=tuple(split_sentences(text)))
    passages = tiny_encoder.passages(doc)
    assert len(passages) == 2  # one sentence each
    first = tiny_encoder.encode(passages)
    again = tiny_encoder.encode(passages)
    for a, b, p in zip(first, again, passages):
        assert a.vectors.shape == (len(a.units), 16) and len(a.units) >= 1
        assert np.allclose(np.linalg.norm(a.vectors, axis=1), 1, atol=1e-5)
        assert np.array_equal(a.vectors, b.vectors) and a.units == b.units
        for u in a.units:
            sentence = doc.sentence_text(u.sentence)
            assert all(0 <= s < e <= len(sentence) for s, e in u.spans)
    # every word of the sentence is in some proposition
    covered = np.zeros(len(text), bool)
    for enc in first:
        for u in enc.units:
            base = doc.sentences[u.sentence][0]
            for s, e in u.spans:
                covered[base + s : base + e] = True
    assert all(covered[a:b].all() for a, b in words(text) if text[a:b].isalnum())
    # a query is one proposition (its whole text) unless asked to segment
    query = "who directed a film in 2010, and where was he born?"
    (q,) = tiny_encoder.encode_queries([query])
    assert len(q.units) == 1 and q.units[0].spans == ((0, len(query)),)
    # a document that names its proposition (focus) gets exactly that one
    focused = Document("p", text, sentences=((0, 51), (52, len(text))), focus=((0, 12), (35, 50)))
    (enc,) = tiny_encoder.encode(tiny_encoder.passages(focused))
    assert len(enc.units) == 1 and enc.units[0].spans == ((0, 12), (35, 50))
