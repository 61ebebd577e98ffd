import dataclasses
import re
import threading

import numpy as np
import pytest
import torch

from propdex.encoders import Document, Kind, Passage, load_encoder
from propdex.encoders.base import CUT_AHEAD, cut_passages, sliced_tokens, tokenize, wrapper_batch


def unit_text(doc: Document, unit) -> str:
    base = doc.sentences[unit.sentence][0]
    return " ".join(doc.text[base + a : base + b] for a, b in unit.spans)


DOC = Document(
    "d1",
    "Paris is the capital of France. It has 2 million people! The Eiffel Tower, built in 1889, is there.",
    "Paris",
    ((0, 31), (32, 56), (57, 99)),
)


def test_token_units_point_at_their_exact_text(tiny):
    enc = load_encoder("tokens", backbone=tiny)
    out = enc.encode(enc.passages(DOC))[0]
    texts = [unit_text(DOC, u) for u in out.units]
    assert texts[:6] == ["Paris", "is", "the", "capital", "of", "France"]
    assert "," not in texts and "." not in texts  # punctuation dropped by default
    assert all(u.kind == Kind.TOKEN for u in out.units)
    assert {u.sentence for u in out.units} == {0, 1, 2}
    assert out.vectors.dtype == np.float32 and out.vectors.shape == (len(out.units), enc.dim)
    np.testing.assert_allclose(np.linalg.norm(out.vectors, axis=1), 1.0, rtol=1e-5)


def test_keep_punct_keeps_punctuation_and_queries_never_come_back_empty(tiny):
    keep = load_encoder("tokens", backbone=tiny, drop_punct=False)
    assert "," in [unit_text(DOC, u) for u in keep.encode(keep.passages(DOC))[0].units]
    drop = load_encoder("tokens", backbone=tiny)
    assert len(drop.encode_queries(["?!"])[0].vectors) > 0


def test_single_gives_one_passage_unit_spanning_its_sentences(tiny):
    enc = load_encoder("single", backbone=tiny)
    out = enc.encode(enc.passages(DOC))[0]
    assert out.vectors.shape == (1, enc.dim)
    (u,) = out.units
    assert (u.kind, u.sentence, u.last_sentence, u.spans) == (Kind.PASSAGE, 0, 2, ((0, 99),))


def test_focus_restricts_vectors_to_the_focus_but_keeps_context(tiny):
    focused = Document(DOC.id, DOC.text, sentences=DOC.sentences, focus=((60, 72),))  # "Eiffel Tower"
    tokens = load_encoder("tokens", backbone=tiny)
    out = tokens.encode(tokens.passages(focused))[0]
    assert "".join(unit_text(focused, u) for u in out.units) == "EiffelTower"
    # context matters: the same words alone give other vectors
    alone = tokens.encode_queries(["Eiffel Tower"])[0]
    assert not np.allclose(out.vectors[0], alone.vectors[0], atol=1e-3)
    single = load_encoder("single", backbone=tiny)
    (u,) = single.encode(single.passages(focused))[0].units
    assert u.spans == ((3, 15),) and u.sentence == 2


def test_encoding_is_deterministic_and_independent_of_batching(tiny):
    enc = load_encoder("tokens", backbone=tiny, batch_size=1)
    texts = ["short one", "a somewhat longer passage of text here", "mid length text"]
    one = enc.encode([Passage.of_text(t) for t in texts])
    enc.batch_size = 3
    three = enc.encode([Passage.of_text(t) for t in texts])
    for a, b in zip(one, three):
        np.testing.assert_allclose(a.vectors, b.vectors, atol=1e-5)
        assert a.units == b.units


def test_long_documents_are_cut_into_windows_covering_all_text(tiny):
    sentence = "word " * 30
    text = " ".join([sentence.strip() + "."] * 5) + " " + ("giant " * 150).strip() + "."
    spans, pos = [], 0
    for part in text.split(". "):
        start = text.index(part, pos)
        spans.append((start, start + len(part) + (1 if not part.endswith(".") else 0)))
        pos = start + len(part)
    doc = Document("long", text, sentences=tuple(spans))
    window = 62
    passages = cut_passages(doc, tiny, window)
    assert len(passages) > 3
    tok = tiny.tokenizer
    for p in passages:
        assert len(tok(p.text, add_special_tokens=False)["input_ids"]) <= window
    # the windows tile the document's text without gaps or overlaps
    covered = "".join(p.text for p in passages).replace(" ", "")
    assert covered == text.replace(" ", "")
    enc = load_encoder("tokens", backbone=tiny)
    total = sum(len(e.units) for e in enc.encode(passages))
    assert total == len(tok(text, add_special_tokens=False)["input_ids"]) - text.count(".")


def _long_document(doc_id: str, title: str) -> Document:
    """A short sentence, then one far longer than a window, of words in
    several pieces each, so that cuts at token boundaries fall inside words."""
    first = "Paris is the capital of France."
    long = " ".join(["Antidisestablishmentarianism unconstitutionally"] * 120) + "."
    text = first + " " + long
    return Document(doc_id, text, title, ((0, len(first)), (len(first) + 1, len(text))))


@pytest.mark.parametrize("title", ["A title", ""])
def test_a_cut_passage_keeps_its_tokens_and_encodes_as_if_tokenized_alone(tiny, title):
    """The document is tokenized once, when it is cut: a passage slices those
    tokens, unless it starts or ends inside a word (its text alone would
    tokenize otherwise). The batch and the vectors are those of tokenizing
    every passage's text by the transformers tokenizer."""
    doc = _long_document("long", title)
    for spec in ("single", "tokens"):
        enc = load_encoder(spec, backbone=tiny)
        passages = enc.passages(doc)
        kept = [p for p in passages if p.tokens is not None]
        assert 0 < len(kept) < len(passages)  # a window that starts inside a word has none
        for p in passages:
            alone = tiny.tokenizer(p.text, add_special_tokens=False, return_offsets_mapping=True)
            if p.tokens is not None:
                ids, offsets = sliced_tokens(p)
                assert ids.tolist() == alone["input_ids"]
                assert offsets.tolist() == [list(o) for o in alone["offset_mapping"]]
        titles = [enc.title_of(p.doc) for p in passages]
        slow = wrapper_batch(tiny.tokenizer, [p.text for p in passages], titles, enc.max_length)
        fast = tokenize(tiny.tokenizer, [p.text for p in passages], titles, enc.max_length, [sliced_tokens(p) for p in passages])
        assert fast[0].keys() == slow[0].keys()
        for key in slow[0]:
            assert torch.equal(fast[0][key], slow[0][key]), key
        for a, b in zip(fast[1:], slow[1:]):
            np.testing.assert_array_equal(a, b)
        # A text longer than the window is truncated as the tokenizer truncates it.
        long = ["word " * 400, "a b"], ["", "A title"]
        for a, b in zip(tokenize(tiny.tokenizer, *long, 32), wrapper_batch(tiny.tokenizer, *long, 32)):
            assert all(torch.equal(a[k], b[k]) for k in b) if isinstance(b, dict) else np.array_equal(a, b)
        retokenized = enc.encode([dataclasses.replace(p, tokens=None) for p in passages])
        for a, b in zip(enc.encode(passages), retokenized):
            np.testing.assert_array_equal(a.vectors, b.vectors)
            assert a.units == b.units


def test_documents_cut_on_threads_come_in_order_and_whole_while_batches_are_tokenized(tiny):
    """`Encoder.cut` tokenizes on threads while the encoder tokenizes batches
    with truncation on the same tokenizer: no document may come out cut at
    a batch's length, or out of order."""
    enc = load_encoder("single", backbone=tiny)
    docs = [_long_document(f"d{i}", f"Title {i}") for i in range(3 * CUT_AHEAD)]
    expected = [enc.passages(d) for d in docs]
    stop = threading.Event()

    def tokenize_batches() -> None:
        while not stop.is_set():
            tokenize(tiny.tokenizer, ["word " * 300, "a b"], ["", "T"], 16)

    churn = threading.Thread(target=tokenize_batches)
    churn.start()
    try:
        got = list(enc.cut(docs))
    finally:
        stop.set()
        churn.join()
    assert got == expected
    whole = len(tiny.tokenizer(docs[0].text, add_special_tokens=False)["input_ids"])
    assert all(len(p.tokens[0].ids) == whole for ps in got for p in ps if p.tokens is not None)


@pytest.mark.parametrize("spec", ["tokens", "tokens:pool=3", "nugget", "nugget:ratio=0.1"])
def test_passage_units_is_the_most_vectors_a_passage_yields(tiny, spec):
    # The searcher's default window: it must be what a full passage really holds.
    sentence = "one two three four five"  # no punctuation: a vector a token
    text = " ".join([sentence] * 40)
    spans = [(i * (len(sentence) + 1), i * (len(sentence) + 1) + len(sentence)) for i in range(40)]
    enc = load_encoder(spec, backbone=tiny)
    per_passage = [len(e.units) for e in enc.encode(enc.passages(Document("long", text, sentences=tuple(spans))))]
    assert len(per_passage) > 2 and max(per_passage) <= enc.passage_units
    assert max(per_passage) >= enc.passage_units * 0.8  # full passages come close: windows are passages, not a guess
    assert load_encoder("single", backbone=tiny).passage_units is None  # one vector a passage: nothing to bound


def test_unknown_encoder_and_backbone_fail_with_one_line(tiny):
    with pytest.raises(ValueError, match="unknown encoder"):
        load_encoder("nope", backbone=tiny)
    with pytest.raises(ValueError, match="cannot load backbone"):
        load_encoder("single", backbone="/nonexistent/model-dir-xyz")


def test_an_index_backbone_missing_here_fails_without_the_network(monkeypatch):
    from propdex.encoders import backbone as bb
    from propdex.encoders import encoder_from_config

    calls = []
    real = bb._from_pretrained
    monkeypatch.setattr(bb, "_from_pretrained", lambda source, local_only: calls.append(local_only) or real(source, local_only))
    with pytest.raises(ValueError, match="not in the Hugging Face cache"):
        encoder_from_config({"name": "single", "backbone": "propdex-tests/no-such-model", "dim": 384})
    assert calls == [True]  # the cache was asked, the hub never


@pytest.mark.slow
def test_minilm_single_ranks_a_paraphrase_above_an_unrelated_sentence(minilm):
    enc = load_encoder("single", backbone=minilm)
    a, b, c = (e.vectors[0] for e in enc.encode_queries([
        "A man is playing a guitar.", "Someone plays an acoustic guitar.", "The stock market fell sharply today."]))
    assert a @ b > a @ c + 0.3


@pytest.mark.parametrize(
    "text, sentences, focus, problem",
    [
        ("Short.", ((0, 31),), (), "outside its 6-character text"),
        (DOC.text, ((32, 56), (0, 31)), (), "lie in no sentence span"),
        (DOC.text, ((0, 31), (20, 56), (57, 99)), (), "starts before the previous span ends"),
        (DOC.text + " Lost text.", DOC.sentences, (), "'Lost text.') lie in no sentence span"),
        (DOC.text, DOC.sentences, ((0, 5), (200, 201)), "outside its 99-character text"),
    ],
)
def test_a_document_refuses_spans_that_do_not_fit_its_text(text, sentences, focus, problem):
    """Sentence spans must be sorted, in bounds and cover every non-blank
    character (else text is cut wrong or dropped); a focus need not cover."""
    with pytest.raises(ValueError, match=re.escape(problem)):
        Document("d1", text, "Paris", sentences, focus)
    Document("d1", DOC.text, "Paris", DOC.sentences, ((0, 5), (40, 44)))  # a focus covers what it likes
    Document("d1", " Paris is. ", "", ((1, 10), (11, 11)))  # an empty sentence at the end, as HotpotQA has


def test_replacing_a_documents_text_under_its_spans_is_an_error_and_a_reader_skips_such_a_record():
    with pytest.raises(ValueError, match="document 'd1': span"):
        dataclasses.replace(DOC, text="Paris is the capital of France.")
    from propdex.indexer.readers.base import Skip, document

    skip = document("d2", "One. Two.", "T", "file.jsonl:3", 1000, sentences=[(0, 4), (5, 30)])
    assert isinstance(skip, Skip) and skip.reason == "bad_sentences" and skip.source == "file.jsonl:3"
    assert "9-character text" in skip.detail
    assert isinstance(document("d2", "One. Two.", "T", "file.jsonl:3", 1000, sentences=[(0, 4), (5, 9)]), Document)


def test_a_stored_document_reads_back_whole_and_unchecked():
    """The store's read-back sets every field (a field added later must be
    added there too) and does not re-check spans an older writer stored."""
    back = Document.read_back(DOC.id, DOC.text, DOC.title, DOC.sentences, DOC.focus, {"year": 1889})
    expected = dataclasses.replace(DOC, metadata={"year": 1889})
    assert back == expected and all(getattr(back, f.name) == getattr(expected, f.name) for f in dataclasses.fields(Document))
    assert Document.read_back("old", "Short.", "", ((0, 31),), (), {}).sentences == ((0, 31),)
