"""A damaged index is detected: at load (cheap) and by `propdex verify` (every byte)."""
import json

import pytest

from propdex.encoders import load_encoder
from propdex.cli import main
from propdex.indexer import integrity
from propdex.indexer.build import IndexWriter
from propdex.indexer.manifest import read_manifest
from propdex.retriever import Searcher


@pytest.fixture
def index(tmp_path, tiny, hotpot_docs):
    enc = load_encoder("tokens", backbone=tiny)
    IndexWriter(tmp_path / "ix", enc, shard_docs=10).build(hotpot_docs[:20])
    return tmp_path / "ix", enc


def _edit_manifest(path, edit):
    m = json.loads((path / "manifest.json").read_text())
    edit(m)
    (path / "manifest.json").write_text(json.dumps(m))


def test_an_intact_index_verifies(index, capsys):
    path, enc = index
    files = integrity.committed_files(read_manifest(path))
    # Two shards (LMDB + FAISS each), the trained index, the BM25 files.
    assert sum(f.path.endswith("data.mdb") for f in files) == 2 and all(f.sha256 for f in files)
    assert integrity.check(path, read_manifest(path), full=True) == []
    assert main(["verify", str(path)]) == 0
    assert "ok:" in capsys.readouterr().out


def test_a_flipped_byte_is_found_by_verify_not_by_load(index, capsys):
    path, enc = index
    data = path / "shard-00000" / "meta.lmdb" / "data.mdb"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    Searcher.load(path, encoder=enc).close()  # same size: the cheap check passes
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "damaged: shard-00000/meta.lmdb/data.mdb: content differs" in out and "1 of" in out


@pytest.mark.parametrize("damage", ["truncate", "delete_index", "delete_shard"])
def test_missing_or_truncated_files_stop_the_load_with_one_line(index, capsys, damage):
    path, enc = index
    if damage == "truncate":  # read through mmap, a short LMDB file is a SIGBUS, not an error
        data = path / "shard-00001" / "meta.lmdb" / "data.mdb"
        data.write_bytes(data.read_bytes()[:4096])
        expected = "shard-00001/meta.lmdb/data.mdb: 4096 bytes, committed with"
    elif damage == "delete_index":
        (path / "shard-00000" / "index.faiss").unlink()
        expected = "shard-00000/index.faiss: missing"
    else:
        import shutil

        shutil.rmtree(path / "shard-00001")
        expected = "shard-00001/meta.lmdb/data.mdb: missing"
    with pytest.raises(ValueError, match="is damaged: " + expected.split(":")[0]) as e:
        Searcher.load(path, encoder=enc)
    assert expected in str(e.value) and "propdex verify" in str(e.value)
    assert main(["info", str(path)]) == 0
    assert any(expected in p for p in json.loads(capsys.readouterr().out)["problems"])
    assert main(["search", str(path), "a query", "--device", "cpu"]) == 2
    assert "is damaged" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../outside", "/etc", "a/../../b", ".."])
def test_a_manifest_cannot_point_outside_its_directory(index, name):
    path, enc = index
    _edit_manifest(path, lambda m: m["shards"][0].update(name=name))
    with pytest.raises(ValueError, match="outside the index directory"):
        Searcher.load(path, encoder=enc)
    assert not integrity.inside(name) and integrity.inside("shard-00000/index.faiss")


def test_a_rerun_on_changed_inputs_says_which_file_changed(tmp_path, tiny_dir, hotpot_docs, capsys):
    corpus = tmp_path / "in"
    corpus.mkdir()
    lines = [json.dumps({"id": d.id, "title": d.title, "text": d.text}) for d in hotpot_docs[:8]]
    (corpus / "a.jsonl").write_text("\n".join(lines[:4]) + "\n")
    (corpus / "b.jsonl").write_text("\n".join(lines[4:6]) + "\n")
    args = ["-q", "index", str(corpus), "--out", str(tmp_path / "ix"), "--backbone", str(tiny_dir), "--device", "cpu"]
    assert main(args) == 0
    files = read_manifest(tmp_path / "ix")["inputs"]["files"]
    assert sorted(p.rsplit("/", 1)[1] for p in files) == ["a.jsonl", "b.jsonl"] and all(len(f["sha256"]) == 64 for f in files.values())
    assert main(args) == 0  # unchanged: a no-op
    capsys.readouterr()

    # A document appended to a complete index's input is not silently ignored.
    with open(corpus / "a.jsonl", "a") as f:
        f.write(lines[6] + "\n")
    (corpus / "c.jsonl").write_text(lines[7] + "\n")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "inputs changed" in err and "a.jsonl changed" in err and "c.jsonl is new" in err
    assert read_manifest(tmp_path / "ix")["counts"]["documents"] == 6  # the index is untouched
    # The command the error offers brings the index up to date: the two new documents in, nothing else encoded.
    offered = err.split("`")[1].split()
    assert offered[:2] == ["propdex", "add"] and "--delete-missing" in offered
    assert main(["-q", *offered[1:], "--device", "cpu"]) == 0
    assert "added 2 documents" in capsys.readouterr().out
    assert read_manifest(tmp_path / "ix")["counts"]["documents"] == 8


def test_one_writer_at_a_time(tmp_path, tiny, hotpot_docs):
    enc = load_encoder("tokens", backbone=tiny)
    first = IndexWriter(tmp_path / "ix", enc, shard_docs=5)
    with pytest.raises(ValueError, match=r"being written by another process \(pid \d+\)"):
        IndexWriter(tmp_path / "ix", enc, shard_docs=5)
    first.build(hotpot_docs[:10])  # the refused writer deleted nothing of the first's
    assert read_manifest(tmp_path / "ix")["status"] == "complete"
    # The lock goes with the build: the next writer resumes (nothing to do) without a word.
    IndexWriter(tmp_path / "ix", enc, shard_docs=5).build(hotpot_docs[:10])
    # A writer refused for its settings leaves the lock free.
    with pytest.raises(ValueError, match="other settings"):
        IndexWriter(tmp_path / "ix", enc, shard_docs=7)
    IndexWriter(tmp_path / "ix", enc, shard_docs=5).close()


def test_a_format_that_reads_nothing_indexes_nothing(tmp_path, tiny_dir, hotpot_docs, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in hotpot_docs[:5]))
    args = ["-q", "index", str(corpus), "--out", str(tmp_path / "ix"), "--backbone", str(tiny_dir), "--device", "cpu"]
    assert main([*args, "--format", "mediawiki"]) == 2
    err = capsys.readouterr().err
    assert "no document could be read" in err and "--format" in err
    assert not (tmp_path / "ix" / "manifest.json").exists()
    assert main(args) == 0  # the right format then builds in the same directory
    assert read_manifest(tmp_path / "ix")["counts"]["documents"] == 5


def test_a_factory_that_cannot_train_keeps_the_encoding_and_another_can_finish(tmp_path, tiny_dir, hotpot_docs, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in hotpot_docs[:3]))
    args = ["-q", "index", str(corpus), "--out", str(tmp_path / "ix"), "--backbone", str(tiny_dir), "--device", "cpu"]
    assert main([*args, "--factory", "IVF16,PQ8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot be trained on" in err and "re-run with another --factory" in err and "Traceback" not in err
    encoded = read_manifest(tmp_path / "ix")
    assert encoded["status"] == "training" and encoded["counts"]["documents"] == 3
    assert main([*args, "--factory", "Flat"]) == 0
    done = read_manifest(tmp_path / "ix")
    assert done["status"] == "complete" and done["index"]["factory"] == "Flat"
    assert [s["lmdb_sha256"] for s in done["shards"]] == [s["lmdb_sha256"] for s in encoded["shards"]]  # not re-encoded


def test_encoded_shards_waiting_for_training_take_another_store(tmp_path, tiny_dir, hotpot_docs, capsys):
    """Hours of encoding are not lost to a codec choice: before training, a
    re-run may name another store, and the same shards train it."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in hotpot_docs[:3]))
    args = ["-q", "index", str(corpus), "--out", str(tmp_path / "ix"), "--backbone", str(tiny_dir), "--device", "cpu"]
    assert main([*args, "--factory", "IVF16,PQ8"]) == 2
    assert "(or --store)" in capsys.readouterr().err
    encoded = read_manifest(tmp_path / "ix")
    assert main([*args, "--store", "binary", "--bits", "16"]) == 0
    done = read_manifest(tmp_path / "ix")
    assert done["settings"]["store"] == "binary" and done["settings"]["bits"] == 16 and done["settings"]["factory"] is None
    assert done["index"]["metric"] == "hamming" and done["index"]["hashing"]["method"] == "pca"
    assert [s["lmdb_sha256"] for s in done["shards"]] == [s["lmdb_sha256"] for s in encoded["shards"]]  # not re-encoded
    assert all(s["stored"] is None for s in done["shards"])  # the binary store keeps no float copy
    searcher = Searcher.load(tmp_path / "ix", device="cpu")
    assert searcher.search(hotpot_docs[2].text, k=1)[0].doc_id == hotpot_docs[2].id
    searcher.close()
    # Once trained, the codec is what the index is: another store is refused.
    assert main([*args, "--store", "codes"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_settings_an_index_never_reads_do_not_refuse_a_re_run(tmp_path, tiny_dir, hotpot_docs, capsys):
    """An index built when --hashing defaulted to another map resumes under
    today's default where its store never reads the map; where it does, the
    map is what the codes are, and another one is refused."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in hotpot_docs[:3]))
    for store in ("codes", "binary"):
        out = tmp_path / store
        args = ["-q", "index", str(corpus), "--out", str(out), "--backbone", str(tiny_dir), "--device", "cpu", "--store", store]
        assert main(args) == 0
        _edit_manifest(out, lambda m: m["settings"].update(hashing="learned", bits=128 if store == "codes" else 256,
                                                           code_bytes=60 if store == "binary" else 100))
        if store == "codes":
            before = (out / "manifest.json").read_bytes()
            assert main(args) == 0  # the map and bits of a codes index were never read
            assert (out / "manifest.json").read_bytes() == before  # and a complete index is left as it was
        else:
            assert main(args) == 2 and "other settings" in capsys.readouterr().err


def test_a_duplicate_id_names_the_file_and_record_it_came_from(tmp_path, tiny, caplog):
    from propdex.indexer.readers import read_corpus

    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "same", "text": "The first one."}) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({"id": "other", "text": "Another."}) + "\n" + json.dumps({"id": "same", "text": "The second one."}) + "\n")
    enc = load_encoder("tokens", backbone=tiny)
    manifest = IndexWriter(tmp_path / "ix", enc).build(read_corpus([tmp_path / "a.jsonl", tmp_path / "b.jsonl"]))
    assert manifest["skipped"] == {"duplicate_id": 1}
    assert manifest["shards"][0]["skipped_examples"]["duplicate_id"] == [f"{tmp_path / 'b.jsonl'}:2"]
    assert f"skipped {tmp_path / 'b.jsonl'}:2 (duplicate_id): id 'same' was taken by an earlier document" in caplog.text


def test_a_full_disk_is_one_line_and_the_build_resumes(tmp_path, tiny_dir, hotpot_docs, capsys, monkeypatch):
    import errno

    from propdex.indexer import commit as commit_module

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in hotpot_docs[:6]))
    args = ["-q", "index", str(corpus), "--out", str(tmp_path / "ix"), "--backbone", str(tiny_dir), "--device", "cpu", "--shard-docs", "3"]
    real, calls = commit_module.ShardWriter, []

    class SecondShardFillsTheDisk(real):
        def add(self, docs, encoded):
            calls.append(self.path)
            if len(calls) == 2:
                raise OSError(errno.ENOSPC, "No space left on device", str(self.path / "meta.lmdb"))
            super().add(docs, encoded)

    monkeypatch.setattr(commit_module, "ShardWriter", SecondShardFillsTheDisk)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "propdex: error: no space left on the device writing " in err and "resumes" in err and "Traceback" not in err
    assert len(read_manifest(tmp_path / "ix")["shards"]) == 1
    monkeypatch.setattr(commit_module, "ShardWriter", real)
    assert main(args) == 0
    assert read_manifest(tmp_path / "ix")["counts"]["documents"] == 6


def test_counts_that_disagree_with_the_manifest_stop_the_load(index):
    path, enc = index
    _edit_manifest(path, lambda m: m["shards"][1].update(vectors=m["shards"][1]["vectors"] + 1))
    with pytest.raises(ValueError, match=r"is damaged: shard-00001 holds 10 documents, \d+ stored and \d+ indexed vectors"):
        Searcher.load(path, encoder=enc)
