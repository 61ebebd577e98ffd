"""A note's title and its lines unwrapped: Markdown, reStructuredText and
plain text.

Sentences end at line breaks, so a paragraph hard-wrapped over several lines
must become one line first. In markup (Markdown, reStructuredText) a
paragraph's lines join, as they render, except lines that stand alone
(headings, list items, quotes, table rows, code). Plain text has no such
rule, so a line joins the one before only when that one is long and ends
without punctuation: hard-wrapped prose joins up and a list of short lines
stays a list. Links keep their text, not their URL: the text is what a
question matches. Front matter (YAML between `---` lines, as Jekyll, Hugo
and Obsidian write it, or TOML between `+++` lines) is the note's metadata:
its `title:` titles it, and its other fields are kept to filter on.
"""
from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from typing import Any

import yaml

from .paragraphs import SPACES, paragraphs

MARKUP_SUFFIXES = (".md", ".markdown", ".rst")
# (opening line, the pattern of the whole block, its parser): YAML ends at `---` or `...`, TOML at `+++`.
_FRONT_MATTER = (
    ("---", re.compile(r"---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|$)", re.S), yaml.safe_load),
    ("+++", re.compile(r"\+\+\+[ \t]*\n(.*?\n)?\+\+\+[ \t]*(?:\n|$)", re.S), tomllib.loads),
)
_ATX_HEADING = re.compile(r"[ \t]{0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_UNDERLINE = re.compile(r"[ \t]*(?:=+|-+|~+|\^+|\*+|#+)[ \t]*$")
# Lines of lightweight markup that stand alone: headings, list items, quotes, table rows.
_BLOCK_START = re.compile(r"[ \t]*(?:#{1,6}[ \t]|[-*+][ \t]|\d{1,9}[.)][ \t]|>|\|)")
_FENCE = re.compile(r"[ \t]*(?:```|~~~)")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_WIKILINK = re.compile(r"\[\[(?:[^\]|\n]*\|)?([^\]|\n]*)\]\]")
# A plain-text line at least this long that does not end a sentence was wrapped, not ended.
_WRAP_WIDTH = 40


def front_matter(lines: list[str], markup: bool) -> tuple[dict[str, Any], list[str], str]:
    """(the fields of the file's front matter, the lines after it, what was
    wrong with it or ""). Markup only: a plain-text file that opens with
    `---` is prose. A block that does not parse, or is not a mapping of
    fields, is still cut from the text (it is not prose either) and its
    problem is returned for the reader to log: the note stays indexed."""
    opening = lines[0].rstrip() if markup and lines else ""
    for mark, pattern, parse in _FRONT_MATTER:
        if opening == mark and (block := pattern.match(text := "\n".join(lines))):
            rest = text[block.end():].split("\n")
            try:
                fields = parse(block.group(1) or "")
            except (yaml.YAMLError, tomllib.TOMLDecodeError) as e:
                return {}, rest, f"front matter does not parse: {' '.join(str(e).split())}"
            if fields is None:
                return {}, rest, ""
            if not isinstance(fields, dict):
                return {}, rest, f"front matter is a {type(fields).__name__}, not fields (name: value)"
            return {str(k): v for k, v in fields.items()}, rest, ""
    return {}, lines, ""


def title(lines: list[str], markup: bool) -> tuple[str, list[str]]:
    """(the title a file's first lines give it or "", the lines after it): a
    heading on the first line that is not blank (`# Title` in markup, or a
    line underlined with `=` or `-`). Front matter's `title:` comes first
    (`front_matter`)."""
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return "", lines
    if markup and (heading := _ATX_HEADING.fullmatch(lines[first])) and heading.group(1):
        return heading.group(1), lines[first + 1:]
    following = lines[first + 1] if first + 1 < len(lines) else ""
    if following.strip() and _UNDERLINE.fullmatch(following) and following.strip()[0] in "=-":
        return lines[first].strip(), lines[first + 2:]
    return "", lines


def unwrap(lines: list[str], markup: bool) -> str:
    """Paragraphs on one line each (`paragraphs`): in markup, every line
    but a heading, list item, quote, table row or line of code continues
    its paragraph; in plain text, a line continues only a long one that
    does not end a sentence. Code fences themselves are dropped."""
    return paragraphs(_marked(lines) if markup else _plain(lines))


def link_text(body: str) -> str:
    """Markdown links and images, and [[wiki|links]], replaced by their text."""
    return _WIKILINK.sub(r"\1", _IMAGE_OR_LINK.sub(r"\1", body))


def _marked(lines: list[str]) -> Iterator[tuple[str, bool, bool]]:
    """Markup lines, each with whether it starts and ends a block of its own."""
    fenced = False
    for raw in lines:
        line = SPACES.sub(" ", raw).strip()
        if _FENCE.match(raw):
            fenced = not fenced
            yield "", True, True  # a fence ends the paragraph before it
        elif fenced:
            yield line, True, True
        elif heading := _ATX_HEADING.fullmatch(raw):
            yield heading.group(1), True, True
        else:
            yield line, _BLOCK_START.match(raw) is not None, False  # a list item or quote goes on in its next line


def _plain(lines: list[str]) -> Iterator[tuple[str, bool, bool]]:
    """Plain-text lines: a short line, or one ending a sentence, ends its block."""
    for raw in lines:
        line = SPACES.sub(" ", raw).strip()
        yield line, False, len(line) < _WRAP_WIDTH or line[-1:] in (".", "!", "?", ":", ";")
