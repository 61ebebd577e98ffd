"""Propositions: words and spans, the segmenters, the sub-sentence encoder."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from propdex.encoders.segment import (
    ClauseSplitter, PairSegmenter, anchor_targets, anchors, jaccard_matches, segmentation_prf, word_spans, words,
)
from propdex.encoders.training.data import propsegment_sentences
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


@pytest.fixture(scope="module")
def tiny_encoder(tiny, tiny_dir, tmp_path_factory):
    """The distilled encoder's shape on the tiny backbone: a random student
    (its last layer not zeroed, so the MLP counts) and a query map."""
    from propdex.encoders.proposition import PropositionEncoder, PropositionHead, feature_dim
    from propdex.encoders.provenance import save_weights

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("proposition")
    dim = feature_dim(tiny.dim, 2)
    head = PropositionHead(dim, 48, 16, query_dim=tiny.dim)
    config = {"backbone": str(tiny_dir), "dim": dim, "layers": [1, 2], "hidden": 48, "out_dim": 16, "query_dim": tiny.dim}
    save_weights({f"head.{k}": v for k, v in head.state_dict().items()}, root / "head", config)
    PairSegmenter(tiny, PairSegmenter.default_config(tiny.model.config.num_hidden_layers)).save(root / "segmenter", {"backbone": str(tiny_dir)})
    return PropositionEncoder(tiny, head=str(root / "head"), segmenter=str(root / "segmenter"))


def test_encoder_shape_normalisation_determinism(tiny_encoder):
    from propdex.encoders import Document
    from propdex.encoders.text import split_sentences

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


def test_one_pass_gives_the_propositions_and_vectors_of_two_separate_passes(tiny_encoder):
    """The shared frozen pass: the segmenter's propositions equal those of
    its own pass (`PairSegmenter.segment`), and the vectors equal the head
    over features pooled from a second, separate pass of the head's layers."""
    from propdex.encoders import Document
    from propdex.encoders.base import hidden_states, tokenize
    from propdex.encoders.proposition import covering, proposition_features
    from propdex.encoders.text import split_sentences

    enc = tiny_encoder
    assert set(enc.layers) == set(enc.head_layers) | set(enc.segmenter_layers)
    text = "Mark Ruffalo is an American actor, born in Kenosha. He directed a film in 2010, which won a prize in Cannes."
    doc = Document("d", text, sentences=tuple(split_sentences(text)))
    passages = enc.passages(doc)
    shared = enc.encode(passages)
    own = enc.segmenter.segment([p.text for p in passages])
    for p, e, props in zip(passages, shared, own):
        offsets = words(p.text)
        expected = [word_spans(p.text, offsets, q) for q in covering(p.text, offsets, props)]
        assert [u.spans for u in e.units] == [tuple((a + p.start - doc.sentences[u.sentence][0], b + p.start - doc.sentences[u.sentence][0]) for a, b in g) for u, g in zip(e.units, expected)]
        batch, offs, special, _ = tokenize(enc.backbone.tokenizer, [p.text], [""], enc.max_length)
        states = hidden_states(enc.backbone, batch, enc.head_layers)[0].float()
        features = proposition_features(states, offs[0], special[0], expected, enc.backbone.dim)
        with torch.inference_mode():
            separate = enc.head(features).numpy()
        np.testing.assert_allclose(e.vectors, separate, atol=1e-5)


def test_teacher_and_student_share_one_space(tiny_encoder):
    """A text query is the teacher (the backbone's mean vector through the
    query map); the standalone baseline indexes every proposition as the
    teacher. Both are unit vectors of the student's width, deterministic, and
    a proposition encoded alone is its own text's query vector."""
    from propdex.encoders import Document, load_encoder
    from propdex.encoders.proposition import PropositionEncoder, mean_vectors, unit_text

    enc = tiny_encoder
    text = "Mark Ruffalo is an American actor, born in Kenosha. He directed a film in 2010."
    doc = Document("d", text, title="Mark Ruffalo", sentences=((0, 51), (52, len(text))))
    alone = PropositionEncoder(enc.backbone, head=str(enc.head_path), segmenter=str(enc.segmenter_path), standalone=True)
    assert alone.options()["standalone"] is True
    student = enc.encode(enc.passages(doc))
    teacher = alone.encode(alone.passages(doc))
    for s, t in zip(student, teacher):
        assert s.units == t.units and s.vectors.shape == t.vectors.shape == (len(s.units), 16)
        assert np.allclose(np.linalg.norm(t.vectors, axis=1), 1, atol=1e-5)
        assert not np.allclose(s.vectors, t.vectors)  # in context is not alone
    # the teacher of a proposition is the query map over its own text after the title
    unit = teacher[0].units[0]
    own = unit_text(doc, unit)
    vec = enc.head.embed(mean_vectors(enc.backbone, [own], ["Mark Ruffalo"])).detach().numpy()
    np.testing.assert_allclose(teacher[0].vectors[0], vec[0], atol=1e-5)
    (q1,), (q2,) = enc.encode_queries([own]), enc.encode_queries([own])
    assert np.array_equal(q1.vectors, q2.vectors) and q1.vectors.shape == (1, 16)
    np.testing.assert_allclose(q1.vectors[0], enc.head.embed(mean_vectors(enc.backbone, [own], [""])).detach().numpy()[0], atol=1e-5)
    with pytest.raises(ValueError, match="yes/no"):
        load_encoder("proposition", backbone=enc.backbone, head=str(enc.head_path), segmenter=str(enc.segmenter_path), standalone="maybe")


def test_frozen_feature_cache_round_trips_and_is_keyed_by_its_inputs(tiny_encoder, tmp_path):
    from propdex.encoders import Document
    from propdex.encoders.training.proposition import FeatureSet, cached_features

    docs = [Document(f"s{i}", t, "A title", ((0, len(t)),)) for i, t in enumerate(
        ["Kenosha is a city in Wisconsin, on the shore of Lake Michigan.", "The film won a prize, and its director was born in 1967."])]
    path = tmp_path / "train.npz"
    first = cached_features(tiny_encoder, docs, path, {"sentences": 2})
    loaded = FeatureSet.load(path)
    for name in ("features", "teacher", "sentence"):
        assert np.array_equal(getattr(first, name), getattr(loaded, name))
    assert loaded.meta == {"sentences": 2} and len(loaded.sentence) >= 2 and loaded.features.dtype == np.float16
    assert set(loaded.sentence.tolist()) == {0, 1}
    # Same inputs: read back, not recomputed; other inputs: recomputed.
    stamp = path.stat().st_mtime_ns
    again = cached_features(tiny_encoder, docs, path, {"sentences": 2})
    assert path.stat().st_mtime_ns == stamp and np.array_equal(again.features, first.features)
    other = cached_features(tiny_encoder, docs[:1], path, {"sentences": 1})
    assert len(other.sentence) < len(first.sentence) and FeatureSet.load(path).meta == {"sentences": 1}


def test_distillation_step_lowers_the_loss(tiny_encoder, tmp_path):
    import random

    from propdex.encoders import Document
    from propdex.encoders.training.proposition import batches, distillation, featurize, relational

    texts = ["Kenosha is a city in Wisconsin, on the shore of Lake Michigan.", "The film won a prize, and its director was born in 1967.",
             "Paris is the capital of France and its largest city.", "He played for the club until 1998, when he retired."]
    fs = featurize(tiny_encoder, [Document(f"s{i}", t, "T", ((0, len(t)),)) for i, t in enumerate(texts)], progress=False)
    (idx,) = batches(fs, 10_000, random.Random(0))
    assert sorted(idx.tolist()) == list(range(len(fs.sentence)))
    head = tiny_encoder.head
    state = {k: v.clone() for k, v in head.state_dict().items()}
    x = torch.from_numpy(fs.features.astype(np.float32))
    full = torch.nn.functional.normalize(torch.from_numpy(fs.teacher.astype(np.float32)), dim=-1)
    opt = torch.optim.SGD(head.parameters(), lr=0.5)
    losses = []
    try:
        head.train()
        for _ in range(5):
            t = head.embed(full)
            loss = distillation(head(x), t, 0.1, 0.5) + relational(t, full, 0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    finally:
        head.load_state_dict(state)
        head.eval()
    assert losses[-1] < losses[0]


def test_dims_keeps_the_leading_dimensions_renormalised(tiny_encoder):
    from propdex.encoders import Document, load_encoder
    from propdex.encoders.proposition import PropositionEncoder

    enc = tiny_encoder
    short = PropositionEncoder(enc.backbone, head=str(enc.head_path), segmenter=str(enc.segmenter_path), dims=6)
    assert short.dim == 6 and short.config()["dims"] == 6 and "dims" not in enc.options()
    text = "Kenosha is a city in Wisconsin, on the shore of Lake Michigan."
    doc = Document("d", text, sentences=((0, len(text)),))
    (full,), (cut,) = enc.encode(enc.passages(doc)), short.encode(short.passages(doc))
    prefix = full.vectors[:, :6] / np.linalg.norm(full.vectors[:, :6], axis=1, keepdims=True)
    np.testing.assert_allclose(cut.vectors, prefix, atol=1e-5)
    (q,) = short.encode_queries(["where is Kenosha?"])
    assert q.vectors.shape == (1, 6)
    for bad in (0, 17):
        with pytest.raises(ValueError, match="dims must be between 1 and 16"):
            load_encoder("proposition", backbone=enc.backbone, head=str(enc.head_path), segmenter=str(enc.segmenter_path), dims=bad)


def test_passage_context_reads_single_passages_and_scores_beside_them(tiny_encoder):
    """`context="passage"` reads `single`'s packed passages in one pass and
    pools each sentence's propositions from it; `beside=w` follows each
    proposition with w times the vector `single` gives its passage, and a
    query with its own mean vector, so a score is the proposition's cosine
    plus w times its passage's."""
    from propdex.encoders import Document
    from propdex.encoders.proposition import PropositionEncoder
    from propdex.encoders.single import SingleEncoder
    from propdex.encoders.text import split_sentences

    enc = tiny_encoder
    make = lambda **kw: PropositionEncoder(enc.backbone, head=str(enc.head_path), segmenter=str(enc.segmenter_path), **kw)  # noqa: E731
    text = "Mark Ruffalo is an American actor, born in Kenosha. He directed a film in 2010, which won a prize in Cannes."
    doc = Document("d", text, sentences=tuple(split_sentences(text)), title="Mark Ruffalo")
    packed, beside = make(context="passage"), make(context="passage", beside=0.5)
    single = SingleEncoder(enc.backbone)
    passages = packed.passages(doc)
    assert passages == single.passages(doc) and len(passages) == 1 < len(enc.passages(doc))
    (p,), (b,) = packed.encode(passages), beside.encode(passages)
    assert {u.sentence for u in p.units} == {0, 1} and p.units == b.units
    for u in p.units:  # spans are sentence-relative, inside their sentence
        assert all(0 <= s < e <= len(doc.sentence_text(u.sentence)) for s, e in u.spans)
    assert packed.dim == 16 and beside.dim == 16 + enc.backbone.dim and beside.config()["beside"] == 0.5
    np.testing.assert_allclose(b.vectors[:, :16], p.vectors, atol=1e-6)
    (passage_vector,) = single.encode(passages)
    np.testing.assert_allclose(b.vectors[:, 16:], 0.5 * np.repeat(passage_vector.vectors, len(b.units), 0), atol=1e-5)
    # a text query: its projected vector, then its own unit mean vector at weight 1
    query = "who directed a film in 2010?"
    (q,), (qb,), (qs,) = packed.encode_queries([query]), beside.encode_queries([query]), single.encode_queries([query])
    np.testing.assert_allclose(qb.vectors, np.concatenate([q.vectors, qs.vectors], 1), atol=1e-5)
    scores = (b.vectors @ qb.vectors.T).ravel()
    np.testing.assert_allclose(scores, (p.vectors @ q.vectors.T).ravel() + 0.5 * (passage_vector.vectors @ qs.vectors.T).item(), atol=1e-5)
    # read a sentence at a time (the default), the propositions are those of
    # the default encoder and a second, packed pass gives the passage's vector
    sentence_beside = make(beside=1)
    alone, beside_each = enc.encode(enc.passages(doc)), sentence_beside.encode(sentence_beside.passages(doc))
    for a, e in zip(alone, beside_each):
        assert a.units == e.units
        np.testing.assert_allclose(e.vectors[:, :16], a.vectors, atol=1e-6)
        np.testing.assert_allclose(e.vectors[:, 16:], np.repeat(passage_vector.vectors, len(e.units), 0), atol=1e-5)
    with pytest.raises(ValueError, match="context must be one of sentence, passage, isolated"):
        make(context="document")


def test_a_batch_gives_each_sentence_what_it_gets_alone(tiny_encoder):
    """The segmenter and the head run once per batch (windows padded
    together): a sentence's propositions and vectors do not depend on the
    sentences it is batched with."""
    from propdex.encoders import Document
    from propdex.encoders.text import split_sentences

    enc = tiny_encoder
    text = ("Mark Ruffalo is an American actor, born in Kenosha. He directed a film in 2010, which won a prize in Cannes. "
            "Kenosha lies on Lake Michigan. " + " ".join(["The lake, which is large, freezes in winter"] * 30) + ".")
    doc = Document("d", text, sentences=tuple(split_sentences(text)), title="Ruffalo")
    passages = enc.passages(doc)
    assert len({len(p.text) for p in passages}) >= 4  # different lengths, so padding happens
    together = enc.encode(passages)
    for p, batched in zip(passages, together):
        (alone,) = enc.encode([p])
        assert alone.units == batched.units and len(alone.units) >= 1
        np.testing.assert_allclose(alone.vectors, batched.vectors, atol=1e-5)
    inputs = [(torch.randn(len(words(t)), enc.segmenter.head.proj[0].in_features), t, words(t)) for t in (p.text for p in passages)]
    assert enc.segmenter.decode_many(inputs, batch=3) == [enc.segmenter.decode(*x) for x in inputs]


def test_passage_context_training_reads_the_states_the_encoder_indexes(tiny_encoder, tmp_path):
    """`train proposition --context passage` featurizes as
    `proposition:context=passage` encodes: each sentence's propositions,
    pooled from its packed passage's one pass. The head over the training
    features gives the very vectors the encoder indexes, sentence by
    sentence."""
    from propdex.encoders import Document
    from propdex.encoders.proposition import PropositionEncoder
    from propdex.encoders.provenance import read_weights, save_weights
    from propdex.encoders.text import split_sentences
    from propdex.encoders.training.proposition import featurize

    state, config = read_weights(tiny_encoder.head_path, "proposition head", "")
    save_weights(state, tmp_path / "head", config | {"context": "passage"})
    passage = PropositionEncoder(tiny_encoder.backbone, head=str(tmp_path / "head"), segmenter=str(tiny_encoder.segmenter_path))
    assert passage.context == "passage" and passage.options()["context"] == "passage"  # from the head's config
    text = "Kenosha is a city in Wisconsin, on Lake Michigan. Its mayor was elected in 2008. The harbor freezes in winter."
    doc = Document("d", text, "Kenosha", tuple(split_sentences(text)))
    assert len(passage.passages(doc)) == 1
    fs = featurize(passage, [doc], progress=False)
    assert sorted(set(fs.sentence.tolist())) == [0, 1, 2]
    (encoded,) = passage.encode(passage.passages(doc))
    with torch.inference_mode():
        from_features = passage.head(torch.from_numpy(fs.features.astype(np.float32))).numpy()
    assert [u.sentence for u in encoded.units] == fs.sentence.tolist()
    np.testing.assert_allclose(encoded.vectors, from_features, atol=2e-3)


def test_isolated_context_reads_each_sentence_apart_in_one_pass(tiny_encoder):
    """`context="isolated"` packs a passage as `passage` does, but a sentence's
    tokens read only themselves and the title in front: rewriting one
    sentence leaves the others' states as they were, which a packed pass
    does not; positions restart after the title, as if each sentence were
    read alone."""
    from propdex.encoders import Document
    from propdex.encoders.proposition import PropositionEncoder, sentence_blocks
    from propdex.encoders.text import split_sentences

    kw = {"head": str(tiny_encoder.head_path), "segmenter": str(tiny_encoder.segmenter_path)}
    isolated = PropositionEncoder(tiny_encoder.backbone, context="isolated", **kw)
    packed = PropositionEncoder(tiny_encoder.backbone, context="passage", **kw)

    def states(encoder, second):
        text = f"Kenosha is a city in Wisconsin. {second} The harbor freezes in winter."
        doc = Document("d", text, "Kenosha", tuple(split_sentences(text)))
        (passage,) = encoder.passages(doc)
        (tokens,) = encoder.forward([passage])
        first = tokens.offsets[:, 1] <= len("Kenosha is a city in Wisconsin.")
        return tokens.states[torch.from_numpy(first & ~tokens.special)], passage, tokens

    a, passage, tokens = states(isolated, "Its mayor was elected in 2008.")
    b, _, _ = states(isolated, "Nothing at all like the first one, said the mayor.")
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    c, _, _ = states(packed, "Its mayor was elected in 2008.")
    d, _, _ = states(packed, "Nothing at all like the first one, said the mayor.")
    assert (c - d).abs().max() > 1e-3
    blocks = sentence_blocks(passage, tokens.offsets, tokens.special)
    assert sorted(set(blocks[~tokens.special].tolist())) == [1, 2, 3]
    enc = {"attention_mask": torch.ones(1, len(blocks), dtype=torch.long)}
    position = isolated.reading([passage], enc, tokens.offsets[None], tokens.special[None])["position_ids"][0]
    prefix = int((blocks == 0).sum())
    for block in (1, 2, 3):
        assert position[torch.from_numpy(blocks == block)].tolist() == list(range(prefix, prefix + int((blocks == block).sum())))


def test_infonce_both_ways_also_asks_each_teacher_to_pick_its_own_student():
    from propdex.encoders.training.proposition import info_nce

    g = torch.Generator().manual_seed(0)
    s = torch.nn.functional.normalize(torch.randn(6, 8, generator=g), dim=-1)
    t = torch.nn.functional.normalize(torch.randn(6, 8, generator=g), dim=-1)
    one_way = info_nce(s, t, 0.1)
    torch.testing.assert_close(info_nce(s, t, 0.1, both=True), 0.5 * (one_way + info_nce(t, s, 0.1)))
    assert not torch.isclose(info_nce(s, t, 0.1, both=True), one_way)


def test_heldout_p1_counts_a_sibling_student_that_takes_its_teacher(tiny_encoder):
    """heldout_p1 picks epochs by each teacher's top student: a student moved
    onto another proposition's teacher costs that teacher its top-1."""
    from propdex.encoders import Document
    from propdex.encoders.training.proposition import featurize, heldout_p1

    texts = ["Kenosha is a city in Wisconsin, on the shore of Lake Michigan.", "The film won a prize, and its director was born in 1967.",
             "Paris is the capital of France and its largest city.", "He played for the club until 1998, when he retired."]
    fs = featurize(tiny_encoder, [Document(f"s{i}", t, "T", ((0, len(t)),)) for i, t in enumerate(texts)], progress=False)
    head = tiny_encoder.head

    class Oracle(torch.nn.Module):  # students equal to their teachers: every teacher's top-1 is its own
        def __init__(self, steal: bool) -> None:
            super().__init__()
            self.steal = steal

        def embed(self, x):
            return head.embed(x)

        def forward(self, x):
            z = head.embed(torch.from_numpy(fs.teacher.astype(np.float32))).clone()
            if self.steal:
                z[1] = z[0] * 2  # student 1 outscores student 0 on teacher 0
            return z

    assert heldout_p1(Oracle(False), fs, torch.device("cpu"), 0) == 1.0
    assert heldout_p1(Oracle(True), fs, torch.device("cpu"), 0) < 1.0
