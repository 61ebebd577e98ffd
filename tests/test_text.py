"""Sentence splitting and joining of pre-split sentences."""
from __future__ import annotations

import json
import random

import pytest
from paths import DATA

from propdex.encoders.text import sentence_spans_from_list, split_sentences


def check_invariants(text: str, spans: list[tuple[int, int]]) -> None:
    """Sorted, non-overlapping, non-empty, stripped spans covering every non-space char once."""
    covered = [0] * len(text)
    previous_end = 0
    for start, end in spans:
        # Sorted, non-overlapping and non-empty.
        assert previous_end <= start < end <= len(text), (start, end)
        piece = text[start:end]
        assert piece == piece.strip(), repr(piece)
        for i in range(start, end):
            covered[i] += 1
        previous_end = end
    for i, ch in enumerate(text):
        if not ch.isspace():
            assert covered[i] == 1, f"char {i} {ch!r} covered {covered[i]} times"


def sentences(text: str) -> list[str]:
    spans = split_sentences(text)
    check_invariants(text, spans)
    return [text[s:e] for s, e in spans]


@pytest.mark.parametrize("text", ["", " ", "\n\n \t\r\n"])
def test_empty_and_blank_texts_have_no_sentences(text: str) -> None:
    assert split_sentences(text) == []


def test_basic_terminators() -> None:
    assert sentences("Hello world.  This is a test! Is it? Yes.") == [
        "Hello world.",
        "This is a test!",
        "Is it?",
        "Yes.",
    ]


def test_boundary_needs_uppercase_digit_or_opener() -> None:
    assert sentences("It ended. 3 people came.") == ["It ended.", "3 people came."]
    assert sentences('It ended. "Why?" she asked.') == ["It ended.", '"Why?" she asked.']
    assert sentences("It ended. (Then it began.)") == ["It ended.", "(Then it began.)"]
    assert sentences("It costs 3.5 dollars. and more") == ["It costs 3.5 dollars. and more"]
    assert sentences("Wait...what? no") == ["Wait...what? no"]


def test_closing_quotes_and_brackets_stay_with_their_sentence() -> None:
    assert sentences('He said "Stop." Then he left.') == ['He said "Stop."', "Then he left."]
    assert sentences("(It was late.) The end.") == ["(It was late.)", "The end."]
    assert sentences("\u201cNo!\u201d She ran.") == ["\u201cNo!\u201d", "She ran."]


@pytest.mark.parametrize(
    "text",
    [
        "Mr. Smith met Mrs. Jones and Dr. Who at St. Paul's.",
        "Martin Luther King Jr. was born in Atlanta.",
        "J. R. R. Tolkien wrote The Hobbit.",
        "The U.S. Army and the U.K. Navy met.",
        "Some fruit, e.g. Apples and pears, are sweet.",
        "Dogs, cats, etc. are pets.",
        "It was Jan. 5 when it began, or Sept. 12.",
        "See No. 5 for details, and Fig. 3 too.",
        "Real Madrid vs. Barcelona was a draw.",
        "As shown by Smith et al. 2004 this holds.",
    ],
)
def test_abbreviations_do_not_end_sentences(text: str) -> None:
    assert sentences(text) == [text]


def test_etc_before_a_capital_ends_a_sentence() -> None:
    assert sentences("We bought apples, pears, etc. Then we left.") == [
        "We bought apples, pears, etc.",
        "Then we left.",
    ]


def test_no_is_an_abbreviation_only_before_a_number() -> None:
    assert sentences("She said no. Then she left.") == ["She said no.", "Then she left."]


def test_every_line_break_ends_a_sentence() -> None:
    text = "Heading\nFirst line without stop\nSecond. Third.\n\n  Next paragraph  \r\nLast"
    assert sentences(text) == [
        "Heading",
        "First line without stop",
        "Second.",
        "Third.",
        "Next paragraph",
        "Last",
    ]


def test_non_latin_text() -> None:
    assert sentences("Привет, мир. Как дела? Хорошо") == ["Привет, мир.", "Как дела?", "Хорошо"]
    assert sentences("東京は日本の首都です。大阪は大きい。") == ["東京は日本の首都です。", "大阪は大きい。"]
    assert sentences("Émile est là. Élodie aussi.") == ["Émile est là.", "Élodie aussi."]
    # No punctuation: one sentence, whatever the script.
    assert sentences("मेरा नाम राम है और मैं दिल्ली में रहता हूँ") == ["मेरा नाम राम है और मैं दिल्ली में रहता हूँ"]
    assert sentences("مرحبا بالعالم") == ["مرحبا بالعالم"]


def test_invariants_on_random_texts() -> None:
    rng = random.Random(0)
    pieces = [
        "Mr.", "U.S.", "e.g.", "J.", "a", "Word", "word", "3", "4.5", ".", "!", "?", "...",
        '"', "'", "(", ")", "\u201c", "\u201d", " ", "  ", "\t", "\n", "\n\n", "\r\n",
        "\u00a0", "\u2028", "\u3002", "東京", "Привет", "etc.", "No.",
    ]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        check_invariants(text, split_sentences(text))


def test_invariants_on_real_abstracts() -> None:
    with open(DATA / "beir" / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for _, line in zip(range(300), f):
            text = json.loads(line)["text"]
            spans = split_sentences(text)
            check_invariants(text, spans)
            assert spans, text


def test_joined_sentences_keep_their_indices() -> None:
    given = ["A b.", " C d.", "", "E f.", " ", "  G h. "]
    text, spans = sentence_spans_from_list(given)
    assert text == "A b. C d. E f.   G h. "
    assert len(spans) == len(given)
    assert [text[s:e] for s, e in spans] == [s.strip() for s in given]
    assert spans[2][0] == spans[2][1] and spans[4][0] == spans[4][1]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_join_without_separator_awareness_always_adds_one_space() -> None:
    text, spans = sentence_spans_from_list(["A.", " B.", "C."], sep_aware=False)
    assert text == "A.  B. C."
    assert [text[s:e] for s, e in spans] == ["A.", "B.", "C."]


def test_join_of_nothing() -> None:
    assert sentence_spans_from_list([]) == ("", [])


def test_hotpotqa_sentences_round_trip() -> None:
    with open(DATA / "hotpotqa" / "hotpot_dev_distractor_600.json", encoding="utf-8") as f:
        questions = json.load(f)
    for question in questions[:100]:
        for _, given in question["context"]:
            text, spans = sentence_spans_from_list(given)
            assert [text[s:e] for s, e in spans] == [s.strip() for s in given]
