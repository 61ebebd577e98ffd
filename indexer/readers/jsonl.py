"""JSON Lines: one object a line with `id`/`_id`, `text`, optional `title`;
and JSON documents holding such records (`read_json`).

Each line is its own record, so one bad line is one Skip ("path:line") and
the lines after it are still read; blank lines are not records. The same
rule reads the dicts of the Python API (`record_from_dict`), so a record
indexes the same from a file and from `Index.add`.

A JSON document (`format` "json": an array, or one object spread over
lines) is read whole: an array's objects are records ("path#i"), one object
with a `text` is one record (its id, else the file's absolute path), and
any other JSON (a package.json, a settings file) is one Skip for the file,
not one a line. A file that opens as an object but does not parse whole is
read as JSON Lines after all, so a JSON Lines file whose first line is bad
loses that line only.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .base import FileSkip, Record, Skip, document
from .streams import load_json, open_binary
from .text import file_id


def read(path: Path, max_chars: int) -> Iterator[Record]:
    """One JSON object per line with `id`/`_id`, `text` and optional `title`."""
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue  # blank lines are not records
            yield _jsonl_record(raw, f"{path}:{lineno}", max_chars)


def read_json(path: Path, max_chars: int) -> Iterator[Record]:
    """The records of a JSON document (see the module)."""
    try:
        data = load_json(path)
    except FileSkip as e:
        if e.skip.reason != "malformed_json" or not _opens_as_object(path):
            raise
        yield from read(path, max_chars)
        return
    if isinstance(data, list):
        for i, obj in enumerate(data):
            source = f"{path}#{i}"
            yield record_from_dict(obj, source, max_chars) if isinstance(obj, dict) else Skip(
                "malformed_json", source, f"a JSON {type(obj).__name__}, not an object")
    elif isinstance(data, dict) and isinstance(data.get("text"), str):
        yield record_from_dict(data if ("id" in data or "_id" in data) else {"id": file_id(path), **data},
                               str(path), max_chars)
    else:
        what = "an object without a text field" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
        yield Skip("unreadable", str(path), f"a JSON document that holds no records ({what})")


def _opens_as_object(path: Path) -> bool:
    with open_binary(path) as f:
        return f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{")


def _jsonl_record(raw: bytes, source: str, max_chars: int) -> Record:
    try:
        line = raw.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as e:
        return Skip("invalid_utf8", source, str(e))
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        return Skip("malformed_json", source, str(e))
    if not isinstance(obj, dict):
        return Skip("malformed_json", source, f"a JSON {type(obj).__name__}, not an object")
    return record_from_dict(obj, source, max_chars)


def record_from_dict(obj: dict[str, Any], source: str, max_chars: int = 2_000_000) -> Record:
    """A JSONL record's object as a Document (or the Skip saying why not):
    `id` or `_id` (string or integer), `text`, optional `title`, and any
    other fields as metadata. The Python API's `Index.add` reads dicts here."""
    doc_id = obj.get("_id", obj.get("id"))
    # bool is an int, but a boolean id is a data error, not a number.
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
        return Skip("missing_field", source, "no string or integer id/_id")
    text = obj.get("text")
    if not isinstance(text, str):
        return Skip("missing_field", source, "no string text")
    title = obj.get("title")
    metadata = _metadata(obj)  # the writer checks that JSON holds it (a Python dict's may not)
    return document(str(doc_id), text, title if isinstance(title, str) else "", source, max_chars, metadata=metadata)


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    """Every field of a JSONL record besides id, text and title; a BEIR
    record's `metadata` object is opened up into its fields (the record's
    own fields win a clash)."""
    nested = obj.get("metadata")
    fields = dict(nested) if isinstance(nested, dict) else {}
    if nested is not None and not isinstance(nested, dict):
        fields["metadata"] = nested
    fields.update((k, v) for k, v in obj.items() if k not in ("_id", "id", "text", "title", "metadata"))
    return fields
