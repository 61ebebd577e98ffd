"""Titles as context, the BM25 index inside every propdex index, and fusion."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from propdex.encoders import Document, load_encoder
from propdex.encoders.base import TITLE_TOKENS, clip_title
from propdex.indexer import lexical
from propdex.indexer.build import IndexWriter
from propdex.indexer.manifest import read_manifest
from paths import DATA
from propdex.retriever import Searcher, fusion

SCIFACT = DATA / "beir" / "scifact"


def _scifact_docs(n: int) -> list[Document]:
    from propdex.indexer.readers import read_corpus

    return [d for _, d in zip(range(n), read_corpus([SCIFACT / "corpus.jsonl"]))]


# -- titles ------------------------------------------------------------------------
@pytest.mark.slow
def test_title_reaches_the_encoder_but_never_a_unit(minilm, hotpot_docs):
    doc = next(d for d in hotpot_docs if d.title and len(d.sentences) > 1)
    titled = load_encoder("tokens", backbone=minilm, title=True)
    plain = load_encoder("tokens", backbone=minilm, title=False)
    [passage] = titled.passages(doc)[:1]
    states = titled.forward([passage])[0]
    words = minilm.tokenizer.convert_ids_to_tokens(states.ids.tolist())
    title_words = minilm.tokenizer.tokenize(doc.title)
    # [CLS] title [SEP] text [SEP]: the title's tokens are in the input, marked as not text.
    assert words[1 : 1 + len(title_words)] == title_words
    assert states.special[: len(title_words) + 2].all()
    assert not states.special[len(title_words) + 2 : -1].any()

    with_title = titled.encode(titled.passages(doc))
    without = plain.encode(plain.passages(doc))
    units_t = [u for e in with_title for u in e.units]
    units_p = [u for e in without for u in e.units]
    # Same units (same body tokens, same sentence-relative spans), other vectors.
    assert units_t == units_p
    for u in units_t:
        for a, b in u.spans:
            assert 0 <= a < b <= len(doc.sentence_text(u.sentence))
    assert not np.allclose(np.concatenate([e.vectors for e in with_title]), np.concatenate([e.vectors for e in without]))
    # A document without a title encodes exactly as with titles off.
    untitled = Document(doc.id, doc.text, "", doc.sentences)
    a = titled.encode(titled.passages(untitled))
    np.testing.assert_array_equal(np.concatenate([e.vectors for e in a]), np.concatenate([e.vectors for e in without]))


def test_title_takes_room_from_the_window_and_long_titles_are_clipped(tiny):
    enc = load_encoder("tokens", backbone=tiny)
    text = " ".join(f"word{i}." for i in range(400))
    sentences = []
    pos = 0
    for piece in text.split(" "):
        sentences.append((pos, pos + len(piece)))
        pos += len(piece) + 1
    doc = Document("d", text, "A title " * 40, tuple(sentences))
    clipped, n = clip_title(tiny.tokenizer, doc.title)
    assert len(tiny.tokenizer.tokenize(clipped)) == n == TITLE_TOKENS
    passages = enc.passages(doc)
    for p, states in zip(passages, enc.forward(passages)):
        body = ~states.special
        # Every passage token made it into the model input: no text truncated.
        assert body.sum() == len(tiny.tokenizer(p.text, add_special_tokens=False)["input_ids"])
        assert len(states.ids) <= tiny.max_length
    assert passages[0].start == 0 and passages[-1].end == len(text)


# -- BM25 -----------------------------------------------------------------------------
def test_analyzer_stems_and_drops_stop_words():
    assert lexical.analyze("The Runners were running to the Seine!") == ["runner", "were", "run", "sein"]
    assert lexical.analyze("the of and") == []


def test_a_hits_matching_words_are_every_word_whose_stem_is_a_query_term():
    """matching_terms stems only the words that can stem to a term (their
    first letter, or three letters at most): on real articles' every word
    and a question's terms (and the empty stem of "s", the one-letter "i"),
    it finds what stemming every word finds."""
    import bz2

    with bz2.open(DATA / "wikipedia" / "extracted" / "AA" / "wiki_00.bz2", "rt") as f:
        words = lexical.WORDS.findall(f.read(200_000).lower()) + ["s", "ies", "eyed", "yes", "ys"]
    for question in ("Which anarchist was born in Spain's Catalonia in 1870?", "Is the eyed yak bigger?", "2014 S/S is by who?"):
        terms = set(lexical.analyze(question)) | {"i"}
        stemmer = lexical._stemmer()
        want = {w for w in set(words) if w not in lexical.STOP_WORDS and stemmer.stemWord(w) in terms}
        assert lexical.matching_terms(words, terms) == want and want


def test_bm25_agrees_with_rank_bm25_under_robertson_idf():
    from rank_bm25 import BM25Okapi

    docs = _scifact_docs(300)
    texts = [lexical.document_text(d.title, d.text) for d in docs]
    ours = lexical.BM25.build(((d.id, t) for d, t in zip(docs, texts)), method="robertson", k1=1.5, b=0.75)
    reference = BM25Okapi([lexical.analyze(t) for t in texts], k1=1.5, b=0.75)
    queries = json.loads("[" + ",".join((SCIFACT / "queries.jsonl").read_text().splitlines()[:40]) + "]")
    compared = 0
    for q in queries:
        terms = lexical.analyze(q["text"])
        df = {t: sum(t in f for f in reference.doc_freqs) for t in set(terms)}
        if not terms or any(n * 2 >= len(docs) for n in df.values()):
            continue  # rank-bm25 floors idf <= 0 differently; outside the stated agreement
        mine = ours.scores(q["text"])
        theirs = np.asarray(reference.get_scores(terms))
        # Same formula up to the constant (k1 + 1) that Lucene-style tf drops.
        np.testing.assert_allclose(mine * (1.5 + 1), theirs, rtol=1e-4, atol=1e-4)
        top = lambda s: [i for i in np.lexsort((np.arange(len(s)), -s))[:10] if s[i] > 0]  # noqa: E731
        assert top(mine) == top(theirs)
        compared += 1
    assert compared >= 20


def test_bm25_search_excludes_and_keeps_order():
    docs = [("a", "apple banana"), ("b", "apple"), ("c", "cherry"), ("d", "apple apple banana")]
    index = lexical.BM25.build(docs)
    hits = index.search("apple banana", 10)
    assert [d for d, _ in hits][:2] == ["d", "a"] or [d for d, _ in hits][:2] == ["a", "d"]
    assert "c" not in [d for d, _ in hits]  # no term in common: not a hit
    assert "d" not in [d for d, _ in index.search("apple banana", 10, exclude={"d"})]
    assert index.search("zebra", 5) == []


def test_two_builds_of_one_corpus_write_the_same_bm25_files(tmp_path):
    """Term ids are sorted, not a set's order, which Python's string hashing
    changes from one process to the next."""
    script = textwrap.dedent("""
        import sys
        from pathlib import Path
        from propdex.indexer import lexical
        docs = [(f"d{i}", f"term{i} apple banana cherry {'pear ' * (i % 3)} the of") for i in range(40)] + [("stop", "the of and")]
        lexical.Segment.build(docs).save(Path(sys.argv[1]))
    """)
    for seed in ("1", "2"):
        subprocess.run([sys.executable, "-c", script, str(tmp_path / seed)], check=True, env={**os.environ, "PYTHONHASHSEED": seed})
    files = sorted(p.name for p in (tmp_path / "1").iterdir())
    assert files and files == sorted(p.name for p in (tmp_path / "2").iterdir())
    for name in files:
        assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes(), name
    index = lexical.BM25([lexical.Segment.load(tmp_path / "1")])
    assert [d for d, _ in index.search("term7 pear", 3)][0] == "d7"
    assert index.search("the of", 3) == []


_KILL_DURING_BM25 = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    sys.path[:0] = [{root!r}, {tests!r}]
    from propdex.encoders import Backbone, load_encoder
    from propdex.indexer import lexical
    from propdex.indexer.build import IndexWriter
    from propdex.indexer.readers import read_corpus

    real_save = lexical.Segment.save
    def save_then_die(self, directory):
        real_save(self, directory)
        files = sorted(Path(directory).iterdir())
        files[0].write_bytes(files[0].read_bytes()[:7])  # half-written
        os.kill(os.getpid(), signal.SIGKILL)
    lexical.Segment.save = save_then_die
    enc = load_encoder("tokens", backbone=Backbone.load({tiny!r}, device="cpu", max_length=64))
    docs = [d for _, d in zip(range(60), read_corpus([{corpus!r}]))]
    IndexWriter({out!r}, enc, shard_docs=20, inputs={{"n": 60}}).build(docs)
""")


def test_bm25_write_killed_resumes_to_the_same_index(tmp_path, tiny, tiny_dir):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    docs = _scifact_docs(60)
    enc = load_encoder("tokens", backbone=tiny)
    whole = IndexWriter(tmp_path / "whole", enc, shard_docs=20, inputs={"n": 60}).build(docs)
    assert whole["status"] == "complete" and whole["lexical"]["documents"] == 60

    script = _KILL_DURING_BM25.format(root=str(root), tests=str(root / "tests"), tiny=str(tiny_dir),
                                      corpus=str(SCIFACT / "corpus.jsonl"), out=str(tmp_path / "killed"))
    victim = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert victim.returncode == -9, victim.stderr.decode()[-2000:]
    assert read_manifest(tmp_path / "killed")["status"] == "lexical"
    assert (tmp_path / "killed" / "shard-00000" / "bm25.tmp").is_dir()  # what the kill left

    resumed = IndexWriter(tmp_path / "killed", enc, shard_docs=20, inputs={"n": 60}).build(docs)
    assert resumed["status"] == "complete" and resumed["lexical"]["segments"] == 3
    assert not (tmp_path / "killed" / "shard-00000" / "bm25.tmp").exists()
    assert [s["bm25_files"] for s in resumed["shards"]] == [s["bm25_files"] for s in whole["shards"]]
    with Searcher.load(tmp_path / "whole", encoder=enc) as a, Searcher.load(tmp_path / "killed", encoder=enc) as b:
        for q in ("coronavirus vaccine efficacy", "DNA methylation in cancer cells"):
            assert [(h.doc_id, h.score) for h in a.search(q, k=5, bm25=True)] == [(h.doc_id, h.score) for h in b.search(q, k=5, bm25=True)]


def test_no_bm25_builds_none_and_says_so(tmp_path, tiny):
    enc = load_encoder("single", backbone=tiny)
    manifest = IndexWriter(tmp_path / "i", enc, bm25=False).build(_scifact_docs(10))
    assert "lexical" not in manifest and not (tmp_path / "i" / "shard-00000" / "bm25").exists()
    with Searcher.load(tmp_path / "i", encoder=enc) as s:
        with pytest.raises(ValueError, match="no BM25 index"):
            s.search("anything", bm25=True)
    # Re-run with BM25 on: the vectors are kept, the BM25 index is added.
    shard = (tmp_path / "i" / "shard-00000" / "index.faiss").stat().st_mtime_ns
    again = IndexWriter(tmp_path / "i", enc, bm25=True).build(_scifact_docs(10))
    assert again["status"] == "complete" and again["lexical"]["documents"] == 10
    assert (tmp_path / "i" / "shard-00000" / "index.faiss").stat().st_mtime_ns == shard
    # And off again: what is there stays.
    assert "lexical" in IndexWriter(tmp_path / "i", enc, bm25=False).build(_scifact_docs(10))


# -- fusion ----------------------------------------------------------------------------
def test_rrf_by_hand():
    fused = fusion.rrf([["a", "b", "c"], ["c", "a"]])
    expected = {"a": 1 / 61 + 1 / 62, "b": 1 / 62, "c": 1 / 63 + 1 / 61}
    assert [d for d, _ in fused] == ["a", "c", "b"]
    for d, s in fused:
        assert s == pytest.approx(expected[d])


def test_minmax_by_hand():
    fused = dict(fusion.minmax([[("a", 10.0), ("b", 5.0), ("c", 0.0)], [("c", 0.9), ("b", 0.1)]]))
    assert fused == pytest.approx({"a": 1.0, "b": 0.5, "c": 1.0})
    with pytest.raises(ValueError, match="unknown fusion"):
        fusion.fuse([], "borda")


@pytest.mark.slow
def test_hybrid_finds_a_document_only_its_title_names(tmp_path, capsys):
    """80 real SciFact abstracts; 'RiboSys', 'Saccharomyces' and 'cerevisiae'
    stand in one title (365896) and in no abstract."""
    from propdex.cli import main

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(line + "\n" for line in (SCIFACT / "corpus.jsonl").read_text().splitlines()[:80]))
    query = "RiboSys for Saccharomyces cerevisiae"
    assert "RiboSys" not in corpus.read_text().split('"text"')[1]
    for out, extra in (("titled", []), ("plain", ["--no-title"])):
        assert main(["-q", "index", str(corpus), "--out", str(tmp_path / out), "--encoder", "tokens", "--device", "cpu", *extra]) == 0
    capsys.readouterr()

    def top(index: str, *flags: str) -> list[dict]:
        assert main(["-q", "search", str(tmp_path / index), query, "-k", "3", "--json", "--device", "cpu", *flags]) == 0
        return json.loads(capsys.readouterr().out)["results"]

    for flags in (["--hybrid"], ["--bm25"], ["--hybrid", "--level", "sentence"]):
        hits = top("titled", *flags)
        assert hits[0]["doc_id"] == "365896", flags
        assert hits[0]["sentence"]["text"] and hits[0]["sentence"]["text"] in _scifact_text("365896")  # body text, never the title
    # Without titles no indexed word of the query is in that document: BM25 cannot find it.
    assert "365896" not in [h["doc_id"] for h in top("plain", "--bm25")]


def _scifact_text(doc_id: str) -> str:
    for line in (SCIFACT / "corpus.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["_id"] == doc_id:
            return record["text"]
    raise KeyError(doc_id)


@pytest.mark.slow
def test_title_units_count_for_the_document_and_never_for_a_sentence(tmp_path, minilm):
    from propdex.encoders.units import Kind

    enc = load_encoder("tokens", backbone=minilm, title_units=True)
    docs = [Document("derrickson", "He is an American director. He lives in Los Angeles.", "Scott Derrickson", ((0, 27), (28, 52))),
            Document("wood", "He was an American filmmaker. He made films.", "Ed Wood", ((0, 29), (30, 44)))]
    [encoded] = enc.encode(enc.passages(docs[0]))
    titles = [u for u in encoded.units if u.kind == Kind.TITLE]
    assert len(titles) == len(minilm.tokenizer.tokenize("Scott Derrickson")) and all(u.spans == () for u in titles)
    IndexWriter(tmp_path / "i", enc).build(docs)
    plain = load_encoder("tokens", backbone=minilm)
    IndexWriter(tmp_path / "p", plain).build(docs)
    with Searcher.load(tmp_path / "i", encoder=enc) as s, Searcher.load(tmp_path / "p", encoder=plain) as p:
        doc = s.search("Scott Derrickson", k=2)
        assert doc[0].doc_id == "derrickson" and doc[0].score > p.search("Scott Derrickson", k=2)[0].score
        for level in ("sentence", "unit"):
            for h in s.search("Scott Derrickson", k=10, level=level):
                assert all(u.kind == Kind.TOKEN for u in h.units) and h.sentence_text in docs[0].text + docs[1].text


def test_interleave_by_hand():
    assert fusion.interleave(list("abcdefghij"), list("xbyz")) == list("abcdxefghyijz")
    # Items the first list already placed are skipped; a short list hands over to the other.
    assert fusion.interleave(list("ab"), list("axyz"), every=2) == list("axbyz")
    with pytest.raises(ValueError, match="every"):
        fusion.interleave(["a"], ["b"], every=1)


@pytest.mark.slow
def test_second_hop_finds_the_bridge_paragraph(tmp_path, capsys, hotpot_docs):
    """HotpotQA's 'Big Stone Gap' question: the director is named only in the
    film's paragraph, and it is her paragraph that answers."""
    from propdex.cli import main

    corpus = tmp_path / "hotpot.jsonl"
    corpus.write_text("".join(json.dumps({"id": d.id, "title": d.title, "text": d.text}) + "\n" for d in hotpot_docs))
    assert main(["-q", "index", str(corpus), "--out", str(tmp_path / "idx"), "--encoder", "single", "--device", "cpu"]) == 0
    capsys.readouterr()
    query = 'The director of the romantic comedy "Big Stone Gap" is based in what New York city?'

    def hits(*flags: str) -> list[dict]:
        assert main(["-q", "search", str(tmp_path / "idx"), query, "-k", "5", "--hybrid", "--json", "--device", "cpu", *flags]) == 0
        return json.loads(capsys.readouterr().out)["results"]

    one, two = hits(), hits("--hops", "2")
    assert one[0]["doc_id"] == "Big Stone Gap (film)"
    assert "Adriana Trigiani" not in [h["doc_id"] for h in one]
    # The first hop keeps its top four; the fifth place is the second hop's.
    assert [h["doc_id"] for h in two[:4]] == [h["doc_id"] for h in one[:4]] and {h["hop"] for h in two[:4]} == {1}
    assert two[4]["doc_id"] == "Adriana Trigiani" and two[4]["hop"] == 2 and two[4]["rank"] == 5
    assert two[4]["sentence"]["text"] in next(d.text for d in hotpot_docs if d.id == "Adriana Trigiani")
    # At sentence level her paragraph offers its best sentence, the one that answers, in the same fifth place.
    one, two = hits("--level", "sentence"), hits("--level", "sentence", "--hops", "2")
    assert [(h["doc_id"], h["sentence"]["index"]) for h in two[:4]] == [(h["doc_id"], h["sentence"]["index"]) for h in one[:4]]
    assert two[4]["doc_id"] == "Adriana Trigiani" and two[4]["hop"] == 2 and "Adriana Trigiani" not in [h["doc_id"] for h in one]
    assert "Greenwich Village" in two[4]["sentence"]["text"] and two[4]["text"] == two[4]["sentence"]["text"]
    assert main(["-q", "search", str(tmp_path / "idx"), query, "--hops", "2", "--level", "unit", "--device", "cpu"]) == 2
    assert "hops=2 ranks documents or sentences" in capsys.readouterr().err


@pytest.mark.slow
def test_a_second_hop_scores_with_the_vectors_its_first_hop_encoded(tmp_path, hotpot_docs, minilm):
    """The second hop re-scores its documents' sentences for the question the
    first hop encoded: the query is encoded once a search, and the hop still
    offers the bridge paragraph's answering sentence."""
    encoder = load_encoder("single", backbone=minilm, device="cpu")
    IndexWriter(tmp_path / "idx", encoder).build(hotpot_docs)
    query = 'The director of the romantic comedy "Big Stone Gap" is based in what New York city?'
    calls: list[int] = []
    encode = encoder.encode_queries
    encoder.encode_queries = lambda queries: calls.append(len(queries)) or encode(queries)
    with Searcher.load(tmp_path / "idx", encoder=encoder) as searcher:
        hits = searcher.search(query, k=5, level="sentence", hybrid=True, hops=2)
        assert calls == [1]
        assert hits[4].doc_id == "Adriana Trigiani" and hits[4].hop == 2 and "Greenwich Village" in hits[4].sentence_text
        calls.clear()
        assert len(searcher.search_batch([query, "Scott Derrickson"], k=5, level="sentence", hybrid=True, hops=2)) == 2
        assert calls == [2]
