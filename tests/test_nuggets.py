"""Nugget encoder and DocSplit on a tiny random backbone: selection, gradients, halves."""
from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

from propdex.encoders import Document
from propdex.encoders.text import split_sentences
from propdex.encoders.adapters import layer_stack
from propdex.encoders.nugget import (
    NuggetDecoder, NuggetEncoder, NuggetModel, even_cuts, n_nuggets, nugget_spans, nugget_weights, select, word_starts,
)
from propdex.encoders.tokens import TokensEncoder
from propdex.encoders.provenance import save_weights
from propdex.encoders.training.docsplit import MeanSets, NuggetSets, docsplit_loss, set_similarity, split_halves, train_docsplit
from propdex.encoders.training.nugget import reconstruction_loss

TEXTS = [
    "Paris is the capital of France, and it lies on the Seine.",
    "Short.",
    "The mitochondrion is the powerhouse of the cell; it makes ATP, which cells use for energy, and it has its own DNA.",
]


def batch(tiny, texts=TEXTS):
    return dict(tiny.tokenizer(texts, padding=True, return_tensors="pt"))


@pytest.fixture()
def model(tiny):
    torch.manual_seed(0)
    return NuggetModel(tiny.model, layer=1, ratio=0.25, lora=2)


def test_k_is_ceil_n_times_r_per_passage_and_padding_is_never_chosen(tiny, model):
    enc = batch(tiny)
    lengths = enc["attention_mask"].sum(1).tolist()
    assert len(set(lengths)) == 3  # the batch really is padded
    for r in (0.05, 0.1, 0.25, 1.0):
        out = model(**enc, ratio=r)
        assert out.valid.sum(1).tolist() == [max(1, math.ceil(Fraction(str(r)) * n)) for n in lengths]
        assert out.chosen.sum(1).tolist() == out.valid.sum(1).tolist()
        assert not (out.chosen & ~enc["attention_mask"].bool()).any()
    assert n_nuggets([30, 10, 1], 0.1) == [3, 1, 1]  # 0.1 * 30 is 3.0000000000000004 in floats


def test_selection_is_the_top_scores_in_position_order_and_deterministic(tiny, model):
    enc = batch(tiny)
    first, again = model(**enc), model(**enc)
    assert torch.equal(first.positions, again.positions) and torch.allclose(first.vectors, again.vectors)
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.9, -1.0, 7.0], [3.0, 2.0, 1.0, 0.0, 0.0, 0.0]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    positions, valid = select(scores, attention, 0.5)
    # Row 0: n = 5, k = 3 -> 0.9, 0.9, 0.5 (position 5 is padding despite its score); row 1: n = 4, k = 2.
    assert positions[0].tolist() == [1, 2, 3] and valid[0].all()
    assert positions[1][valid[1]].tolist() == [0, 1]
    for row in range(len(TEXTS)):
        kept = first.positions[row][first.valid[row]]
        assert torch.all(kept[1:] > kept[:-1])


def test_nugget_vectors_are_w_v_of_the_chosen_last_layer_states(tiny, model):
    enc = batch(tiny)
    out = model(**enc)
    for row in range(len(TEXTS)):
        kept = out.positions[row][out.valid[row]]
        assert torch.allclose(out.vectors[row][out.valid[row]], out.projected[row, kept])


def test_feedback_changes_the_upper_layers(tiny, model):
    enc = batch(tiny)
    before = model(**enc).projected
    with torch.no_grad():
        model.types.weight[1] += 1.0
    assert not torch.allclose(before, model(**enc).projected)


def test_scorer_learns_only_through_the_decoder_bias(tiny, model):
    torch.manual_seed(0)
    decoder = NuggetDecoder(layer_stack(model.encoder)[0].word_embeddings, layers=1, heads=2, max_positions=64)
    enc = batch(tiny)
    for bias, expect_gradient in ((True, True), (False, False)):
        model.zero_grad()
        reconstruction_loss(model, decoder, enc, 0.25, tiny.tokenizer.pad_token_id, bias=bias).backward()
        grad = model.scorer[0].weight.grad
        assert (grad is not None and grad.abs().sum() > 0) == expect_gradient
    # The bottom layer and the embeddings stay frozen.
    embeddings, blocks = layer_stack(model.encoder)
    assert all(p.grad is None for m in (embeddings, blocks[0]) for p in m.parameters())


def test_sampled_softmax_approaches_exact_nll_as_it_samples_more(tiny, model):
    torch.manual_seed(0)
    decoder = NuggetDecoder(layer_stack(model.encoder)[0].word_embeddings, layers=1, heads=2, max_positions=64)
    enc = batch(tiny)
    pad = tiny.tokenizer.pad_token_id
    exact = reconstruction_loss(model, decoder, enc, 0.25, pad)
    # 300k draws leave only a handful of the 30k ids out: fewer competitors,
    # so a slightly lower NLL, and a far lower one if targets were remapped wrongly.
    sampled = reconstruction_loss(model, decoder, enc, 0.25, pad, negatives=300_000)
    assert 0 <= (exact - sampled).item() < 0.01
    few = reconstruction_loss(model, decoder, enc, 0.25, pad, negatives=64)
    assert few < sampled


def test_decoder_generates_up_to_the_end_token(tiny, model):
    decoder = NuggetDecoder(layer_stack(model.encoder)[0].word_embeddings, layers=1, heads=2, max_positions=64).eval()
    out = model(**batch(tiny))
    generated = decoder.generate(out.vectors, out.valid, tiny.tokenizer.cls_token_id, tiny.tokenizer.sep_token_id, max_new=5)
    assert len(generated) == len(TEXTS) and all(len(g) <= 5 for g in generated)


@pytest.fixture()
def nugget_dir(tiny, tiny_dir, model, tmp_path):
    decoder = NuggetDecoder(layer_stack(model.encoder)[0].word_embeddings, layers=1, heads=2, max_positions=64)
    with torch.no_grad():
        model.types.weight.normal_()  # non-trivial weights, to see them come back
    state, config = nugget_weights(model, decoder, str(tiny_dir), 64)
    save_weights(state, tmp_path / "nugget", config)
    return tmp_path / "nugget"


def test_saved_weights_load_back_to_the_same_nuggets(tiny, model, nugget_dir):
    from propdex.encoders.nugget import load_nugget

    loaded, decoder, _ = load_nugget(nugget_dir, tiny.model, with_decoder=True)
    enc = batch(tiny)
    model.eval()
    with torch.no_grad():
        a, b = model(**enc), loaded(**enc)
    assert torch.equal(a.positions, b.positions)
    assert torch.allclose(a.vectors, b.vectors, atol=1e-5)
    assert decoder is not None


def test_encoder_units_queries_and_config(tiny, nugget_dir):
    encoder = NuggetEncoder(tiny, weights=str(nugget_dir), ratio=0.25, query="nuggets")
    text = TEXTS[2]
    doc = Document("d", text, "", ((0, len(text)),))
    (enc,) = encoder.encode(encoder.passages(doc))
    n = len(tiny.tokenizer(text)["input_ids"])
    assert len(enc.vectors) == math.ceil(n * 0.25)
    assert np.allclose(np.linalg.norm(enc.vectors, axis=1), 1, atol=1e-5)
    ends = [u.spans[0][1] for u in enc.units]
    assert all(0 <= a < b <= len(text) for u in enc.units for a, b in u.spans)
    assert ends == sorted(ends)
    (q_nuggets,) = encoder.encode_queries([text])
    tokens = NuggetEncoder(tiny, weights=str(nugget_dir), ratio=0.25, query="tokens")
    (q_tokens,) = tokens.encode_queries([text])
    assert len(q_nuggets.vectors) == len(enc.vectors) and len(q_tokens.vectors) == n - 2
    for mode in (encoder, tokens):  # an empty query has only specials: it still gets its nugget
        (empty,) = mode.encode_queries([""])
        assert len(empty.vectors) == 1
    with pytest.raises(ValueError, match="query mode"):
        NuggetEncoder(tiny, weights=str(nugget_dir), query="words")
    with pytest.raises(ValueError, match="differ"):
        NuggetEncoder(tiny, weights=str(nugget_dir), weights_sha256="0" * 64)


def test_nugget_spans_run_from_the_previous_nugget():
    offsets = np.array([[0, 0], [0, 5], [6, 8], [9, 12], [12, 13], [0, 0]])
    special = np.array([True, False, False, False, False, True])
    # [CLS] stands for the whole passage, a final [SEP] with nothing left too.
    assert nugget_spans(offsets, special, np.array([0, 2, 4, 5]), 13) == [(0, 13), (0, 8), (8, 13), (0, 13)]
    spans = nugget_spans(offsets, special, np.array([2, 4]), 13)
    assert spans == [(0, 8), (8, 13)]
    assert nugget_spans(offsets, special, np.array([0]), 13) == [(0, 13)]


@pytest.mark.parametrize("n", [2, 3, 7, 40])
def test_docsplit_halves_are_disjoint_cover_the_document_and_are_never_empty(n):
    rng = random.Random(n)
    seen_sizes = set()
    for _ in range(200):
        a, b = split_halves(n, rng)
        assert a and b and not set(a) & set(b) and sorted(a + b) == list(range(n))
        assert a == sorted(a) and b == sorted(b)
        seen_sizes.add(len(a))
    assert len(seen_sizes) > 1 or n == 2  # the split is random, not fixed
    with pytest.raises(ValueError):
        split_halves(1, rng)


def test_set_similarity_is_mean_maxsim_and_cosine_for_single_vectors():
    torch.manual_seed(0)
    a = torch.nn.functional.normalize(torch.randn(3, 4, 8), dim=-1)
    b = torch.nn.functional.normalize(torch.randn(2, 5, 8), dim=-1)
    a_valid = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    b_valid = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    got = set_similarity(a, a_valid, b, b_valid)
    for x in range(3):
        for y in range(2):
            sim = a[x][a_valid[x]] @ b[y][b_valid[y]].T
            assert torch.isclose(got[x, y], sim.max(1).values.mean(), atol=1e-6)
    one = torch.ones(3, 1, dtype=torch.bool)
    assert torch.allclose(set_similarity(a[:, :1], one, a[:, :1], one), a[:, 0] @ a[:, 0].T, atol=1e-6)


def test_docsplit_trains_single_and_nugget_encoders(tiny, model):
    from propdex.encoders.adapters import adapt

    docs = [[f"Sentence {i} of document {d} talks about topic {d}." for i in range(4)] for d in range(4)]
    for sets in (MeanSets(adapt(tiny.model, 2, [1]), tiny, 64), NuggetSets(model, tiny, 64)):
        torch.manual_seed(0)
        losses = train_docsplit(sets, docs, steps=12, batch=4, lr=5e-3, seed=0)
        assert np.mean(losses[-3:]) < np.mean(losses[:3])
    a = torch.nn.functional.normalize(torch.randn(4, 1, 8), dim=-1)
    one = torch.ones(4, 1, dtype=torch.bool)
    # Identical halves are the easiest positives: lower loss than shuffled ones.
    assert docsplit_loss(a, one, a, one) < docsplit_loss(a, one, a.roll(1, 0), one)


def test_docsplit_weights_for_single_load_as_its_adapters(tiny, tiny_dir, tmp_path):
    from propdex.encoders import load_encoder
    from propdex.encoders.training.docsplit import run_docsplit

    config = run_docsplit("single", tmp_path / "single-ds", backbone=str(tiny_dir), steps=2, batch=2, lr=1e-2, device="cpu")
    assert [s["stage"] for s in config["adapters"]] == ["docsplit"]
    doc = Document("d", TEXTS[0], "t", ((0, len(TEXTS[0])),))
    plain, tuned = load_encoder("single", backbone=tiny), load_encoder("single", backbone=tiny, weights=str(tmp_path / "single-ds"))
    (a,), (b,) = plain.encode(plain.passages(doc)), tuned.encode(tuned.passages(doc))
    assert a.vectors.shape == b.vectors.shape == (1, tiny.dim)
    assert not np.allclose(a.vectors, b.vectors)  # the adapters are in
    assert tuned.config()["weights_sha256"] and "weights" not in plain.config()


def test_cached_greedy_decoding_equals_decoding_from_scratch(tiny, model):
    torch.manual_seed(1)
    decoder = NuggetDecoder(layer_stack(model.encoder)[0].word_embeddings, layers=2, heads=2, max_positions=64).eval()
    out = model(**batch(tiny))
    generated = decoder.generate(out.vectors, out.valid, tiny.tokenizer.cls_token_id, -1, max_new=6)
    ids = torch.full((len(TEXTS), 1), tiny.tokenizer.cls_token_id)
    with torch.no_grad():
        for _ in range(6):  # the uncached reference: the whole prefix every step
            ids = torch.cat([ids, decoder(ids, out.vectors, out.valid, None)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert generated == ids[:, 1:].tolist()


# -- frozen nuggets: contiguous runs of the backbone's own token states --------

def test_word_starts_follow_whitespace_for_any_tokenizer():
    # "[CLS] state-of-the-art models [SEP]" as a WordPiece tokenizer cuts it.
    offsets = np.array([[0, 0], [0, 5], [5, 6], [6, 8], [8, 9], [9, 12], [12, 13], [13, 16], [17, 23], [0, 0]])
    # Specials (empty spans) never become nuggets; the text tokens are what counts.
    assert word_starts(offsets)[1:-1].tolist() == [True, False, False, False, False, False, False, True]


def test_even_cuts_make_k_runs_of_near_equal_length_ending_at_words():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n, k = int(rng.integers(1, 80)), int(rng.integers(1, 30))
        starts = rng.random(n) < rng.random()
        cuts = even_cuts(starts, k)
        assert cuts[0] == 0 and cuts[-1] == n and len(cuts) - 1 == min(k, n)
        assert all(a < b for a, b in zip(cuts, cuts[1:]))
        for j, c in enumerate(cuts[1:-1], 1):
            even = round(j * n / min(k, n))
            assert abs(c - even) <= 1 or not starts[max(0, even - 1): even + 2].any()
            if starts[even - 1: even + 2].any() and n >= 3 * min(k, n):  # room for every snap
                assert starts[c]  # a word start within reach is always taken
    # 12 tokens, 3 runs, word starts at 0, 3, 5, 9: even cuts 4 and 8 move to 3 and 9.
    starts = np.zeros(12, bool)
    starts[[0, 3, 5, 9]] = True
    assert even_cuts(starts, 3) == [0, 3, 9, 12]


def test_frozen_nuggets_are_ceil_n_r_runs_of_the_tokens_tokens_keeps(tiny):
    tokens = TokensEncoder(tiny)
    text = TEXTS[2]
    doc = Document("d", text, "Biology", tuple(split_sentences(text)))
    (full,) = tokens.encode(tokens.passages(doc))
    for r in (0.1, 0.25, 0.5):
        nuggets = NuggetEncoder(tiny, ratio=r)
        assert nuggets.cacheable and nuggets.config()["weights"] == "frozen"
        (enc,) = nuggets.encode(nuggets.passages(doc))
        assert len(enc.vectors) == math.ceil(len(full.vectors) * Fraction(str(r)))
        np.testing.assert_allclose(np.linalg.norm(enc.vectors, axis=1), 1, atol=1e-5)
        # Runs are contiguous, in order, and together hold every kept token once.
        doc_span = lambda u: tuple(a + doc.sentences[u.sentence][0] for a in u.spans[0])  # noqa: E731
        runs = [doc_span(u) for u in enc.units]
        assert all(len(u.spans) == 1 for u in enc.units) and runs == sorted(runs)
        owner = [[i for i, (a, b) in enumerate(runs) if a <= s and e <= b] for s, e in map(doc_span, full.units)]
        assert all(len(o) == 1 for o in owner) and sorted({o[0] for o in owner}) == list(range(len(runs)))
        # A nugget is the normalised mean of its run's normalised token vectors.
        first = full.vectors[[i for i, o in enumerate(owner) if o == [0]]]
        mean = first.mean(0)
        np.testing.assert_allclose(enc.vectors[0], mean / np.linalg.norm(mean), atol=1e-5)
    # Queries keep every token by default, exactly as `tokens` encodes them.
    (q,) = NuggetEncoder(tiny).encode_queries([text])
    np.testing.assert_allclose(q.vectors, tokens.encode_queries([text])[0].vectors, atol=1e-6)
    (qn,) = NuggetEncoder(tiny, query="nuggets").encode_queries([text])
    assert len(qn.vectors) == math.ceil(len(q.vectors) / 4)
    with pytest.raises(ValueError, match="ratio"):
        NuggetEncoder(tiny, ratio=1.5)


def test_comma_selector_takes_the_last_comma_or_period_of_each_chunk(tiny):
    text = "Paris is the capital of France, and it lies on the Seine. The cell makes ATP, which cells use."
    doc = Document("d", text, "", ((0, 57), (58, len(text))))
    runs = NuggetEncoder(tiny)
    comma = NuggetEncoder(tiny, select="comma")
    assert comma.config()["select"] == "comma" and "select" not in runs.config()
    (a,) = runs.encode(runs.passages(doc))
    (b,) = comma.encode(comma.passages(doc))
    assert len(b.vectors) == len(a.vectors)  # the same budget: k counts the same tokens
    texts = [doc.text[u.spans[0][0] + doc.sentences[u.sentence][0]: u.spans[0][1] + doc.sentences[u.sentence][0]] for u in b.units]
    assert "".join(texts).replace(" ", "") == text.replace(" ", "")  # chunks tile the text
    (states,) = TokensEncoder(tiny, drop_punct=False).encode([runs.passages(doc)[0]])
    span = lambda u: tuple(x + doc.sentences[u.sentence][0] for x in u.spans[0])  # noqa: E731
    tokens = [(span(u), v) for u, v in zip(states.units, states.vectors)]
    for unit, vector in zip(b.units, b.vectors):
        a, e = span(unit)
        inside = [(s, v) for s, v in tokens if a <= s[0] and s[1] <= e]
        marks = [v for s, v in inside if doc.text[s[0]:s[1]] in (",", ".")]
        np.testing.assert_allclose(vector, (marks or [inside[-1][1]])[-1], atol=1e-5)
    assert any(doc.text[span(u)[1] - 1] in ",." for u in b.units)
    with pytest.raises(ValueError, match="select"):
        NuggetEncoder(tiny, select="best")
