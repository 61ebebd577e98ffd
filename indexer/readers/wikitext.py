"""Wikitext to plain prose, as a reader sees the rendered article.

Link text is kept; templates, refs, tables, files, categories, comments and
the trailing lists of citations and links are dropped, because they are not
prose a question is answered from. Headings, list items and other blocks
keep a line of their own; a single newline inside a paragraph is a space,
as MediaWiki renders it.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import mwparserfromhell
from mwparserfromhell.nodes import (
    ExternalLink,
    Heading,
    HTMLEntity,
    Node,
    Tag,
    Text,
    Wikilink,
)

from .paragraphs import SPACES, paragraphs

# Tags whose content is not prose.
_DROP_TAGS = frozenset(
    """ref references table gallery math chem ce timeline imagemap score graph
    mapframe maplink templatedata syntaxhighlight source pre inputbox
    categorytree includeonly hiero""".split()
)
_BLOCK_TAGS = frozenset("br hr li dt dd ul ol dl p div blockquote tr".split())
_DROP_LINK_NAMESPACES = frozenset({"file", "image", "category", "media"})
_INTERLANGUAGE = re.compile(r"[a-z]{2,3}(?:-[a-z]+)*")
# Marks a line that starts a block of its own (heading, list item) rather than
# continuing a paragraph. NUL cannot occur in XML text, so never in a dump.
_OWN_LINE = "\x00"
# Trailing sections that are lists of citations and links, not prose.
_DROP_SECTIONS = frozenset(
    {
        "references", "notes", "notes and references", "footnotes", "citations",
        "sources", "bibliography", "further reading", "see also", "external links",
    }
)


def render_wikitext(wikitext: str) -> str:
    """Plain prose from wikitext: link text kept; templates, refs, tables,
    files, categories and comments dropped; headings on their own line."""
    out: list[str] = []
    # Bold/italic quotes are removed in _clean: parsing them into tags is slow.
    _render(mwparserfromhell.parse(_strip_dropped(wikitext), skip_style_tags=True).nodes, out)
    return _clean("".join(out))


_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_DROPPED_ELEMENT = re.compile(
    rf"<({'|'.join(sorted(_DROP_TAGS))})\b[^>]*?/>|<({'|'.join(sorted(_DROP_TAGS))})\b[^>]*>.*?</\2\s*>",
    re.DOTALL | re.IGNORECASE,
)
_TEMPLATE_BRACES = re.compile(r"(?P<open>\{\{)|\}\}")
_TABLE_BRACES = re.compile(r"^[ \t]*(?:(?P<open>\{\|)|\|\})", re.MULTILINE)


def _strip_dropped(wikitext: str) -> str:
    """Remove comments, non-prose elements, templates and tables before parsing.

    mwparserfromhell builds a Python node for everything inside templates and
    refs, which is most of the cost of parsing an article; what is removed
    here would be dropped from the output anyway.
    """
    text = _COMMENT.sub("", wikitext)
    text = _DROPPED_ELEMENT.sub("", text)
    text = _strip_balanced(text, _TEMPLATE_BRACES)
    return _strip_balanced(text, _TABLE_BRACES)


def _strip_balanced(text: str, braces: re.Pattern[str]) -> str:
    """Remove outermost balanced open...close regions of `braces` (an "open"
    group marks openers). An opener never closed is left for the parser."""
    out: list[str] = []
    depth = 0
    kept_until = 0
    region_start = 0
    for m in braces.finditer(text):
        if m.group("open"):
            if depth == 0:
                region_start = m.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                out.append(text[kept_until:region_start])
                kept_until = m.end()
    out.append(text[kept_until:])
    return "".join(out)


def _render(nodes: Iterable[Node], out: list[str]) -> None:
    """Append the prose of `nodes` to `out`; a dropped section (see
    _DROP_SECTIONS) runs until a heading of its level or above."""
    dropping_level = 0  # inside a dropped section of this heading level
    for node in nodes:
        if isinstance(node, Heading):
            if dropping_level and node.level > dropping_level:
                continue
            heading = _plain(node.title.nodes).strip()
            dropping_level = node.level if heading.lower() in _DROP_SECTIONS else 0
            if not dropping_level:
                out.append(f"\n\n{_OWN_LINE}{heading}\n")
        elif not dropping_level:
            _render_inline(node, out)


def _render_inline(node: Node, out: list[str]) -> None:
    """Append the prose of one node that is not a heading."""
    if isinstance(node, Text):
        out.append(node.value)
    elif isinstance(node, Wikilink):
        _render_link(node, out)
    elif isinstance(node, ExternalLink):
        if node.title is not None:  # a bare URL is not prose
            _render(node.title.nodes, out)
    elif isinstance(node, Tag):
        _render_tag(node, out)
    elif isinstance(node, HTMLEntity):
        out.append(node.normalize())
    # Templates, arguments and comments are dropped.


def _plain(nodes: Iterable[Node]) -> str:
    out: list[str] = []
    _render(nodes, out)
    return "".join(out)


def _render_link(link: Wikilink, out: list[str]) -> None:
    """A link's text, else its target; files, categories and interlanguage
    links are not prose and are dropped."""
    title = str(link.title).strip()
    prefix, colon, _ = title.partition(":")
    prefix = prefix.strip().lower()
    if colon and (prefix in _DROP_LINK_NAMESPACES or (link.text is None and _INTERLANGUAGE.fullmatch(prefix))):
        return
    if link.text is not None and str(link.text).strip():
        _render(link.text.nodes, out)
    else:
        out.append(_plain(link.title.nodes).strip().lstrip(":"))


def _render_tag(tag: Tag, out: list[str]) -> None:
    name = str(tag.tag).strip().lower()
    if name in _DROP_TAGS:
        return
    if name in _BLOCK_TAGS or tag.wiki_markup:  # list items, <br>, <p>...
        # Wiki list markup already starts a line, except ";term:definition".
        at_line_start = not out or out[-1].endswith("\n")
        out.append(_OWN_LINE if at_line_start else "\n" + _OWN_LINE)
    if tag.contents is not None:
        _render(tag.contents.nodes, out)


_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_STYLE_QUOTES = re.compile(r"'{2,}")
_EMPTY_PARENS = re.compile(r"\([\s,;:]*\)")
_SPACE_BEFORE_PUNCT = re.compile(r" +(?=[,.;:!?)])")
# "( ; born 1947" once a pronunciation template is gone.
_PUNCT_AFTER_OPEN = re.compile(r"\([\s,;:]+")


def _clean(text: str) -> str:
    """Tidy what dropped markup leaves behind: stray spaces and quotes, empty
    parentheses, lines without words. A single newline inside a paragraph is
    a space, as MediaWiki renders it; at most one blank line separates blocks."""
    text = _STYLE_QUOTES.sub("", _MAGIC_WORD.sub("", text))

    def lines() -> Iterator[tuple[str, bool, bool]]:
        for raw in text.splitlines():
            own_line = raw.lstrip().startswith(_OWN_LINE)
            line = SPACES.sub(" ", raw.replace(_OWN_LINE, ""))
            line = _PUNCT_AFTER_OPEN.sub("(", _EMPTY_PARENS.sub("", line))
            yield _SPACE_BEFORE_PUNCT.sub("", line).strip(), own_line, own_line

    return paragraphs(lines())
