"""Jupyter notebooks (.ipynb): one Document a notebook, its cells in order.

A notebook is one document, kept as a note is (text.py): its id and `path`
metadata are the file's absolute path. Markdown cells read as Markdown
(markdown.unwrap: headings, lists and links as in a .md note), code cells
as code, a line each, as a fenced block in a note reads; outputs are left
out (tables of numbers, images, tracebacks: what the code printed, not what
the author wrote). Its title is the first Markdown cell's heading, else
the file's name; the kernel's language is its `language` metadata.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import markdown
from .base import Record, Skip
from .streams import load_json
from .text import file_document

NOTEBOOK_SUFFIXES = (".ipynb",)


def read(path: Path, max_chars: int) -> Iterator[Record]:
    nb = load_json(path)  # FileSkip if it is not JSON
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list):
        yield Skip("unreadable", str(path), "not a Jupyter notebook (no list of cells)")
        return
    blocks, title = [], ""
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("markdown", "code"):
            continue
        lines = _source(cell.get("source")).split("\n")
        if cell["cell_type"] == "markdown":
            if not title and not blocks:
                title, lines = markdown.title(lines, markup=True)
            blocks.append(markdown.link_text(markdown.unwrap(lines, markup=True)))
        else:
            blocks.append(markdown.unwrap(["```", *lines, "```"], markup=True))
    language = _language(nb)
    body = "\n\n".join(b for b in blocks if b.strip())
    yield file_document(path, body, title, max_chars, {"language": language} if language else {})


def _source(source: Any) -> str:
    """A cell's source: a string, or the list of lines nbformat writes."""
    if isinstance(source, list):
        return "".join(s for s in source if isinstance(s, str))
    return source if isinstance(source, str) else ""


def _language(nb: dict[str, Any]) -> str:
    metadata = nb.get("metadata")
    info = metadata.get("language_info") if isinstance(metadata, dict) else None
    name = info.get("name") if isinstance(info, dict) else None
    if not isinstance(name, str) and isinstance(metadata, dict) and isinstance(metadata.get("kernelspec"), dict):
        name = metadata["kernelspec"].get("language")
    return name if isinstance(name, str) else ""
