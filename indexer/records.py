"""A stored document's record: one JSON object a document, in a shard's LMDB
under `doc/<ordinal>`, holding everything the user gave (id, title, text,
sentence spans, focus, metadata, stamp), so a search can show it, a sync
can compare it with its file, and a merge can write it again, all without
the input files.

The id is the record's first field: rankings, fusion and filters ask for
the ids of many documents they never show, and `doc_id` reads it without
parsing a whole article.
"""
from __future__ import annotations

import json

from propdex.encoders.units import Document

_ID_FIRST = b'{"id": "'  # every record's first bytes


def record(doc: Document) -> bytes:
    """The record of `doc`; fields a document lacks are left out."""
    fields = {"id": doc.id, "title": doc.title, "text": doc.text, "sentences": doc.sentences}
    if doc.focus:
        fields["focus"] = doc.focus
    if doc.stamp:
        fields["stamp"] = doc.stamp
    if doc.metadata:
        fields["metadata"] = dict(doc.metadata)
    return json.dumps(fields, ensure_ascii=False).encode()


def document(raw: bytes) -> Document:
    """The document a record holds (its spans were checked when it was written)."""
    r = json.loads(raw)
    return Document.read_back(r["id"], r["text"], r.get("title", ""), tuple(map(tuple, r["sentences"])),
                              tuple(map(tuple, r.get("focus", ()))), r.get("metadata", {}), r.get("stamp", ""))


def doc_id(raw: bytes) -> str:
    """A record's id, parsed alone. Its closing quote is the first that no
    backslash escapes (UTF-8 never puts a quote byte inside another
    character); a record written otherwise is parsed whole."""
    if raw.startswith(_ID_FIRST):
        end = len(_ID_FIRST) - 1
        while (end := raw.find(b'"', end + 1)) >= 0:
            head = raw[len(_ID_FIRST) : end]
            if (len(head) - len(head.rstrip(b"\\"))) % 2 == 0:
                return json.loads(raw[len(_ID_FIRST) - 1 : end + 1])
    return json.loads(raw)["id"]
