"""Context for a prompt: winning passages, packing into a word budget, citations, the answer metric."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from propdex.encoders import Document
from propdex.eval.metrics import holds_answer, normalize_answer
from propdex.retriever import scoring
from propdex.retriever.context import pack
from propdex.retriever.hits import Hit, lexical_passage, passage_text

SENTENCES = ["Ada Lovelace wrote the first program.", "She worked with Charles Babbage.", "The engine was never built.",
             "Babbage designed it in London.", "Lovelace died in 1852.", "Her notes were published in 1843."]


def _doc(doc_id: str, title: str = "") -> Document:
    text, spans, at = "", [], 0
    for s in SENTENCES:
        spans.append((at, at + len(s)))
        text += s + " "
        at = len(text)
    return Document(doc_id, text.rstrip(), title, tuple(spans))


def _hit(doc: Document, sentence: int, passage: tuple[int, int] | None = None, spans=(), rank: int = 1) -> Hit:
    a, b = doc.sentences[sentence]
    passage = passage or (sentence, sentence)
    return Hit(rank, doc.id, doc.title, 1.0, sentence, doc.text[a:b], list(spans), text=passage_text(doc, *passage),
               passage=passage, document=doc)


def test_the_best_window_is_the_one_whose_maxsim_wins():
    # Six sentences of two units each, windows of four units: sentences (0,1), (2,3), (4,5).
    unit_sentences = np.repeat(np.arange(6), 2)[:, None].repeat(2, axis=1)
    sim = np.zeros((2, 12), np.float32)
    sim[0, 4], sim[1, 6] = 1.0, 0.9  # both query vectors best in window (2, 3): 1.9
    sim[0, 10], sim[1, 0] = 0.95, 0.95  # each alone elsewhere: at most 0.95 a window
    assert scoring.best_window(sim, unit_sentences, 4) == (2, 3)
    assert scoring.window_maxsims(sim, [unit_sentences], 4)[0] == pytest.approx(1.9)
    assert scoring.best_window(sim, unit_sentences, None) == (0, 5)  # no window: what the units cover
    # A title unit covers no sentence but counts where stage 2 counts it, in sentence 0's window:
    # the windows become (0), (1, 2), (3, 4), (5).
    titled = np.vstack([[[0, -1]], unit_sentences])
    assert scoring.best_window(np.hstack([np.zeros((2, 1), np.float32), sim]), titled, 4) == (1, 2)
    assert scoring.best_window(np.hstack([np.ones((2, 1), np.float32), sim]), titled, 4) == (0, 0)


def test_a_bm25_passage_grows_around_its_sentence_within_its_words():
    doc = _doc("d")
    assert lexical_passage(doc, 2, max_words=100) == (0, 5)
    first, last = lexical_passage(doc, 2, max_words=15)
    assert first <= 2 <= last and len(passage_text(doc, first, last).split()) <= 15
    assert lexical_passage(doc, 2, max_words=1) == (2, 2)  # a sentence longer than the budget stands alone


def test_context_merges_repeats_keeps_document_order_under_titles_and_cites_characters():
    a, b = _doc("a", "Ada"), _doc("b", "Babbage")
    hits = [_hit(a, 4, rank=1), _hit(b, 3, rank=2), _hit(a, 1, rank=3), _hit(a, 4, rank=4), _hit(a, 2, passage=(1, 3), rank=5)]
    context = pack(hits, 200, "doc")
    assert context.text.startswith("Ada\n" + SENTENCES[1]) and "\n\nBabbage\n" + SENTENCES[3] in context.text
    # a's sentences 1, 2, 3 follow each other; 4 too: one run, in document order.
    assert context.text.split("\n\n")[0] == "Ada\n" + " ".join(SENTENCES[1:5])
    assert [(c.doc_id, c.sentence) for c in context.citations] == [("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 3)]
    for c in context.citations:
        doc = a if c.doc_id == "a" else b
        assert context.text[c.at:c.at + c.end - c.start] == doc.text[c.start:c.end] and c.whole
    sentence = pack([_hit(a, 0), _hit(a, 3), _hit(a, 0)], 200, "sentence")
    assert sentence.text == "Ada\n" + SENTENCES[0] + " ... " + SENTENCES[3]


def test_sentences_that_follow_each_other_keep_the_line_breaks_between_them():
    from propdex.encoders.text import split_sentences

    text = "Budget meeting\n\nWe cut travel. Alice drafts the plan.\n- Bob checks quotes.\n- Eve books rooms."
    doc = Document("n", text, "Notes", tuple(split_sentences(text)))
    assert len(doc.sentences) == 5
    context = pack([_hit(doc, i, rank=i + 1) for i in (1, 0, 2, 3, 4)], 200, "sentence")
    # A heading and list items stay lines of their own; sentences of one paragraph share a line.
    assert context.text == "Notes\nBudget meeting\nWe cut travel. Alice drafts the plan.\n- Bob checks quotes.\n- Eve books rooms."
    assert context.words == len(text.split()) + 1
    for c in context.citations:
        assert context.text[c.at:c.at + c.end - c.start] == text[c.start:c.end]


def test_hits_and_citations_say_the_page_of_a_text_with_page_breaks():
    from propdex.encoders.text import split_sentences

    text = "Intro page one.\n\f\nThe result is on page two. More of it.\n\f\n\f\nPage four, after a blank page."
    doc = Document("p.pdf", text, "Paper", tuple(split_sentences(text)))
    assert [text[a:b] for a, b in doc.sentences] == [
        "Intro page one.", "The result is on page two.", "More of it.", "Page four, after a blank page."]
    assert [_hit(doc, i).page for i in range(4)] == [1, 2, 2, 4]
    assert _hit(doc, 2).to_json()["page"] == 2 and _hit(_doc("plain"), 0).page is None
    context = pack([_hit(doc, 3), _hit(doc, 1)], 100, "sentence")
    assert [(c.sentence, c.page) for c in context.citations] == [(1, 2), (3, 4)]
    assert [c.to_json()["page"] for c in pack([_hit(_doc("plain"), 0)], 100, "sentence").citations] == [None]


def test_units_pack_their_own_spans_and_overlaps_merge():
    a = _doc("a")
    s = SENTENCES[0]
    first = _hit(a, 0, spans=[(0, 12)])  # "Ada Lovelace"
    overlapping = _hit(a, 0, spans=[(4, 18)])  # "Lovelace wrote"
    context = pack([first, overlapping, first], 200, "unit")
    assert context.text == s[:18] and len(context.citations) == 1 and not context.citations[0].whole
    whole = pack([_hit(a, 0, spans=[(0, len(s))])], 200, "unit")
    assert whole.citations[0].whole


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(1, 60), picks=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 5), st.integers(0, 2)), max_size=12),
       level=st.sampled_from(["doc", "sentence"]))
def test_context_never_passes_its_budget_nor_repeats_a_sentence(budget, picks, level):
    docs = [_doc("a", "Ada Lovelace"), _doc("b", "")]
    hits = [_hit(docs[d], s, passage=(max(0, s - w), min(5, s + w)), rank=r) for r, (d, s, w) in enumerate(picks, start=1)]
    context = pack(hits, budget, level)
    assert context.words == len(context.text.split()) <= budget
    cited = [(c.doc_id, c.sentence) for c in context.citations]
    assert len(cited) == len(set(cited))
    for sentence in SENTENCES:
        assert context.text.count(sentence) <= len(docs)


def test_answer_metric_normalises_as_hotpotqas_script():
    assert normalize_answer("The Beatles!") == "beatles"
    assert normalize_answer("  An  Apple, a DAY. ") == "apple day"
    assert holds_answer("They formed the Beatles in Liverpool.", "The Beatles")
    assert holds_answer("It opened in 1,889.", "1889")  # punctuation goes, inside numbers too, as in the official script
    assert not holds_answer("It opened in 18899.", "1889")  # whole words only
    assert not holds_answer("Abbey Road", "Abbey Roads") and not holds_answer("anything", "")
    assert holds_answer("Paris, France", "paris")


@pytest.mark.slow
def test_a_window_hits_text_is_exactly_the_sentences_that_scored(tmp_path, minilm, hotpot_docs):
    import propdex
    from propdex.encoders import load_encoder

    index = propdex.Index.create(tmp_path / "idx", load_encoder("tokens", backbone=minilm))
    index.add(hotpot_docs[:80])
    searcher = index.searcher
    query = "Which American film director was born in 1966?"
    q = searcher.encoder.encode_queries([query])[0].vectors
    hits = index.search(query, k=8, window=24)
    several = 0
    for hit in hits:
        doc = hit.document
        assert hit.text == passage_text(doc, *hit.passage) and hit.sentence_text in hit.text
        start, end = hit.text_span
        assert doc.text[start:end] == hit.text and hit.document_text == doc.text
        shard = next(s for s in searcher.shards if s.store.ordinal(hit.doc_id) is not None)
        vectors, unit_sentences = shard.store.vectors([shard.store.ordinal(hit.doc_id)])[0]
        inside = (unit_sentences[:, 0] >= hit.passage[0]) & (unit_sentences[:, 0] <= hit.passage[1])
        sim = q @ np.asarray(vectors, np.float32)[inside].T
        assert sim.max(axis=1).sum() == pytest.approx(hit.score, rel=1e-4)  # the score is the passage's MaxSim
        several += hit.passage != (0, len(doc.sentences) - 1)
    assert several  # some documents are longer than a window: their text is a part of them
    index.close()
