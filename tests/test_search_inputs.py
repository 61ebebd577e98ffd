"""Bad input at search time: a one-line error or a warning, never a traceback
or a silent answer; per-call options are thread-safe."""
import json
import logging
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from propdex.encoders import load_encoder
from propdex.cli import main
from propdex.indexer.build import IndexWriter
from propdex.retriever import Searcher
from propdex.retriever.cli import highlight, printable


@pytest.fixture(scope="module")
def pq_index(tmp_path_factory, tiny, hotpot_docs):
    path = tmp_path_factory.mktemp("search") / "ix"
    enc = load_encoder("tokens", backbone=tiny)
    IndexWriter(path, enc, shard_docs=100, factory="IVF16,PQ8").build(hotpot_docs)
    return path, enc


@pytest.mark.parametrize("flag,value", [("--candidates", "-3"), ("--rerank", "-18"), ("--nprobe", "0"), ("--nprobe", "-1")])
def test_out_of_range_options_are_one_line_errors(pq_index, capsys, flag, value):
    path, _ = pq_index
    assert main(["search", str(path), "a band from London", flag, value, "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{flag[2:]} must be at least 1, got {value}" in err and "Traceback" not in err


def test_concurrent_searches_with_different_nprobe_agree_with_sequential_ones(pq_index):
    path, enc = pq_index
    queries = ["a band from London", "an American film director", "a river in Europe", "a novel about war"]
    jobs = [(q, nprobe) for q in queries for nprobe in (1, 4, 16)] * 3
    with Searcher.load(path, encoder=enc) as s:
        alone = {job: [(h.doc_id, h.score) for h in s.search(job[0], k=5, candidates=2, rerank=5, nprobe=job[1])] for job in set(jobs)}
        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda job: [(h.doc_id, h.score) for h in s.search(job[0], k=5, candidates=2, rerank=5, nprobe=job[1])], jobs))
    assert together == [alone[job] for job in jobs]
    assert len({tuple(alone[(queries[0], n)]) for n in (1, 4, 16)}) > 1  # nprobe matters on this index


def test_a_query_the_vocabulary_cannot_spell_is_warned_about(pq_index, caplog):
    path, enc = pq_index
    with Searcher.load(path, encoder=enc) as s, caplog.at_level(logging.WARNING):
        s.search("a band from London", k=3)
        assert not caplog.records
        s.search("🤖🦜", k=3)
    assert "unknown to the backbone's vocabulary" in caplog.text


def test_a_query_longer_than_the_encoder_reads_is_warned_about_once_a_batch(pq_index, caplog):
    path, enc = pq_index
    tokenizer = enc.backbone.tokenizer
    fits = " ".join(["band"] * enc.query_length)
    assert len(tokenizer(fits, add_special_tokens=False)["input_ids"]) == enc.query_length
    # What the encoder reads of a query is exactly query_length pieces: one more changes nothing.
    full, longer = (enc.encode_queries([q])[0].vectors for q in (fits, fits + " band"))
    assert full.shape == longer.shape and (full == longer).all()
    with Searcher.load(path, encoder=enc) as s, caplog.at_level(logging.WARNING):
        s.search(fits, k=3)
        assert not caplog.records
        s.search(fits + " band band", k=3)
        assert f"longer than the {enc.query_length} word pieces the encoder reads (up to {enc.query_length + 2})" in caplog.text
        caplog.clear()
        s.search_batch([fits + " band", "a band", fits + " band band band"], k=3)
    (record,) = caplog.records
    assert "2 of 3 queries are longer" in record.getMessage()


def test_control_characters_are_shown_not_obeyed(tmp_path, tiny_dir, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "x", "title": "Evil\x1b[2J title", "text": "A bell rings here.\x07 Red text \x1b[31m follows."}) + "\n")
    assert main(["-q", "index", str(corpus), "--out", str(tmp_path / "ix"), "--backbone", str(tiny_dir), "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["search", str(tmp_path / "ix"), "bell rings", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "Evil\\x1b[2J title" in out
    assert printable("tab\tand é 中") == "tab\\tand é 中"


def test_a_query_that_is_not_utf8_is_refused(pq_index):
    path, _ = pq_index
    run = subprocess.run([sys.executable, "-m", "propdex", "search", str(path), b"caf\xe9".decode("utf-8", "surrogateescape"), "--device", "cpu"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "not valid UTF-8" in run.stderr and "Traceback" not in run.stderr


def test_without_faiss_training_runs_and_indexing_says_what_to_install(tmp_path):
    """A GPU box that only trains needs no FAISS; a build there fails before
    it encodes anything, with the install hint, and leaves nothing behind."""
    no_faiss = "import sys; sys.modules['faiss'] = None; from propdex.cli import main; sys.exit(main(sys.argv[1:]))"
    help_ = subprocess.run([sys.executable, "-c", no_faiss, "train", "proposition", "--help"], capture_output=True, text=True)
    assert help_.returncode == 0 and "--device" in help_.stdout
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text(json.dumps({"_id": "a", "title": "A", "text": "Some words about a thing."}) + "\n")
    build = subprocess.run([sys.executable, "-c", no_faiss, "index", str(corpus), "--out", str(tmp_path / "ix"), "--device", "cpu"],
                           capture_output=True, text=True)
    assert build.returncode == 2 and "pip install faiss-cpu" in build.stderr and "Traceback" not in build.stderr
    assert not (tmp_path / "ix").exists()


def test_highlight_marks_a_words_pieces_as_one_word_and_no_text_twice():
    text = "codec training by size"
    assert highlight(text, [(4, 5), (0, 4), (6, 14)]) == "[codec] [training] by size"
    assert highlight(text, [(0, 8), (6, 14), (18, 22)]) == "[codec training] by [size]"
    assert highlight(text, [(0, 14), (6, 10)]) == "[codec training] by size"
    assert highlight(text, []) == text
