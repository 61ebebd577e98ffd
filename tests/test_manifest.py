"""The typed manifest reads and writes the JSON every index already has,
byte for byte: a real index's manifest round-trips, and so does an older
one with keys this version does not know or lacks."""
from __future__ import annotations

import json

from propdex.encoders import load_encoder
from propdex.indexer.build import IndexWriter
from propdex.indexer.manifest import Manifest, Shard, Status, read_manifest


def _same_bytes(directory, tmp_path):
    text = (directory / "manifest.json").read_text()
    (tmp_path / "again").mkdir(exist_ok=True)
    Manifest.read(directory).write(tmp_path / "again")
    return (tmp_path / "again" / "manifest.json").read_text() == text


def test_a_real_manifest_round_trips_byte_for_byte(tmp_path, tiny, hotpot_docs):
    enc = load_encoder("tokens", backbone=tiny)
    IndexWriter(tmp_path / "ix", enc, shard_docs=5, factory="Flat").build(hotpot_docs[:12])
    assert _same_bytes(tmp_path / "ix", tmp_path)
    assert IndexWriter.open(tmp_path / "ix", enc).delete([hotpot_docs[0].id])["deleted"] == 1
    assert _same_bytes(tmp_path / "ix", tmp_path)
    m = Manifest.read(tmp_path / "ix")
    assert m.status is Status.COMPLETE and m.generation == 1 and m.shards[0].deleted_docs == 1
    assert m.counts.documents == 11 and m.to_json() == read_manifest(tmp_path / "ix")  # the raw view is the same JSON


def test_an_older_manifest_keeps_its_keys_and_their_order():
    raw = {"format": "propdex-index", "status": "complete", "version": 1, "from_the_future": [1, 2],
           "shards": [{"name": "shard-00000", "docs": 3, "index": "index.faiss", "note": "kept"}], "index": None}
    m = Manifest.from_json(json.loads(json.dumps(raw)))
    assert m.to_json() == raw and list(m.to_json()) == list(raw)
    assert m.settings is None and m.shards[0].deleted_docs is None and not m.shards[0].has("deleted")
    # A key set later goes last, as in a dict; one set again keeps its place.
    m.shards[0].deleted, m.generation, m.status = "deleted-000001.npy", 1, Status.LEXICAL
    assert list(m.to_json())[-1] == "generation" and m.to_json()["status"] == "lexical"
    assert list(m.to_json()["shards"][0]) == ["name", "docs", "index", "note", "deleted"]


def test_a_new_shard_entry_has_the_keys_a_build_writes_in_their_order():
    assert list(Shard(name="shard-00000").to_json())[:3] == ["name", "inputs", "docs"]
    assert "index_bytes" not in Shard().to_json() and "index" in Shard().to_json()
