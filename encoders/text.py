"""Sentence boundaries as character spans.

`split_sentences` is a regex splitter for English prose (Wikipedia, abstracts,
news). It favours not splitting over splitting wrongly: a missed boundary only
makes a passage a little longer, a wrong one cuts a proposition in two.

`sentence_spans_from_list` joins sentences that a data set has already split
(HotpotQA), so that the data set's sentence indices stay valid.
"""
from __future__ import annotations

import re

Span = tuple[int, int]
# Between the pages of a text that has them (a PDF's, as pdftotext writes it):
# a line break to the splitter, a page to search (retriever.hits.page_at).
PAGE_BREAK = "\f"


def is_wordlike(token: str) -> bool:
    """Has a letter or digit (not punctuation or symbols only)."""
    return any(ch.isalnum() for ch in token)

# Everything `str.splitlines` treats as a line break. Wikipedia-derived text
# puts headings, list items and paragraphs on their own lines, and a line never
# continues a sentence across them.
_LINE = re.compile(r"[^\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]+")

_CLOSERS = "\"'\u201d\u2019\u00bb)\\]}"  # " ' ” ’ » ) ] }
_OPENERS = "\"'\u201c\u2018\u00ab([{"  # " ' “ ‘ « ( [ {

# A Latin terminator needs whitespace and a suitable next character; a CJK one
# (。！？) ends a sentence by itself, since those scripts do not use spaces.
_TERMINATOR = re.compile(
    rf"(?P<latin>[.!?\u2026]+)[{_CLOSERS}]*(?=\s)"
    rf"|[\u3002\uff01\uff1f]+[{_CLOSERS}\u300d\u300f\uff09]*"
)

# Never end a sentence after these (compared lower-cased, without the period).
_ABBREVIATIONS = frozenset(
    """
    mr mrs ms messrs dr prof st jr sr vs rev hon gen col lt sgt capt cmdr adm
    gov sen rep pres supt mt ft e.g i.e cf viz approx ca al esp
    jan feb mar apr jun jul aug sep sept oct nov dec
    """.split()
)
# Abbreviations that are also ordinary words ("no", "art"): only when a number
# follows, as in "No. 5" or "p. 12".
_NUMBER_ABBREVIATIONS = frozenset("no nos nr vol vols p pp fig figs ch sec art op".split())
# U.S., U.K., e.g., a.m.: letters each followed by a period.
_DOTTED = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")


def split_sentences(text: str) -> list[Span]:
    """Half-open spans of the sentences of `text`, sorted and non-overlapping.

    Each span is stripped of surrounding whitespace and non-empty, and every
    non-whitespace character of `text` lies in exactly one span. Sentences end
    at line breaks and after . ! ? (plus closing quotes/brackets) that are
    followed by whitespace and an uppercase letter, a digit or an opening
    quote/bracket, unless the period ends a known abbreviation or an initial.
    """
    spans: list[Span] = []
    for line in _LINE.finditer(text):
        start = line.start()
        for m in _TERMINATOR.finditer(text, line.start(), line.end()):
            if m.group("latin") is not None and not _ends_sentence(text, m, line.end()):
                continue
            _add_stripped(text, start, m.end(), spans)
            start = m.end()
        _add_stripped(text, start, line.end(), spans)
    return spans


def _ends_sentence(text: str, m: re.Match[str], line_end: int) -> bool:
    """Whether a Latin terminator match `m` is a sentence boundary."""
    nxt = m.end()
    while nxt < line_end and text[nxt].isspace():
        nxt += 1
    if nxt == line_end:
        return False  # the line break is the boundary
    follower = text[nxt]
    if not (follower.isupper() or follower.isdigit() or follower in _OPENERS):
        return False
    if m.group("latin") != ".":
        return True  # ! ? and ellipses are not abbreviations
    return not _is_abbreviation(_word_before(text, m.start()), follower)


def _word_before(text: str, end: int) -> str:
    """The whitespace-delimited word ending at `end`, minus opening punctuation."""
    start = end
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:end].lstrip(_OPENERS)


def _is_abbreviation(word: str, follower: str) -> bool:
    """Whether `word` followed by a period and then `follower` is not a sentence end."""
    lower = word.lower()
    if lower in _ABBREVIATIONS:
        return True
    if lower in _NUMBER_ABBREVIATIONS and follower.isdigit():
        return True
    if len(word) == 1 and word.isupper():
        return True  # an initial: "J. R. R. Tolkien"
    return _DOTTED.fullmatch(word) is not None


def _add_stripped(text: str, start: int, end: int, spans: list[Span]) -> None:
    """Append [start, end) without surrounding whitespace, unless nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start < end:
        spans.append((start, end))


def sentence_spans_from_list(
    sentences: list[str], sep_aware: bool = True
) -> tuple[str, list[Span]]:
    """Join pre-split sentences into one text; return it and one span per sentence.

    Span i is sentence i stripped of surrounding whitespace, so indices given
    by the data set (HotpotQA's supporting facts) keep pointing at the right
    sentence. A sentence that is empty or all whitespace still gets a span, of
    length zero, placed where it would be; consumers must expect such spans.

    With `sep_aware`, a space is inserted only where it is needed: not when the
    next sentence already starts with whitespace (HotpotQA keeps the space in
    front of each sentence), the text so far ends with whitespace, or either
    side is empty. Without it, sentences are always joined with one space.
    """
    parts: list[str] = []
    spans: list[Span] = []
    length = 0
    for sentence in sentences:
        if parts and _needs_space(parts, sentence, sep_aware):
            parts.append(" ")
            length += 1
        stripped = sentence.strip()
        # An all-whitespace sentence gets an empty span at its end.
        lead = len(sentence) - len(sentence.lstrip()) if stripped else len(sentence)
        spans.append((length + lead, length + lead + len(stripped)))
        parts.append(sentence)
        length += len(sentence)
    return "".join(parts), spans


def _needs_space(parts: list[str], sentence: str, sep_aware: bool) -> bool:
    """Whether a space must go between the text in `parts` and `sentence`."""
    if not sep_aware:
        return True
    last = next((part for part in reversed(parts) if part), "")
    if not last or not sentence:
        return False
    return not (last[-1].isspace() or sentence[0].isspace())
