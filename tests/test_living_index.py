"""The front door (propdex.Index) and the living index under it: add, update,
delete and compact as atomic commits, readers that keep their view, metadata
and where= filters, hits with their text, the CLI commands, one namespace."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import faiss
import pytest
from paths import DATA

import propdex
from propdex.cli import main
from propdex.encoders import Document, load_encoder
from propdex.indexer import ann, phases
from propdex.indexer.build import IndexWriter
from propdex.indexer.readers import read_corpus
from propdex.retriever import Searcher
from propdex.retriever import searcher as searcher_module
from propdex.retriever.searcher import set_threads

SCIFACT = DATA / "beir" / "scifact"
QUERIES = ["cell membrane proteins", "cancer risk in children", "vitamin D deficiency", "brain white matter development"]


def _docs(n: int) -> list[Document]:
    """Real SciFact abstracts, each with metadata to filter on."""
    docs = [d for _, d in zip(range(n), read_corpus([SCIFACT / "corpus.jsonl"]))]
    return [replace(d, metadata={"parity": i % 2, "group": f"g{i % 3}", "tags": [f"t{i % 4}", "all"]}) for i, d in enumerate(docs)]


def _ranking(index, query: str, **kw) -> list[tuple[str, float]]:
    return [(h.doc_id, round(h.score, 4)) for h in index.search(query, k=8, **kw)]


@pytest.fixture
def encoder(tiny):
    return load_encoder("tokens", backbone=tiny)


def test_add_update_delete_compact_equal_a_fresh_build_of_the_result(tmp_path, encoder):
    docs = _docs(30)
    changed = replace(docs[5], text="Vitamin D deficiency is common in northern countries. " + docs[5].text, sentences=())
    index = propdex.Index.create(tmp_path / "live", encoder, shard_docs=8)
    assert len(index) == 0 and index.search("anything") == []
    assert index.add(docs[:20])["added"] == 20
    assert index.add(docs[20:])["added"] == 10
    assert index.update([changed]) == {"added": 1, "replaced": 1, "unchanged": 0, "skipped": {}}
    assert index.delete(["7", docs[12].id, "no-such-id"]) == {"deleted": 1, "missing": ["7", "no-such-id"]}
    assert index.delete([docs[7].id])["deleted"] == 1
    final = [changed if d.id == changed.id else d for d in docs if d.id not in (docs[7].id, docs[12].id)]
    assert len(index) == len(final) and docs[12].id not in index and index.get(changed.id).text == changed.text

    IndexWriter(tmp_path / "fresh", encoder, shard_docs=8).build(final)
    with Searcher.load(tmp_path / "fresh", encoder=encoder) as fresh:
        expected = {q: [(h.doc_id, round(h.score, 4)) for h in fresh.search(q, k=8)] for q in QUERIES}
        expected_bm25 = {q: {h.doc_id: h.score for h in fresh.search(q, k=30, bm25=True)} for q in QUERIES}
    for q in QUERIES:
        assert _ranking(index, q) == expected[q]
        # BM25 by segments, deletions and updates left out: a one-shot build's scores, to the bit.
        assert {h.doc_id: h.score for h in index.search(q, k=30, bm25=True)} == expected_bm25[q]

    shards_before = len(index.manifest["shards"])
    result = index.compact()
    assert result["removed"] == 3 and len(index.manifest["shards"]) < shards_before
    assert index.manifest["counts"]["deleted"] == 0 and len(index) == len(final)
    for q in QUERIES:
        assert _ranking(index, q) == expected[q]
        assert {h.doc_id: h.score for h in index.search(q, k=30, bm25=True)} == expected_bm25[q]
    # What no commit lists any longer is gone from the disk.
    listed = {s["name"] for s in index.manifest["shards"]} | {"manifest.json", "trained.faiss", "write.lock"}
    assert {p.name for p in (tmp_path / "live").iterdir()} == listed
    assert main(["verify", str(tmp_path / "live")]) == 0
    index.close()


def test_merge_policy_keeps_the_shard_count_logarithmic_under_one_document_adds(tmp_path, tiny):
    from propdex.indexer import living

    assert [living.tier(n) for n in (1, 3, 4, 15, 16, 64)] == [0, 0, 1, 1, 2, 3]
    docs = _docs(600)
    encoder = load_encoder("single", backbone=tiny)
    index = propdex.Index.create(tmp_path / "live", encoder, shard_docs=64)
    index.add(docs[:100])  # one full shard, one of 36
    most = 0
    for d in docs[100:]:
        index.add([d])
        shards = index.manifest["shards"]
        most = max(most, len(shards))
        # At most MERGE_FACTOR - 1 shards a tier below shard_docs, after every add.
        small = [living.tier(s["docs"] - (s.get("deleted_docs") or 0)) for s in shards if s["docs"] < 64]
        assert max(small.count(t) for t in set(small)) < living.MERGE_FACTOR if small else True
    # 500 adds, not 502 shards: the full ones, and at most 3 a tier of the 3 tiers below 64 documents.
    assert most <= 600 // 64 + 1 + 3 * (living.MERGE_FACTOR - 1)
    assert len(index) == 600 and index.manifest["counts"]["documents"] == 600
    IndexWriter(tmp_path / "fresh", encoder, shard_docs=64).build(docs)
    with Searcher.load(tmp_path / "fresh", encoder=encoder) as fresh:
        for q in QUERIES:  # the merged segments' BM25 is the one-shot build's
            assert {h.doc_id: h.score for h in index.search(q, k=50, bm25=True)} == {
                h.doc_id: h.score for h in fresh.search(q, k=50, bm25=True)}
    assert {h.doc_id for h in index.search(docs[450].title + " " + docs[450].text[:200], k=5)} >= {docs[450].id}
    index.close()


def test_a_reader_keeps_its_view_while_a_writer_commits(tmp_path, encoder):
    docs = _docs(12)
    writer = propdex.Index.create(tmp_path / "i", encoder, shard_docs=4)
    writer.add(docs)
    reader = propdex.Index.open(tmp_path / "i")  # its own encoder, same shards: LMDB opened once per process
    before = _ranking(reader, QUERIES[0])
    gone = before[0][0]
    writer.delete([gone])
    writer.compact()  # removes the shard files the reader has open
    assert _ranking(reader, QUERIES[0]) == before
    assert gone not in [d for d, _ in _ranking(writer, QUERIES[0])]
    reader.refresh()
    assert _ranking(reader, QUERIES[0]) == _ranking(writer, QUERIES[0])
    reader.close()
    writer.close()


def test_a_reader_opens_what_the_commit_lists_not_what_lies_in_the_directory(tmp_path, encoder):
    """store="codes" drops each new shard's float16 copy after the commit
    that stops listing it: a reader opening that commit in between must not
    read the copy (it may vanish under it, as it did under `propdex serve`'s
    concurrent adds). Here every shard holds such a leftover, unreadable."""
    index = propdex.Index.create(tmp_path / "i", encoder, shard_docs=4)
    index.add(_docs(10))
    before = _ranking(index, QUERIES[1])
    shards = sorted(tmp_path.glob("i/shard-*"))
    assert shards and all(not (s / "vectors.f16").exists() for s in shards)
    for s in shards:
        (s / "vectors.f16").write_bytes(b"a copy half removed")
    index.refresh()
    assert _ranking(index, QUERIES[1]) == before
    index.close()


def test_a_failed_add_commits_nothing_and_leaves_nothing(tmp_path, encoder, monkeypatch):
    index = propdex.Index.create(tmp_path / "i", encoder, shard_docs=4)
    index.add(_docs(6))
    manifest = (tmp_path / "i" / "manifest.json").read_text()
    before = _ranking(index, QUERIES[1])

    def crash(*a, **kw):
        raise RuntimeError("killed while filling the ANN index")

    monkeypatch.setattr(phases, "fill", crash)
    with pytest.raises(RuntimeError):
        index.update([replace(d, title=d.title + " (revised)") for d in _docs(10)[3:]])  # replaces 3, adds 4
    monkeypatch.undo()
    assert (tmp_path / "i" / "manifest.json").read_text() == manifest
    assert _ranking(index.refresh(), QUERIES[1]) == before
    # The next writer removes the uncommitted shards; the same call then succeeds.
    revised = [replace(d, title=d.title + " (revised)") for d in _docs(10)[3:]]
    assert index.update(revised) == {"added": 7, "replaced": 3, "unchanged": 0, "skipped": {}}
    assert sorted(p.name for p in (tmp_path / "i").glob("shard-*")) == [s["name"] for s in index.manifest["shards"]]
    index.close()


def test_adding_a_known_id_is_refused_and_bad_records_are_counted(tmp_path, encoder, caplog):
    index = propdex.Index.create(tmp_path / "i", encoder)
    index.add([{"id": "a", "text": "Alpha particles."}])
    with pytest.raises(ValueError, match=r"in .* already \('a'\).*update"):
        index.add([{"id": "b", "text": "Beta."}, {"id": "a", "text": "Alpha again."}])
    assert "b" not in index  # all or nothing
    # An add is written a shard at a time: a known id in a later shard is refused all the same, and the
    # shards written before it are removed, not left for the next writer.
    small = propdex.Index.create(tmp_path / "small", encoder, shard_docs=2)
    small.add([{"id": "a", "text": "Alpha particles."}])
    with pytest.raises(ValueError, match=r"in .* already \('a'\)"):
        small.add([{"id": i, "text": f"Record {i}."} for i in "bcde"] + [{"id": "a", "text": "Alpha again."}])
    assert sorted(p.name for p in (tmp_path / "small").glob("shard-*")) == [s["name"] for s in small.manifest["shards"]]
    assert len(small.refresh()) == 1
    result = small.add([{"id": i, "text": f"Record {i}."} for i in "bcde"] + [{"text": "no id"}])
    assert result == {"added": 4, "replaced": 0, "unchanged": 0, "skipped": {"missing_field": 1}}
    assert [s["docs"] for s in small.manifest["shards"]] == [1, 2, 2]  # two shards of shard_docs from one add
    assert sum(s["inputs"] for s in small.manifest["shards"]) == 1 + 5  # every record read is counted once
    small.close()
    result = index.add([{"id": "c", "text": "Gamma rays."}, {"id": "c", "text": "twice"}, {"text": "no id"},
                        {"id": "d", "text": "   "}, {"id": "e", "text": "Epsilon.", "when": object()}])
    assert result == {"added": 1, "replaced": 0, "unchanged": 0,
                      "skipped": {"duplicate_id": 1, "missing_field": 1, "empty": 1, "bad_metadata": 1}}
    assert "document 4" in caplog.text and "bad_metadata" in caplog.text
    with pytest.raises(ValueError, match="list of documents"):
        index.add({"id": "f", "text": "one dict"})
    with pytest.raises(ValueError, match="not a str"):
        index.add("Zeta functions.")  # not seven one-letter records
    index.close()


def test_a_document_handed_in_whole_passes_the_readers_gate(tmp_path, encoder, caplog):
    """A Document skips the readers but not their rules: blank text and an
    unkeyable id are counted skips, lone surrogates are repaired."""
    from propdex.encoders import Document

    index = propdex.Index.create(tmp_path / "i", encoder)
    docs = [Document("blank", "  \n "), Document("x" * 600, "A long id."), Document("sur", "Caf\udce9 au lait.", "T\ud800"),
            Document("fine", "Fine text.")]
    assert index.add(docs) == {"added": 2, "replaced": 0, "unchanged": 0, "skipped": {"empty": 1, "bad_id": 1}}
    assert index.get("sur").text == "Caf\ufffd au lait." and index.get("sur").title == "T\ufffd"
    assert "lone surrogates" in caplog.text and "blank" not in index
    index.close()


def test_a_sync_mirrors_the_folder_and_refuses_to_empty_the_index(tmp_path, encoder, capsys):
    """update(delete_missing=True) deletes, in the same commit, what the
    folder no longer holds; a read with no document deletes nothing."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in (("a.md", "The launch moved to June."), ("b.md", "Ana owns the budget."), ("c.md", "Tom buys seeds.")):
        (notes / name).write_text(text + "\n")
    index = propdex.Index.create(tmp_path / "i", encoder)
    assert index.add(propdex.read_corpus([notes]))["added"] == 3
    (notes / "b.md").unlink()
    (notes / "c.md").write_text("Tom buys seeds and bulbs.\n")
    (notes / "d.md").write_bytes(b"caf\xe9\n")  # skipped: names no document
    generation = index.manifest["generation"]
    result = index.update(propdex.read_corpus([notes]), delete_missing=True)
    assert result == {"added": 1, "replaced": 1, "unchanged": 1, "deleted": 1, "skipped": {"invalid_utf8": 1}}
    assert index.manifest["generation"] == generation + 1  # one commit: the change and the deletion together
    assert sorted(Path(h.doc_id).name for h in index.search("budget seeds launch", k=10)) == ["a.md", "c.md"]
    # A note's removal alone is a commit of its own; nothing else is encoded.
    (notes / "a.md").unlink()
    assert index.update(propdex.read_corpus([notes]), delete_missing=True) == {
        "added": 0, "replaced": 0, "unchanged": 1, "deleted": 1, "skipped": {"invalid_utf8": 1}}
    assert len(index) == 1 and str(notes / "c.md") in index
    # An emptied read (a wrong folder, every file unreadable) would delete everything: refused, nothing changed.
    (notes / "c.md").unlink()
    with pytest.raises(ValueError, match="no document.*would empty"):
        index.update(propdex.read_corpus([notes]), delete_missing=True)
    assert len(index.refresh()) == 1
    # The command line says what it did, and wants --update beside --delete-missing.
    (notes / "e.md").write_text("Eve paints the fence.\n")
    assert main(["-q", "add", str(tmp_path / "i"), str(notes), "--update", "--delete-missing", "--device", "cpu"]) == 0
    assert "added 1 documents to" in (out := capsys.readouterr().out) and "(0 replaced, 0 unchanged, 1 deleted)" in out
    assert [h.doc_id for h in index.refresh().search("who paints?", k=5)] == [str(notes / "e.md")]
    assert main(["-q", "add", str(tmp_path / "i"), str(notes), "--delete-missing", "--device", "cpu"]) != 0
    index.close()


def test_a_sync_reads_only_the_files_that_changed(tmp_path, encoder, monkeypatch):
    """Index.sync passes over a file whose size and modification time are
    those it was read at (its stored stamp); an edited file, one put back
    from an older copy and one only touched are read (the touched one is
    then found unchanged); stamps survive a compaction."""
    import os

    from propdex.indexer.readers import corpus

    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in (("a.md", "The launch moved to June."), ("b.md", "Ana owns the budget."), ("c.md", "Tom buys seeds.")):
        (notes / name).write_text(text + "\n")
    read: list[str] = []
    real = corpus.READERS["text"]

    def counted(path, max_chars):
        read.append(path.name)
        yield from real(path, max_chars)

    monkeypatch.setitem(corpus.READERS, "text", counted)

    def sync() -> dict:
        read.clear()
        return index.sync(notes, delete_missing=True)

    index = propdex.Index.create(tmp_path / "i", encoder, shard_docs=2)
    assert sync()["added"] == 3 and sorted(read) == ["a.md", "b.md", "c.md"]
    stamp = index.get(str(notes / "a.md")).stamp
    assert stamp == f"{(notes / 'a.md').stat().st_size}:{(notes / 'a.md').stat().st_mtime_ns}"
    generation = index.manifest["generation"]
    assert sync() == {"added": 0, "replaced": 0, "unchanged": 3, "skipped": {}, "deleted": 0} and read == []
    assert index.manifest["generation"] == generation  # nothing read, nothing committed
    # An edit is read; so is a file put back from an older copy (an earlier stamp is no match), and a new one.
    old = (notes / "a.md").stat()
    (notes / "b.md").write_text("Ana and Tom own the budget.\n")
    (notes / "a.md").write_text("The launch moved to July.\n")
    os.utime(notes / "a.md", ns=(old.st_atime_ns, old.st_mtime_ns - 10**9))
    (notes / "d.md").write_text("Eve paints the fence.\n")
    assert sync() == {"added": 3, "replaced": 2, "unchanged": 1, "skipped": {}, "deleted": 0}
    assert sorted(read) == ["a.md", "b.md", "d.md"] and "July" in index.get(str(notes / "a.md")).text
    # Touched, not edited: read, found unchanged, nothing committed; its stored stamp stays the one it was read at.
    c = (notes / "c.md").stat()
    os.utime(notes / "c.md", ns=(c.st_atime_ns, c.st_mtime_ns + 10**9))
    generation = index.manifest["generation"]
    assert sync()["unchanged"] == 4 and read == ["c.md"] and index.manifest["generation"] == generation
    # A note there but unreadable this time (saved as Latin-1) keeps its earlier version: a skip, not a deletion.
    (notes / "b.md").write_bytes("Ana and Tom own the caf\u00e9 budget.\n".encode("latin-1"))
    assert sync() == {"added": 0, "replaced": 0, "unchanged": 3, "skipped": {"invalid_utf8": 1}, "deleted": 0}
    assert index.get(str(notes / "b.md")).text == "Ana and Tom own the budget."
    (notes / "b.md").write_text("Ana and Tom own the budget.\n")
    # A deleted note leaves; the stamps of the rest survive the compaction that rewrites their shards.
    (notes / "c.md").unlink()
    assert "deleted" not in index.sync(notes) and str(notes / "c.md") in index  # deleting is asked for, never assumed
    assert sync()["deleted"] == 1 and read == ["b.md"]
    index.compact()  # b.md, rewritten as it was, is read at every sync: its stamp is still the first one
    assert sync() == {"added": 0, "replaced": 0, "unchanged": 3, "skipped": {}, "deleted": 0} and read == ["b.md"]
    # The command line's --update is the same sync.
    (notes / "d.md").write_text("Eve paints the gate.\n")
    read.clear()
    assert main(["-q", "add", str(tmp_path / "i"), str(notes), "--update", "--device", "cpu"]) == 0
    assert read == ["b.md", "d.md"] and "gate" in index.refresh().get(str(notes / "d.md")).text
    index.close()


def test_metadata_from_numpy_and_dates_is_stored_and_filtered_as_json_holds_it(tmp_path, encoder):
    import datetime

    import numpy as np

    index = propdex.Index.create(tmp_path / "i", encoder)
    rows = [{"id": f"r{i}", "text": f"Report number {i} on rainfall.", "n": np.int64(i), "score": np.float32(i / 2),
             "day": datetime.date(2024, 1, 1 + i), "tags": np.array(["rain", f"t{i}"])} for i in range(4)]
    assert index.add(rows)["added"] == 4
    assert index.get("r2").metadata == {"n": 2, "score": 1.0, "day": "2024-01-03", "tags": ["rain", "t2"]}
    found = {h.doc_id for h in index.search("rainfall", k=10, where={"day": {">=": datetime.date(2024, 1, 3)}})}
    assert found == {"r2", "r3"}
    assert {h.doc_id for h in index.search("rainfall", k=10, where={"n": np.int64(1), "tags": "t1"})} == {"r1"}
    assert {h.doc_id for h in index.search("rainfall", k=10, where={"n": np.array([0, 3])})} == {"r0", "r3"}
    index.close()


def test_a_folder_of_notes_goes_in_through_read_corpus_with_its_skips_counted(tmp_path, encoder):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("---\ndate: 2026-03-02\ntags: [launch, web]\n---\n# Launch\n\nThe launch moved to June.\n")
    (notes / "b.txt").write_text("Ana owns the budget.\n")
    (notes / "c.md").write_bytes(b"caf\xe9\n")
    index = propdex.Index.create(tmp_path / "i", encoder)
    result = index.add(propdex.read_corpus([notes]))
    assert result == {"added": 2, "replaced": 0, "unchanged": 0, "skipped": {"invalid_utf8": 1}}
    assert str(notes / "a.md") in index and str(notes / "b.txt") in index
    # Front matter and the note's path are metadata: a date compares as the ISO string it is stored as.
    assert [h.doc_id for h in index.search("budget launch", where={"date": {">=": "2026-01-01"}})] == [str(notes / "a.md")]
    assert [h.doc_id for h in index.search("budget launch", where={"tags": "web"})] == [str(notes / "a.md")]
    assert {h.doc_id for h in index.search("budget launch", where={"path": {"prefix": str(notes) + "/"}})} == {
        str(notes / "a.md"), str(notes / "b.txt")}
    assert index.search("budget launch", where={"path": {"prefix": str(tmp_path / "elsewhere")}}) == []
    (notes / "a.md").write_text("---\ndate: 2026-03-02\ntags: [launch, web]\n---\n# Launch\n\nThe launch moved to July.\n")
    # Re-syncing the whole folder re-encodes only the note that changed: no new shard holds the others.
    shards = len(index.manifest["shards"])
    assert index.update(propdex.read_corpus([notes])) == {"added": 1, "replaced": 1, "unchanged": 1, "skipped": {"invalid_utf8": 1}}
    assert len(index) == 2
    assert len(index.manifest["shards"]) <= shards + 1
    generation = index.manifest["generation"]
    assert index.update(propdex.read_corpus([notes / "a.md", notes / "b.txt"])) == {
        "added": 0, "replaced": 0, "unchanged": 2, "skipped": {}}
    assert index.refresh().manifest["generation"] == generation  # nothing changed, nothing committed
    (hit,) = [h for h in index.search("launch", k=2) if h.doc_id == str(notes / "a.md")]
    assert hit.title == "Launch" and "July" in hit.text
    index.close()


@pytest.mark.parametrize("name", ["tokens", "single"])
@pytest.mark.parametrize("exact", [True, False])
def test_where_filters_inside_stage_one_and_still_returns_k(tmp_path, tiny, monkeypatch, exact, name):
    encoder = load_encoder(name, backbone=tiny)
    docs = _docs(60)
    # IVF with one probed list: without probing further, a filter would starve stage 1.
    IndexWriter(tmp_path / "i", encoder, factory="IVF4,Flat").build(docs)
    if not exact:
        monkeypatch.setattr(searcher_module, "EXACT_FILTERED_VECTORS", 0)
    meta = {d.id: d.metadata for d in docs}
    with Searcher.load(tmp_path / "i", encoder=encoder, nprobe=1) as s:
        for q in QUERIES:
            everything = s.search(q, k=60, nprobe=4, rerank=60)  # every document, in one exactly scored page
            for where, keep in [({"parity": 1}, lambda m: m["parity"] == 1),
                                ({"group": ["g0", "g2"]}, lambda m: m["group"] in ("g0", "g2")),
                                ({"tags": "t3", "parity": 1}, lambda m: "t3" in m["tags"] and m["parity"] == 1),
                                ({"group": "g1", "tags": "all"}, lambda m: m["group"] == "g1"),
                                ({"group": "g0", "tags": "t0"}, lambda m: m["group"] == "g0" and "t0" in m["tags"])]:  # 5 of 60
                best = [(h.doc_id, round(h.score, 4)) for h in everything if keep(meta[h.doc_id])][:5]
                # Every list probed: exactly the best matching documents.
                assert [(h.doc_id, round(h.score, 4)) for h in s.search(q, k=5, where=where, nprobe=4)] == best, where
                # One list probed: approximate, but never fewer than k hits while k documents match.
                hits = s.search(q, k=5, where=where)
                assert len(hits) == 5 and all(keep(meta[h.doc_id]) and h.metadata == meta[h.doc_id] for h in hits)
                if exact:
                    assert [(h.doc_id, round(h.score, 4)) for h in hits] == best
            assert s.search(q, k=5, where={"group": "g9"}) == []
            assert [h.doc_id for h in s.search(q, k=5, where={"parity": 0}, hybrid=True)] and all(
                meta[h.doc_id]["parity"] == 0 for h in s.search(q, k=5, where={"parity": 0}, hybrid=True))
            assert all(meta[h.doc_id]["group"] == "g2" for h in s.search(q, k=5, where={"group": "g2"}, bm25=True))
            assert all(meta[h.doc_id]["parity"] == 1 for h in s.search(q, k=5, level="sentence", where={"parity": 1}))
        for bad in ({"parity": {"a": 1}}, {"parity": []}, {"": 1}, ["parity"]):
            with pytest.raises(ValueError, match="where"):
                s.search("q", where=bad)


def test_hits_carry_the_text_that_matched_and_the_metadata(tmp_path, encoder):
    docs = _docs(10)
    IndexWriter(tmp_path / "i", encoder).build(docs)
    by_id = {d.id: d for d in docs}
    with Searcher.load(tmp_path / "i", encoder=encoder) as s:
        for level in ("doc", "sentence", "unit"):
            for h in s.search(QUERIES[3], k=3, level=level):
                doc = by_id[h.doc_id]
                # At document level the text is the winning passage, whole sentences of the document.
                first, last = h.passage
                assert h.text == (doc.text[doc.sentences[first][0]:doc.sentences[last][1]] if level == "doc" else h.sentence_text) and h.text
                assert h.sentence_text in h.text and h.document_text == doc.text
                assert h.metadata == doc.metadata
                assert h.to_json()["text"] == h.text and h.to_json()["metadata"] == doc.metadata
        for h in s.search(QUERIES[3], k=3, bm25=True):
            assert h.sentence_text in h.text and h.text in by_id[h.doc_id].text and len(h.text.split()) <= max(180, len(h.sentence_text.split()))


def test_readers_keep_the_records_other_fields(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"id": 1, "title": "T", "text": "Some text.", "url": "http://x", "year": 2021}) + "\n"
                    + json.dumps({"_id": "b", "text": "More.", "metadata": {"source": "pmc", "year": 1}, "year": 2}) + "\n")
    a, b = read_corpus([path])
    assert a.metadata == {"url": "http://x", "year": 2021}
    assert b.metadata == {"source": "pmc", "year": 2}  # BEIR's metadata opened up; the record's own field wins
    wiki = next(read_corpus([DATA / "wikipedia" / "extracted" / "AA" / "wiki_00.bz2"]))
    assert wiki.metadata["url"] == "http://en.wikipedia.org/wiki?curid=12" and "id" not in wiki.metadata


def test_a_writer_loads_its_model_only_to_encode(tmp_path, tiny_dir):
    """A writer opened on an index builds its encoder at its first encode:
    a sync that finds nothing changed, a delete, `info`, `verify` and
    `--help` never import torch; the weights check an open made is made
    when the model loads, before anything is committed."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in (("a.md", "The launch moved to June."), ("b.md", "Ana owns the budget.")):
        (notes / name).write_text(text + "\n")
    out = tmp_path / "i"
    assert main(["-q", "index", str(notes), "--out", str(out), "--encoder", "single", "--backbone", str(tiny_dir), "--device", "cpu"]) == 0
    script = (
        "import sys\nfrom propdex.cli import main\n"
        f"codes = [main(['-q', 'add', {str(out)!r}, {str(notes)!r}, '--update']), main(['-q', 'delete', {str(out)!r}, 'nope']),"
        f" main(['-q', 'info', {str(out)!r}]), main(['-q', 'verify', {str(out)!r}])]\n"
        "print(codes, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[0, 1, 0, 0] False"

    writer = IndexWriter.open(out, device="cpu")
    assert writer.sync([notes])["unchanged"] == 2 and not writer.encoder.loaded
    (notes / "b.md").write_text("Ana and Tom own the budget.\n")
    writer = IndexWriter.open(out, device="cpu")
    assert writer.sync([notes])["replaced"] == 1 and writer.encoder.loaded
    # Other weights than the index's are refused when they load, and nothing is committed.
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["backbone"]["weights_sha256"] = "0" * 64
    (out / "manifest.json").write_text(json.dumps(manifest))
    (notes / "a.md").write_text("The launch moved to July.\n")
    with pytest.raises(ValueError, match="other weights"):
        IndexWriter.open(out, device="cpu").sync([notes])
    assert json.loads((out / "manifest.json").read_text())["generation"] == manifest["generation"]


def test_cli_add_delete_compact_and_filtered_json_search(tmp_path, tiny_dir, capsys):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    docs = [{"id": d.id, "title": d.title, "text": d.text, "year": 2000 + i % 2} for i, d in enumerate(_docs(12))]
    first.write_text("".join(json.dumps(d) + "\n" for d in docs[:8]))
    second.write_text("".join(json.dumps(d) + "\n" for d in docs[8:] + [dict(docs[0], text="Replaced text about vitamin D.")]))
    out = tmp_path / "i"
    assert main(["-q", "index", str(first), "--out", str(out), "--encoder", "single", "--backbone", str(tiny_dir), "--device", "cpu"]) == 0
    assert main(["-q", "add", str(out), str(second), "--device", "cpu"]) == 2  # docs[0] is there already
    assert "update" in capsys.readouterr().err
    assert main(["-q", "add", str(out), str(second), "--update", "--device", "cpu"]) == 0
    assert "added 5 documents" in capsys.readouterr().out
    assert main(["-q", "delete", str(out), docs[1]["id"], "nope"]) == 1
    assert "deleted 1 documents" in capsys.readouterr().out and json.loads(Path(out, "manifest.json").read_text())["counts"]["deleted"] == 2
    assert main(["-q", "compact", str(out)]) == 0
    capsys.readouterr()
    assert main(["-q", "search", str(out), "vitamin D", "-k", "20", "--json", "--where", "year=2000"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert len(results) == 6 and all(r["metadata"] == {"year": 2000} for r in results)
    assert docs[1]["id"] not in [r["doc_id"] for r in results]
    assert next(r for r in results if r["doc_id"] == docs[0]["id"])["text"] == "Replaced text about vitamin D."
    with pytest.raises(SystemExit):
        main(["-q", "search", str(out), "q", "--where", "year"])


def test_one_namespace_nothing_else_at_the_top(tmp_path):
    """The installed layers are propdex.*; the bare folder names are not importable."""
    code = ("import importlib.util, propdex, propdex.encoders, propdex.indexer, propdex.retriever, propdex.eval, propdex.cli;"
            "print([n for n in ('encoders', 'indexer', 'retriever', 'eval') if importlib.util.find_spec(n)])")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "[]", run.stderr
    assert subprocess.run([sys.executable, "-m", "propdex", "--help"], cwd=tmp_path, capture_output=True).returncode == 0
    assert (Path(propdex.__file__).parent / "py.typed").is_file()


@pytest.mark.slow
def test_the_front_door_on_real_minilm(tmp_path, minilm, hotpot_questions):
    from propdex.indexer.readers import read_corpus as read

    hotpot = DATA / "hotpotqa" / "hotpot_dev_distractor_600.json"
    question = hotpot_questions[0]
    titles = {t for q in hotpot_questions[:10] for t, _ in q["context"]}
    docs = [{"id": d.id, "title": d.title, "text": d.text, "question": i // 10}
            for i, d in enumerate(d for d in read([hotpot]) if getattr(d, "id", None) in titles)]
    index = propdex.Index.create(tmp_path / "i", load_encoder("tokens", backbone=minilm))
    assert index.add(docs)["added"] == len(docs)
    gold = {t for t, _ in question["supporting_facts"]}
    hits = index.search(question["question"], k=5)
    assert gold & {h.doc_id for h in hits}
    assert hits[0].text == next(d["text"] for d in docs if d["id"] == hits[0].doc_id)
    some = next(d for d in docs if d["id"] in gold)["question"]
    assert all(h.metadata["question"] == some for h in index.search(question["question"], k=5, where={"question": some}))
    index.delete(list(gold))
    assert not gold & {h.doc_id for h in index.search(question["question"], k=20)}
    index.close()


# -- typed settings: one grammar, parsed once ---------------------------------------------
def test_encoder_spec_types_and_checks_options_for_every_spelling(tiny):
    from propdex.encoders.spec import EncoderSpec

    spec = EncoderSpec.parse("proposition:dims=64:query_segments=0:title=no")
    assert dict(spec.options) == {"dims": 64, "query_segments": False, "title": False}
    assert str(spec) == "proposition:dims=64:query_segments=0:title=0"
    assert EncoderSpec.parse(str(spec)) == spec
    assert dict(EncoderSpec("nugget", {"ratio": "0.5", "window": "none"}).options) == {"ratio": 0.5, "window": None}
    assert dict(EncoderSpec("tokens", {"pool": "2", "ratio": "idf"}).options) == {"pool": 2, "ratio": "idf"}
    for bad, message in [("tokens:frobnicate=1", "no option 'frobnicate'.*drop_punct"), ("proposition:dims=sixty", "dims: expected an integer"),
                         ("proposition:standalone=maybe", "yes/no"), ("nope", "unknown encoder"), ("tokens:drop_punct", "option=value"),
                         (":dims=1", "names no encoder")]:
        with pytest.raises(ValueError, match=message):
            EncoderSpec.parse(bad)
    # The Python keywords and a spec string give the same encoder.
    a = load_encoder("tokens:drop_punct=0", backbone=tiny)
    b = load_encoder("tokens", backbone=tiny, drop_punct="false")
    assert a.config() == b.config() and a.config()["drop_punct"] is False


def test_index_cli_reads_the_same_spec_and_the_earlier_flags(tmp_path, tiny_dir, capsys):
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in _docs(3)))
    base = ["-q", "index", str(jsonl), "--backbone", str(tiny_dir), "--device", "cpu", "--no-bm25"]
    assert main([*base, "--out", str(tmp_path / "a"), "--encoder", "tokens:drop_punct=0"]) == 0
    assert main([*base, "--out", str(tmp_path / "b"), "--encoder", "tokens", "--keep-punct"]) == 0
    encoders = [json.loads((tmp_path / d / "manifest.json").read_text())["encoder"] for d in "ab"]
    assert encoders[0] == encoders[1] and encoders[0]["drop_punct"] is False
    with pytest.raises(SystemExit):
        main([*base, "--out", str(tmp_path / "c"), "--encoder", "tokens:frobnicate=1"])
    assert "no option 'frobnicate'" in capsys.readouterr().err


def test_search_settings_are_checked_once_and_never_stick(tmp_path, encoder):
    from propdex.retriever import SearchSettings

    assert SearchSettings.of(k="5", hybrid="1", nprobe="8", where={"a": [1, "x"]}) == SearchSettings(
        k=5, hybrid=True, nprobe=8, where={"a": (1, "x")})
    for options, message in [({"k": 0}, "k must be"), ({"level": "page"}, "unknown level"), ({"hops": 3}, "hops"),
                             ({"hybrid": True, "bm25": True}, "not both"), ({"bm25": True, "level": "unit"}, "BM25 alone"),
                             ({"nprobe": "many"}, "nprobe: expected"), ({"topk": 3}, "unknown search option 'topk'")]:
        with pytest.raises(ValueError, match=message):
            SearchSettings.of(**options)
    IndexWriter(tmp_path / "i", encoder, factory="IVF4,Flat").build(_docs(40))
    with Searcher.load(tmp_path / "i", encoder=encoder, nprobe=1) as s:
        default = [(h.doc_id, h.score) for h in s.search(QUERIES[0], k=5)]
        wide = [(h.doc_id, h.score) for h in s.search(QUERIES[0], k=5, nprobe=4)]
        assert s.nprobe == 1 and [(h.doc_id, h.score) for h in s.search(QUERIES[0], k=5)] == default
        with pytest.raises(ValueError, match="unknown search option"):
            s.search(QUERIES[0], probes=3)
    assert len(wide) == 5


@pytest.mark.slow
def test_a_sigkilled_add_leaves_the_last_commit_and_runs_again(tmp_path, tiny_dir):
    import signal
    import time

    hotpot = DATA / "hotpotqa" / "hotpot_dev_distractor_600.json"
    docs = [d for _, d in zip(range(450), read_corpus([hotpot]))]
    first, more = tmp_path / "first.jsonl", tmp_path / "more.jsonl"
    first.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in docs[:50]))
    more.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in docs[50:]))
    for out in ("killed", "whole"):
        assert main(["-q", "index", str(first), "--out", str(tmp_path / out), "--backbone", str(tiny_dir), "--device", "cpu",
                     "--shard-docs", "25"]) == 0
    manifest = (tmp_path / "killed" / "manifest.json").read_text()
    enc = load_encoder("tokens", backbone=str(tiny_dir), device="cpu")
    with Searcher.load(tmp_path / "killed", encoder=enc) as s:
        before = [(h.doc_id, h.score) for h in s.search(QUERIES[0], k=5)]

    victim = subprocess.Popen([sys.executable, "-m", "propdex", "-q", "add", str(tmp_path / "killed"), str(more), "--device", "cpu"],
                              stderr=subprocess.DEVNULL)
    listed = {s["name"] for s in json.loads(manifest)["shards"]}
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.name not in listed for p in (tmp_path / "killed").glob("shard-*[0-9]")):
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    assert any(p.name not in listed for p in (tmp_path / "killed").glob("shard-*"))  # killed halfway through
    assert (tmp_path / "killed" / "manifest.json").read_text() == manifest
    with Searcher.load(tmp_path / "killed", encoder=enc) as s:
        assert [(h.doc_id, h.score) for h in s.search(QUERIES[0], k=5)] == before

    for out in ("killed", "whole"):
        assert main(["-q", "add", str(tmp_path / out), str(more), "--device", "cpu"]) == 0
    with Searcher.load(tmp_path / "killed", encoder=enc) as a, Searcher.load(tmp_path / "whole", encoder=enc) as b:
        for q in QUERIES:
            assert [(h.doc_id, h.score) for h in a.search(q, k=10)] == [(h.doc_id, h.score) for h in b.search(q, k=10)]
        assert len(a.manifest["shards"]) == len(b.manifest["shards"]) == 18


# -- beyond one machine: parts, merge, Ray ------------------------------------------------
def _hotpot_jsonl(path: Path, n: int) -> Path:
    docs = [d for _, d in zip(range(n), read_corpus([DATA / "hotpotqa" / "hotpot_dev_distractor_600.json"]))]
    path.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in docs))
    return path


def _same_index(a: Path, b: Path, encoder) -> None:
    """Same documents, vectors and BM25: the same exact scores. Parts lay
    documents out in other shards than one build does, and stage 1's
    per-shard hits (so which documents a default search re-scores) follow
    the layout; every vector hit and every document re-scored does not."""
    exact = {"candidates": 100_000, "rerank": 1_000}
    with Searcher.load(a, encoder=encoder) as x, Searcher.load(b, encoder=encoder) as y:
        assert x.manifest["counts"] == y.manifest["counts"]
        for q in QUERIES + ["American film director", "a river in Europe"]:
            for options in (exact, {"bm25": True}, {"level": "sentence", **exact}):
                assert [(h.doc_id, h.sentence_index, round(h.score, 5)) for h in x.search(q, k=10, **options)] == \
                       [(h.doc_id, h.sentence_index, round(h.score, 5)) for h in y.search(q, k=10, **options)]


def test_parts_merged_equal_one_build(tmp_path, tiny_dir):
    corpus = _hotpot_jsonl(tmp_path / "c.jsonl", 90)
    common = ["-q", "index", str(corpus), "--backbone", str(tiny_dir), "--device", "cpu", "--shard-docs", "20"]
    assert main([*common, "--out", str(tmp_path / "whole")]) == 0
    for i in range(3):
        assert main([*common, "--out", str(tmp_path / f"p{i}"), "--num-shards", "3", "--shard-id", str(i)]) == 0
    parts = [str(tmp_path / f"p{i}") for i in (2, 0, 1)]  # any order
    assert main(["-q", "merge", str(tmp_path / "merged"), *parts[:2]]) == 2  # part 1 missing
    assert main(["-q", "merge", str(tmp_path / "merged"), *parts]) == 0
    assert main(["-q", "merge", str(tmp_path / "merged"), *parts]) == 0  # again: nothing to do
    assert main(["verify", str(tmp_path / "merged")]) == 0
    _same_index(tmp_path / "merged", tmp_path / "whole", load_encoder("tokens", backbone=str(tiny_dir), device="cpu"))
    # The parts are left whole, and the merged index stands without them.
    for p in parts:
        assert json.loads(Path(p, "manifest.json").read_text())["status"] == "encoded"
        shutil.rmtree(p)
    assert main(["verify", str(tmp_path / "merged")]) == 0


def test_merge_refuses_parts_that_do_not_make_one_index(tmp_path, tiny_dir, capsys):
    corpus = _hotpot_jsonl(tmp_path / "c.jsonl", 20)
    common = ["-q", "index", str(corpus), "--backbone", str(tiny_dir), "--device", "cpu"]
    for i in range(2):
        assert main([*common, "--out", str(tmp_path / f"p{i}"), "--num-shards", "2", "--shard-id", str(i)]) == 0
    assert main([*common, "--out", str(tmp_path / "q1"), "--num-shards", "2", "--shard-id", "1", "--no-bm25"]) == 0
    assert main([*common, "--out", str(tmp_path / "whole")]) == 0
    assert main([*common, "--out", str(tmp_path / "bad"), "--num-shards", "2", "--shard-id", "2"]) == 2
    assert main([*common, "--out", str(tmp_path / "bad"), "--num-shards", "2"]) == 2
    capsys.readouterr()
    for parts, message in [(["p0", "q1"], "other settings"), (["p0", "p0"], "each of 0..1 once"),
                           (["p0", "whole"], "not a part")]:
        assert main(["-q", "merge", str(tmp_path / "m"), *[str(tmp_path / p) for p in parts]]) == 2
        assert message in capsys.readouterr().err
    # A part is not an index to search or extend.
    assert main([*common, "--out", str(tmp_path / "p0")]) == 2


@pytest.mark.slow
def test_a_ray_build_equals_a_single_process_build(tmp_path, tiny_dir):
    corpus = _hotpot_jsonl(tmp_path / "c.jsonl", 90)
    common = ["-q", "index", str(corpus), "--backbone", str(tiny_dir), "--device", "cpu", "--shard-docs", "20"]
    assert main([*common, "--out", str(tmp_path / "whole")]) == 0
    run = subprocess.run([sys.executable, "-m", "propdex", *common, "--out", str(tmp_path / "ray"), "--ray", "--ray-parts", "2"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "indexed 90 documents" in run.stdout and not (tmp_path / "ray.parts").exists()
    _same_index(tmp_path / "ray", tmp_path / "whole", load_encoder("tokens", backbone=str(tiny_dir), device="cpu"))


def test_threads_are_set_for_the_process_when_asked(tmp_path, encoder):
    import faiss
    import torch

    IndexWriter(tmp_path / "i", encoder).build(_docs(5))
    before = (faiss.omp_get_max_threads(), torch.get_num_threads())
    try:
        with Searcher.load(tmp_path / "i", encoder=encoder, threads=1) as s:
            assert (faiss.omp_get_max_threads(), torch.get_num_threads()) == (1, 1) and s.search(QUERIES[0], k=2)
        with pytest.raises(ValueError, match="threads must be at least 1"):
            Searcher.load(tmp_path / "i", encoder=encoder, threads=0)
    finally:
        set_threads(before[0])
        torch.set_num_threads(before[1])


def test_threads_hold_in_the_shard_pool_and_in_other_threads_that_search(tmp_path, encoder, monkeypatch):
    """OpenMP keeps its thread count per thread: the setting must reach the
    searcher's shard pool and a server's request threads, which never made
    it themselves (before, both searched with every core)."""
    import faiss

    from propdex.indexer import ann

    searched: list[tuple[int, int]] = []  # (thread, FAISS threads) of each stage-1 search, as it ran
    real_search = ann.search

    def recorded(*args, **kwargs):
        out = real_search(*args, **kwargs)
        searched.append((threading.get_ident(), faiss.omp_get_max_threads()))
        return out

    monkeypatch.setattr(ann, "search", recorded)
    IndexWriter(tmp_path / "i", encoder, shard_docs=3).build(_docs(7))
    before = faiss.omp_get_max_threads()
    try:
        with Searcher.load(tmp_path / "i", encoder=encoder, threads=1) as s:
            assert len(s.shards) == 3
            seen: list[int] = []

            def request() -> None:
                assert s.search(QUERIES[0], k=2)
                seen.append(faiss.omp_get_max_threads())  # this thread decoded stage 2's codes

            t = threading.Thread(target=request)
            t.start()
            t.join()
            assert seen == [1]
            assert len(searched) == 3 and {n for _, n in searched} == {1}
            assert threading.get_ident() not in {ident for ident, _ in searched}  # the shard pool's threads searched
    finally:
        set_threads(before)


def test_a_one_vector_query_probes_more_lists_than_each_vector_of_many(tmp_path, tiny, monkeypatch):
    """Unless asked, a one-vector query probes at least 128 IVF lists (it must find
    every candidate with that one vector), each vector of a multi-vector
    query 1/256 of the lists, at least 4; an explicit nprobe, on the
    searcher or the call, wins."""
    from propdex.encoders import load_encoder
    from propdex.indexer import ann

    probed = []
    search = ann.search
    monkeypatch.setattr(ann, "search", lambda index, q, k, nprobe, allowed=None: probed.append(nprobe) or search(index, q, k, nprobe, allowed))
    assign = ann.assign  # shards that share a codec: the lists are chosen once for all of them
    monkeypatch.setattr(ann, "assign", lambda codec, q, nprobe: probed.append(nprobe) or assign(codec, q, nprobe))
    for name, expected in (("single", 128), ("tokens", 4)):
        encoder = load_encoder(name, backbone=tiny)
        IndexWriter(tmp_path / name, encoder, factory="IVF4,Flat").build(_docs(40))
        with Searcher.load(tmp_path / name, encoder=encoder) as s:
            probed.clear()
            assert s.search(QUERIES[0], k=5) and set(probed) == {expected}
            probed.clear()
            s.search(QUERIES[0], k=5, nprobe=3)
            assert set(probed) == {3}
        with Searcher.load(tmp_path / name, encoder=encoder, nprobe=2) as s:
            probed.clear()
            s.search(QUERIES[0], k=5)
            assert set(probed) == {2}


def test_an_index_that_outgrew_flat_is_retrained_at_compact(tmp_path, encoder, monkeypatch):
    from propdex.indexer import factory, living
    from propdex.indexer.manifest import Manifest, read_manifest

    monkeypatch.setattr(factory, "FLAT_BELOW", 2_000)  # a test-sized threshold for the default factory
    docs = _docs(50)
    index = propdex.Index.create(tmp_path / "grown", encoder, store="float16")
    index.add(docs[:4])  # the first add trains: Flat, for a handful of vectors
    assert index.manifest["index"]["factory"] == "Flat"
    index.add(docs[4:])
    assert index.manifest["index"]["factory"] == "Flat" and living.outgrown(Manifest.from_json(read_manifest(tmp_path / "grown")), encoder.dim)
    before = {q: [h.doc_id for h in index.search(q, k=5)] for q in QUERIES}
    result = index.compact()
    manifest = index.manifest
    assert result["retrained"]["from"] == "Flat" and manifest["index"]["factory"].startswith("IVF")
    assert manifest["index"]["retrained"]["from"] == "Flat" and manifest["index"]["trained"] != "trained.faiss"
    assert not (tmp_path / "grown" / "trained.faiss").exists() and len(index) == 50
    IndexWriter(tmp_path / "bulk", encoder, store="float16").build(docs)
    assert read_manifest(tmp_path / "bulk")["index"]["factory"] == manifest["index"]["factory"]  # what a bulk build chooses
    for q in QUERIES:  # stage 2 re-scores from the float16 copy: the best hits stay
        after = [h.doc_id for h in index.search(q, k=5)]
        assert after[0] == before[q][0] and len(set(after) & set(before[q])) >= 4
    assert main(["verify", str(tmp_path / "grown")]) == 0
    assert index.compact()["rewritten"] == 0  # fits now: nothing to re-train
    for shard in manifest["shards"]:  # each shard was filled through the new codec, not the Flat one it replaced
        assert faiss.extract_index_ivf(ann.read_faiss(tmp_path / "grown" / shard["name"] / shard["index"])).nlist > 1
    extra = replace(_docs(51)[50], id="after-retrain")
    assert index.add([extra])["added"] == 1 and "after-retrain" in index
    assert index.search(extra.title + " " + extra.text, k=1, bm25=True)[0].doc_id == "after-retrain"
    assert main(["verify", str(tmp_path / "grown")]) == 0
    index.close()
