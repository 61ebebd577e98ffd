"""Corpus readers on the real data files and on small broken inputs."""
from __future__ import annotations

import bz2
import gzip
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from paths import DATA

from propdex.encoders.units import Document
from propdex.indexer.readers import FORMATS, Record, Skip, detect_format, read_corpus

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_600.json"
PROPSEGMENT = DATA / "propsegment" / "v1"
DUMP_DIR = DATA / "wikipedia" / "dump"
EXTRACTED = DATA / "wikipedia" / "extracted"
SCIFACT = DATA / "beir" / "scifact"


def kinds(records: list[Record]) -> Counter[str]:
    """Documents counted as "doc", skips by reason."""
    return Counter("doc" if isinstance(r, Document) else r.reason for r in records)


def docs(records: list[Record]) -> list[Document]:
    return [r for r in records if isinstance(r, Document)]


def check_document(doc: Document) -> None:
    assert doc.id and doc.text.strip()
    assert doc.sentences
    previous_end = 0
    for start, end in doc.sentences:
        assert previous_end <= start <= end <= len(doc.text)
        previous_end = end


# ----------------------------------------------------------------- real data


def test_hotpotqa_one_document_per_distinct_title() -> None:
    assert detect_format(HOTPOT) == "hotpotqa"
    records = list(read_corpus([HOTPOT]))
    assert kinds(records) == {"doc": 5926}
    ids = [d.id for d in docs(records)]
    assert len(set(ids)) == 5926
    assert all(d.id == d.title for d in docs(records))


def test_hotpotqa_sentence_indices_match_the_data() -> None:
    questions = json.loads(HOTPOT.read_text(encoding="utf-8"))
    by_id = {d.id: d for d in docs(list(read_corpus([HOTPOT])))}
    first: dict[str, list[str]] = {}
    for question in questions:
        for title, given in question["context"]:
            first.setdefault(title, given)
    for title, given in first.items():
        doc = by_id[title]
        assert len(doc.sentences) == len(given)
        assert [doc.sentence_text(i) for i in range(len(given))] == [s.strip() for s in given]
    # A paragraph ending in an all-whitespace sentence keeps an empty span for it.
    kravitz = by_id["Kravitz Design"]
    assert kravitz.sentences[-1][0] == kravitz.sentences[-1][1]
    # Supporting facts index the document's sentences.
    for title, index in questions[0]["supporting_facts"]:
        assert by_id[title].sentence_text(index) == first[title][index].strip()


def test_propsegment_directory_reads_dev_then_test() -> None:
    assert detect_format(PROPSEGMENT) == "propsegment"
    records = list(read_corpus([PROPSEGMENT]))
    assert kinds(records) == {"doc": 45 + 72}
    dev = docs(list(read_corpus([PROPSEGMENT / "document_clusters.dev.json"])))
    test = docs(list(read_corpus([PROPSEGMENT / "document_clusters.test.json"])))
    assert (len(dev), len(test)) == (45, 72)
    assert [d.id for d in docs(records)] == [d.id for d in dev + test]


def test_propsegment_sentences_are_the_data_sentences() -> None:
    clusters = json.loads((PROPSEGMENT / "document_clusters.dev.json").read_text(encoding="utf-8"))
    expected = {
        doc["document_id"]: (f"cluster {c['cluster_id']}", doc["document"], [s["sentence_text"] for s in doc["sentences"]])
        for c in clusters
        for doc in c["documents"]
    }
    for doc in docs(list(read_corpus([PROPSEGMENT / "document_clusters.dev.json"]))):
        title, text, given = expected[doc.id]
        assert (doc.title, doc.text) == (title, text)
        assert [doc.sentence_text(i) for i in range(len(doc.sentences))] == [s.strip() for s in given]


@pytest.fixture(scope="module")
def dump_records() -> list[Record]:
    return list(read_corpus([DUMP_DIR]))


def test_dump_articles_and_redirects(dump_records: list[Record]) -> None:
    (dump_file,) = DUMP_DIR.iterdir()
    assert detect_format(dump_file) == "mediawiki"  # named ...-shortened.bz2, no .xml
    assert kinds(dump_records) == {"doc": 106, "redirect": 100}
    redirect = next(r for r in dump_records if isinstance(r, Skip))
    assert redirect.source.endswith("#10") and redirect.detail == "AccessibleComputing"
    for doc in docs(dump_records):
        check_document(doc)


def test_dump_text_is_clean_prose(dump_records: list[Record]) -> None:
    anarchism = next(d for d in docs(dump_records) if d.title == "Anarchism")
    assert anarchism.id == "12"
    assert anarchism.text.startswith("Anarchism is a political philosophy that advocates self-governed societies")
    assert "\nHistory\n" in anarchism.text  # a heading on its own line
    assert "\n\n\n" not in anarchism.text
    for doc in docs(dump_records):
        for markup in ("{{", "}}", "[[", "]]", "<ref", "</", "'''", "&nbsp;", "Category:", "thumb|"):
            assert markup not in doc.text, (doc.title, markup)


def test_beir_scifact() -> None:
    assert detect_format(SCIFACT) == "beir"
    records = list(read_corpus([SCIFACT]))
    assert kinds(records) == {"doc": 5183}
    first = docs(records)[0]
    assert first.id == "4983"
    assert first.title.startswith("Microstructural development of human newborn cerebral white matter")
    # The corpus file itself, as eval/datasets.py passes it.
    assert sum(1 for _ in read_corpus([SCIFACT / "corpus.jsonl"], format="beir")) == 5183


def test_wikiextractor_first_file() -> None:
    assert detect_format(EXTRACTED) == "wikiextractor"
    first_file = EXTRACTED / "AA" / "wiki_00.bz2"
    records = list(read_corpus([first_file]))
    assert kinds(records) == {"doc": 38}
    first = docs(records)[0]
    assert (first.id, first.title) == ("12", "Anarchism")
    assert first.text.startswith("Anarchism is a political philosophy")  # title line dropped
    for doc in docs(records):
        check_document(doc)
        assert doc.id.isdigit() and doc.title


def test_wikiextractor_directory_streams_in_sorted_order() -> None:
    records = read_corpus([EXTRACTED])
    ids = [next(records).id for _ in range(40)]
    assert ids[0] == "12" and ids[:38] == [d.id for d in docs(list(read_corpus([EXTRACTED / "AA" / "wiki_00.bz2"])))]


# -------------------------------------------------------------- broken input


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_jsonl_bad_records_become_skips(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "c.jsonl",
        [
            b'{"id": "a", "title": "T", "text": "Good text. Two sentences."}',
            b'{"id": "b", "text": "unterminated',
            "{\"id\": \"c\", \"text\": \"caf\u00e9\"}".encode("latin-1"),
            b'{"id": "d", "text": "   "}',
            b'{"id": "e"}',
            b'{"title": "no id", "text": "x"}',
            b"",
            b'{"_id": 7, "text": "Integer id."}',
            b'["not", "an", "object"]',
            b'{"id": "f", "text": "' + b"x" * 100 + b'"}',
        ],
    )
    records = list(read_corpus([path], max_chars=50))
    summary = [(r.id if isinstance(r, Document) else r.reason, r.source if isinstance(r, Skip) else "") for r in records]
    assert summary == [
        ("a", ""),
        ("malformed_json", f"{path}:2"),
        ("invalid_utf8", f"{path}:3"),
        ("empty", f"{path}:4"),
        ("missing_field", f"{path}:5"),
        ("missing_field", f"{path}:6"),
        ("7", ""),
        ("malformed_json", f"{path}:9"),
        ("too_large", f"{path}:10"),
    ]
    assert records[0].title == "T" and records[0].sentences == ((0, 10), (11, 25))


def many_jsonl_lines(n: int) -> bytes:
    return b"".join(
        json.dumps({"id": str(i), "text": f"Document {i} says {i * 7919 % 104729} things."}).encode() + b"\n"
        for i in range(n)
    )


def test_truncated_bz2_ends_in_a_skip_and_reading_goes_on(tmp_path: Path) -> None:
    # Level 1 uses 100 kB blocks, so the first half of the file still decodes.
    data = bz2.compress(many_jsonl_lines(20_000), compresslevel=1)
    broken = tmp_path / "a.jsonl.bz2"
    broken.write_bytes(data[: len(data) // 2])
    after = write_lines(tmp_path / "b.jsonl", [b'{"id": "next", "text": "Still read."}'])
    records = list(read_corpus([broken, after]))
    skips = [r for r in records if isinstance(r, Skip)]
    # The line the data breaks off in is a malformed record naming its line;
    # the lost rest of the stream is the truncated_bz2 skip after it.
    assert [s.reason for s in skips] == ["malformed_json", "truncated_bz2"]
    n_before = records.index(skips[0])
    assert 0 < n_before < 20_000
    assert skips[0].source == f"{broken}:{n_before + 1}"
    assert skips[1].detail.startswith(f"after {n_before + 1} records")
    assert [d.id for d in docs(records)][:n_before] == [str(i) for i in range(n_before)]
    assert records[-1].id == "next"


def test_truncated_real_bz2_in_a_directory(tmp_path: Path) -> None:
    # Half of a 900 kB-block file decodes to nothing: the format comes from the name.
    data = (EXTRACTED / "AA" / "wiki_00.bz2").read_bytes()
    (tmp_path / "AA").mkdir()
    (tmp_path / "AA" / "wiki_00.bz2").write_bytes(data[: len(data) // 2])
    (tmp_path / "AA" / "wiki_01.bz2").write_bytes((EXTRACTED / "AA" / "wiki_01.bz2").read_bytes())
    records = list(read_corpus([tmp_path]))
    assert records[0] == Skip("truncated_bz2", str(tmp_path / "AA" / "wiki_00.bz2"), records[0].detail)
    assert records[0].detail.startswith("after 0 records")
    assert len(docs(records)) == len(records) - 1 > 0


def test_gzip_is_opened_transparently(tmp_path: Path) -> None:
    path = tmp_path / "c.data"  # no telling extension: sniffed
    path.write_bytes(gzip.compress(many_jsonl_lines(3)))
    assert detect_format(path) == "jsonl"
    assert [d.id for d in docs(list(read_corpus([path])))] == ["0", "1", "2"]


def test_directory_walk_is_sorted_recursive_and_skips_hidden_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    write_lines(tmp_path / "b.jsonl", [b'{"id": "b", "text": "B."}'])
    write_lines(tmp_path / "a" / "z.jsonl", [b'{"id": "az", "text": "AZ."}'])
    write_lines(tmp_path / ".hidden.jsonl", [b'{"id": "hidden", "text": "H."}'])
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    records = list(read_corpus([tmp_path]))
    assert [r.id if isinstance(r, Document) else r.reason for r in records] == ["az", "b", "unreadable"]



def test_links_fifos_and_loops_are_named_skips_and_nothing_hangs(tmp_path: Path) -> None:
    import os

    write_lines(tmp_path / "a.jsonl", [b'{"id": "a", "text": "A."}'])
    (tmp_path / "sub").mkdir()
    write_lines(tmp_path / "sub" / "b.jsonl", [b'{"id": "b", "text": "B."}'])
    (tmp_path / "sub" / "loop").symlink_to(tmp_path)  # back to the top: read it once
    (tmp_path / "gone.jsonl").symlink_to(tmp_path / "missing.jsonl")
    os.mkfifo(tmp_path / "pipe")
    records = list(read_corpus([tmp_path]))
    assert [r.id for r in records if isinstance(r, Document)] == ["a", "b"]
    skips = {Path(r.source).name: r.detail for r in records if isinstance(r, Skip)}
    assert skips == {"gone.jsonl": "broken symbolic link", "loop": "directory already read (a symbolic link loop)",
                     "pipe": "not a regular file (a FIFO, socket or device)"}
    with pytest.raises(ValueError, match="not a regular file or directory"):
        read_corpus([tmp_path / "pipe"])

MEDIAWIKI = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10">
  <siteinfo><sitename>Test</sitename></siteinfo>
  <page><title>Ada</title><ns>0</ns><id>1</id>
    <revision><id>100</id><text xml:space="preserve">{{Infobox person|name=Ada|born={{birth date|1815|12|10}}}}
'''Ada Lovelace''' ({{IPAc-en|ˈ|æ|d|ə}}; 1815 – 1852) was an [[England|English]] [[mathematician]].&lt;ref name="a"&gt;{{cite book|title=T}}&lt;/ref&gt; She is &lt;b&gt;known&lt;/b&gt; for [[Charles Babbage|Babbage's]] engine.&lt;ref name="a"/&gt;
[[File:Ada.jpg|thumb|A [[portrait]] of Ada]]
&lt;!-- a comment --&gt;
This line goes on
in the same paragraph.

== Early life ==
Born in [[London]] &amp;amp; raised there.
{| class="wikitable"
| cell || cell
|}
* First item
* Second [http://example.com link]

== References ==
{{reflist}}
* A citation

== Legacy ==
Her legacy.
[[Category:1815 births]]
</text></revision>
  </page>
  <page><title>Lovelace</title><ns>0</ns><id>2</id><redirect title="Ada" />
    <revision><id>101</id><text xml:space="preserve">#REDIRECT [[Ada]]</text></revision>
  </page>
  <page><title>Talk:Ada</title><ns>1</ns><id>3</id>
    <revision><id>102</id><text xml:space="preserve">Talk text.</text></revision>
  </page>
  <page><title>Blank</title><ns>0</ns><id>4</id>
    <revision><id>103</id><text xml:space="preserve">{{stub}}</text></revision>
  </page>
</mediawiki>
"""


def test_mediawiki_rendering_and_skips(tmp_path: Path) -> None:
    path = tmp_path / "dump.bz2"
    path.write_bytes(bz2.compress(MEDIAWIKI.encode()))
    records = list(read_corpus([path]))
    assert [(r.id if isinstance(r, Document) else r.reason) for r in records] == [
        "1", "redirect", "namespace", "empty",
    ]
    assert records[1].source == f"{path}#2"
    ada = records[0]
    assert ada.title == "Ada"
    assert ada.text == (
        "Ada Lovelace (1815 – 1852) was an English mathematician. She is known for Babbage's engine.\n\n"
        "This line goes on in the same paragraph.\n\n"
        "Early life\n\n"
        "Born in London & raised there.\n\n"
        "First item\n"
        "Second link\n\n"
        "Legacy\n\n"
        "Her legacy."
    )
    assert ada.sentence_text(1) == "She is known for Babbage's engine."


def test_cut_xml_ends_in_an_unreadable_skip(tmp_path: Path) -> None:
    path = tmp_path / "dump.xml"
    end_of_first_page = MEDIAWIKI.index("</page>") + len("</page>")
    path.write_text(MEDIAWIKI[: end_of_first_page + 40], encoding="utf-8")
    records = list(read_corpus([path]))
    assert isinstance(records[0], Document)
    assert records[-1].reason == "unreadable" and records[-1].detail.startswith("after 1 records")


def test_wikiextractor_edge_cases(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "wiki_00",
        [
            b'<doc id="1" url="u" title="Batman &amp; Robin">',
            b"Batman &amp; Robin",
            b"",
            b"Batman & Robin is a film.",
            b"</doc>",
            b'<doc id="2" url="u" title="Bad">',
            b"Bad \xff bytes.",
            b"</doc>",
            b'<doc id="3" url="u" title="Empty">',
            b"Empty",
            b"</doc>",
            b'<doc id="4" url="u" title="Cut">',
            b"Cut off.",
        ],
    )
    records = list(read_corpus([path]))
    assert [(r.id if isinstance(r, Document) else r.reason) for r in records] == [
        "1", "invalid_utf8", "empty", "unreadable",
    ]
    assert (records[0].title, records[0].text) == ("Batman & Robin", "Batman & Robin is a film.")
    assert records[1].source == f"{path}#2"


def test_hotpotqa_first_title_wins_and_bad_context_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text(
        json.dumps(
            [
                {"_id": "q1", "supporting_facts": [], "context": [["A", ["First.", " Second."]], ["B", ["", " "]]]},
                {"_id": "q2", "supporting_facts": [], "context": [["A", ["Other."]], ["C", "not a list"]]},
                {"_id": "q3", "supporting_facts": []},
            ]
        )
    )
    records = list(read_corpus([path]))
    assert [(r.id if isinstance(r, Document) else r.reason) for r in records] == [
        "A", "empty", "missing_field", "missing_field",
    ]
    assert records[0].text == "First. Second." and records[0].sentences == ((0, 6), (7, 14))


def test_propsegment_unlocatable_sentences_fall_back_to_joining(tmp_path: Path) -> None:
    path = tmp_path / "document_clusters.dev.json"
    documents = [
        {"document_id": "1", "document": "One here. Two there.", "sentences": [{"sentence_text": "One here."}, {"sentence_text": "Two there."}]},
        {"document_id": "2", "document": "Something else.", "sentences": [{"sentence_text": "Not in it."}, {"sentence_text": "Nor this."}]},
    ]
    path.write_text(
        json.dumps(
            [
                {"cluster_id": "9", "source_dataset": "SOURCE_WIKI_CLUSTERS", "documents": documents},
                {"cluster_id": "8", "source_dataset": "SOURCE_NEWSHEAD", "documents": [{"document_id": "3"}]},
            ]
        )
    )
    found, joined = docs(list(read_corpus([tmp_path])))
    assert found.title == "cluster 9" and found.sentences == ((0, 9), (10, 20))
    assert joined.text == "Not in it. Nor this."
    assert [joined.sentence_text(i) for i in range(2)] == ["Not in it.", "Nor this."]


def test_whole_file_json_errors_are_skips(tmp_path: Path) -> None:
    bad_json = tmp_path / "document_clusters.dev.json"
    bad_json.write_text('[{"cluster_id": ')
    bad_utf8 = tmp_path / "h.json"
    bad_utf8.write_bytes(b'[{"context": [["T\xff", ["S."]]]}]')
    assert [r.reason for r in read_corpus([bad_json])] == ["malformed_json"]
    assert [r.reason for r in read_corpus([bad_utf8], format="hotpotqa")] == ["invalid_utf8"]


def test_unknown_or_missing_input_raises_at_call_time(tmp_path: Path) -> None:
    text = tmp_path / "table.csv"
    text.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="cannot detect the corpus format"):
        read_corpus([text])
    with pytest.raises(ValueError, match="cannot detect"):
        detect_format(tmp_path)
    with pytest.raises(ValueError, match="no such file"):
        read_corpus([tmp_path / "missing.jsonl"])
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ValueError, match="the folder holds no files to read"):
        read_corpus([tmp_path / "empty"])
    with pytest.raises(ValueError, match="unknown format"):
        read_corpus([text], format="csv")
    assert "beir" in FORMATS and "csv" not in FORMATS


def test_long_and_surrogate_ids_are_counted_skips_and_surrogate_text_is_repaired(tmp_path: Path, caplog) -> None:
    from propdex.indexer.readers import MAX_ID_BYTES

    long_id = "é" * 300  # 600 bytes: over LMDB's key limit
    lines = [
        json.dumps({"id": long_id, "text": "Too long an id."}),
        '{"id": "bad\\ud800id", "text": "A lone surrogate in the id."}',
        '{"id": "ok", "title": "T\\udfff", "text": "Fine text \\ud83d with a lone surrogate."}',
        json.dumps({"id": "é" * (MAX_ID_BYTES // 2), "text": "An id of exactly the limit."}),
    ]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    records = list(read_corpus([tmp_path / "c.jsonl"]))
    skips = [r for r in records if isinstance(r, Skip)]
    assert [s.reason for s in skips] == ["bad_id", "bad_id"]
    assert skips[0].source.endswith("c.jsonl:1") and "600 bytes" in skips[0].detail
    assert skips[1].source.endswith("c.jsonl:2") and "surrogate" in skips[1].detail
    docs = [r for r in records if not isinstance(r, Skip)]
    assert [d.id for d in docs] == ["ok", "é" * (MAX_ID_BYTES // 2)]
    assert docs[0].text == "Fine text \ufffd with a lone surrogate." and docs[0].title == "T\ufffd"
    assert docs[0].repairs == ("lone_surrogates",) and docs[1].repairs == ()
    assert "c.jsonl:3: lone surrogates" in caplog.text


@pytest.mark.slow
def test_a_long_id_no_longer_loses_its_shard_and_repaired_text_is_counted(tmp_path: Path, tiny) -> None:
    from propdex.encoders import load_encoder
    from propdex.indexer.build import IndexWriter
    from propdex.retriever import Searcher

    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"id": i, "text": f"Document number {n} is here."}) + "\n"
                                              for n, i in enumerate(["a", "x" * 600, "b"]))
                                      + '{"id": "c", "text": "Document \\udc80 with a lone surrogate."}\n')
    enc = load_encoder("tokens", backbone=tiny)
    manifest = IndexWriter(tmp_path / "ix", enc, shard_docs=10).build(read_corpus([tmp_path / "c.jsonl"]))
    assert manifest["counts"]["documents"] == 3 and manifest["skipped"] == {"bad_id": 1}
    assert manifest["repaired"] == {"lone_surrogates": 1}  # indexed, and counted as changed
    with Searcher.load(tmp_path / "ix", encoder=enc) as s:
        assert {h.doc_id for h in s.search("Document number", k=5)} == {"a", "b", "c"}


def test_one_malformed_page_in_a_real_dump_costs_that_page_only(tmp_path: Path, dump_records: list[Record]) -> None:
    raw = bz2.decompress(next((DATA / "wikipedia" / "dump").glob("*.bz2")).read_bytes())
    third = raw.index(b"<page>", raw.index(b"<page>", raw.index(b"<page>") + 1) + 1)
    title_end = raw.index(b"</title>", third)
    damaged = raw[:title_end] + b"<broken" + raw[title_end:]  # an unclosed tag inside page 3
    (tmp_path / "dump.xml.bz2").write_bytes(bz2.compress(damaged))
    records = list(read_corpus([tmp_path / "dump.xml.bz2"]))
    assert len(records) == len(dump_records)
    bad = [i for i, r in enumerate(records) if isinstance(r, Skip) and r.reason == "malformed_xml"]
    assert bad == [2] and records[2].source.endswith("#page 3")
    kept = lambda rs: [(r.id if isinstance(r, Document) else r.reason) for i, r in enumerate(rs) if i != 2]
    assert kept(records) == kept(dump_records) and sum(isinstance(r, Document) for r in records) >= 100


def test_pages_are_cut_the_same_whatever_blocks_the_bytes_come_in() -> None:
    """The page cutter gives the same pages, and the same broken-off page,
    for the dump fed whole and fed in blocks of any size (a tag split
    between two blocks included)."""
    import random

    from propdex.indexer.readers.mediawiki import _PageCutter

    xml = bz2.decompress(next(DUMP_DIR.iterdir()).read_bytes())
    end = xml.index(b"</page>", len(xml) // 2)
    for data in (xml, xml[:end] + xml[end + len(b"</page>") :]):  # the second: one page breaks off into the next
        whole = list(_PageCutter().feed(data))
        rng = random.Random(len(data))
        for _ in range(10):
            cutter, pages, at = _PageCutter(), [], 0
            while at < len(data):
                n = rng.choice([1, 3, 6, 7, 100, 4096, 1 << 20])
                pages += cutter.feed(data[at : at + n])
                at += n
            assert pages == whole and not cutter.inside
        assert len(whole) >= 200 and sum(page is None for _, page in whole) == (data is not xml)


def test_a_damaged_member_of_a_multistream_bz2_costs_only_its_own_records(tmp_path: Path) -> None:
    """Wikipedia's multistream dumps are many bz2 streams end to end: a
    damaged one is one skip naming its byte offset, and the members after it
    are still read. Here: three real WikiExtractor files as three members,
    the middle one with bytes overwritten inside its data."""
    parts = [(EXTRACTED / "AA" / f"wiki_0{i}.bz2").read_bytes() for i in range(3)]
    alone = [docs(list(read_corpus([write_bytes(tmp_path / f"part{i}.bz2", p)], "wikiextractor"))) for i, p in enumerate(parts)]
    middle = bytearray(parts[1])
    middle[len(middle) // 2 : len(middle) // 2 + 64] = b"\xff" * 64
    path = write_bytes(tmp_path / "multistream.bz2", parts[0] + bytes(middle) + parts[2])
    records = list(read_corpus([path], "wikiextractor"))
    skips = [r for r in records if isinstance(r, Skip)]
    assert [(s.reason, s.source) for s in skips] == [("truncated_bz2", str(path))]
    assert f"the bz2 member at byte {len(parts[0])} is lost" in skips[0].detail
    ids = [d.id for d in docs(records)]
    # Every document of the intact members is there, in order; of the damaged
    # one, at most what was decoded before the damage.
    first, last = [d.id for d in alone[0]], [d.id for d in alone[2]]
    assert ids[: len(first)] == first and ids[-len(last):] == last
    assert len(ids) < len(first) + len(alone[1]) + len(last)
    # A file that is one member cut short still reads as before: one skip at the end.
    cut = write_bytes(tmp_path / "cut.bz2", parts[0] + parts[1][: len(parts[1]) // 2])
    records = list(read_corpus([cut], "wikiextractor"))
    assert [d.id for d in docs(records)][: len(first)] == first
    assert isinstance(records[-1], Skip) and f"member at byte {len(parts[0])} is lost (truncated" in records[-1].detail


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_damaged_member_of_a_multistream_dump_loses_only_its_pages(tmp_path: Path, dump_records: list[Record]) -> None:
    """The real dump re-packed the way Wikipedia's multistream dumps are
    (pages split into bz2 members at page boundaries), the middle member
    damaged: its loss is one truncated_bz2 skip, the page it breaks off in is
    one malformed_xml skip, and every page of the other members reads as in
    the intact dump."""
    (dump_file,) = DUMP_DIR.iterdir()
    xml = bz2.decompress(dump_file.read_bytes())
    cuts = [m.start() for m in re.finditer(rb"  <page>", xml)]
    a, b = cuts[len(cuts) // 3], cuts[2 * len(cuts) // 3]
    members = [bz2.compress(part) for part in (xml[:a], xml[a:b], xml[b:])]
    damaged = bytearray(members[1])
    damaged[len(damaged) * 3 // 4 : len(damaged) * 3 // 4 + 64] = b"\x00" * 64
    path = write_bytes(tmp_path / "enwiki-multistream.xml.bz2", members[0] + bytes(damaged) + members[2])
    records = list(read_corpus([path]))
    skips = [r for r in records if isinstance(r, Skip) and r.reason not in ("redirect", "namespace")]
    assert sorted(s.reason for s in skips) == ["malformed_xml", "truncated_bz2"]
    assert f"the bz2 member at byte {len(members[0])} is lost" in next(s for s in skips if s.reason == "truncated_bz2").detail
    whole = [d.id for d in docs(dump_records)]
    got = [d.id for d in docs(records)]
    first = [d.id for d in docs(list(read_corpus([write_bytes(tmp_path / "a.xml", xml[:a] + b"</mediawiki>")])))]
    last = [d.id for d in docs(list(read_corpus([write_bytes(tmp_path / "c.xml", xml[:cuts[0]] + xml[b:])])))]
    assert got[: len(first)] == first and got[-len(last):] == last and len(last) > 0
    assert set(got) <= set(whole) and len(got) < len(whole)


def test_a_large_bz2_file_is_decompressed_by_threads_into_the_same_bytes_and_damage(tmp_path: Path, monkeypatch) -> None:
    """Past PARALLEL_BYTES a bz2 file's members are decompressed by several
    threads, a range of whole members each: the bytes, and the damaged
    members closing the file reports, are those one thread gives, for a
    damaged member, a member cut short at the end and garbage between
    members, whatever the ranges' length."""
    from propdex.indexer.readers import streams

    (dump_file,) = DUMP_DIR.iterdir()
    xml = bz2.decompress(dump_file.read_bytes())
    members = [bz2.compress(xml[i * len(xml) // 9 : (i + 1) * len(xml) // 9]) for i in range(9)]
    damaged = bytearray(members[3])
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = b"\x00" * 64
    files = {
        "damaged": members[:3] + [bytes(damaged)] + members[4:],
        "cut short": members[:8] + [members[8][: len(members[8]) // 2]],
        "garbage between": members[:5] + [b"not a bz2 stream at all"] + members[5:],
    }

    def read(path: Path) -> tuple[bytes, list]:
        f = streams.open_binary(path)
        data = f.read()
        try:
            f.close()
        except streams.DamagedMembers as e:
            return data, e.members
        return data, []

    for name, parts in files.items():
        path = write_bytes(tmp_path / f"{name}.xml.bz2", b"".join(parts))
        alone = read(path)
        assert alone[1], name  # each file has damage to report
        monkeypatch.setattr(streams, "PARALLEL_BYTES", 0)
        monkeypatch.setattr(streams, "workers", lambda: 3)
        for range_bytes in (1, len(members[0]) * 6 // 10, len(members[0]) * 3 // 2, 1 << 30):
            monkeypatch.setattr(streams, "RANGE_BYTES", range_bytes)
            assert read(path) == alone, (name, range_bytes)
        monkeypatch.undo()
    # Each thread holds a bounded range: members too long to share out (one stream) are read as they stream.
    ranges: list[tuple[int, int]] = []
    real_range = streams._decompress_range

    def decompress_range(path, start, stop):
        ranges.append((start, stop))
        return real_range(path, start, stop)

    monkeypatch.setattr(streams, "_decompress_range", decompress_range)
    monkeypatch.setattr(streams, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(streams, "workers", lambda: 3)
    monkeypatch.setattr(streams, "RANGE_BYTES", len(members[0]) * 6 // 10)
    path = write_bytes(tmp_path / "whole.xml.bz2", b"".join(members))
    assert read(path) == (xml, []) and len(ranges) >= 4
    assert all(stop - start <= 2 * streams.RANGE_BYTES for start, stop in ranges)
    ranges.clear()
    one_stream = write_bytes(tmp_path / "one.xml.bz2", bz2.compress(xml))
    assert read(one_stream) == (xml, []) and ranges == []
    with streams.open_binary(path) as f:  # a read stopped early closes without waiting for the rest
        assert f.read(1000) == xml[:1000]


def test_a_large_dump_is_rendered_by_worker_processes_into_the_same_records(tmp_path: Path, dump_records: list[Record],
                                                                             monkeypatch) -> None:
    """Past POOL_BYTES a dump's pages are rendered in worker processes: the
    records, skips and their order are those of a read in one process, a
    damaged multistream member's loss included (raised by the file at its
    end, after every page before it)."""
    from propdex.indexer.readers import mediawiki, parallel

    (dump_file,) = DUMP_DIR.iterdir()
    xml = bz2.decompress(dump_file.read_bytes())
    cuts = [m.start() for m in re.finditer(rb"  <page>", xml)]
    members = [bz2.compress(part) for part in (xml[: cuts[50]], xml[cuts[50] : cuts[120]], xml[cuts[120] :])]
    damaged = bytearray(members[1])
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = b"\x00" * 64
    multistream = write_bytes(tmp_path / "multistream.xml.bz2", members[0] + bytes(damaged) + members[2])
    alone = list(read_corpus([multistream]))
    started = []
    real_ordered = parallel.ordered

    def ordered(step, items, n_workers, batch=32, ahead=4):
        started.append(n_workers)
        return real_ordered(step, items, n_workers, batch=7, ahead=1)  # many small batches: order is at stake

    monkeypatch.setattr(mediawiki, "POOL_BYTES", 0)
    monkeypatch.setattr(parallel, "workers", lambda: 2)
    monkeypatch.setattr(parallel, "ordered", ordered)
    assert list(read_corpus([DUMP_DIR])) == dump_records
    pooled = list(read_corpus([multistream]))
    assert started == [2, 2] and pooled == alone and any(isinstance(r, Skip) and r.reason == "truncated_bz2" for r in pooled)


@pytest.mark.skipif(sys.platform != "linux", reason="workers die with their parent by Linux's PR_SET_PDEATHSIG")
def test_a_killed_reader_leaves_no_worker_process_behind(tmp_path: Path) -> None:
    """A build killed while worker processes render its dump (SIGKILL: no
    cleanup runs) takes its workers with it instead of leaving them waiting
    on their queue for ever; and a script without a __main__ guard can read."""
    script = tmp_path / "read.py"
    script.write_text(
        "import multiprocessing, sys, time\n"
        "from propdex.indexer.readers import mediawiki, parallel, read_corpus\n"
        "mediawiki.POOL_BYTES, parallel.workers = 0, lambda: 2\n"
        "slow = mediawiki.render_wikitext\n"
        "mediawiki.render_wikitext = lambda text: (time.sleep(0.2), slow(text))[1]\n"
        f"for i, record in enumerate(read_corpus([{str(DUMP_DIR)!r}])):\n"
        "    if i == 0:\n"
        "        print(*[p.pid for p in multiprocessing.active_children()], flush=True)\n"
    )
    reader = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    workers = [int(pid) for pid in reader.stdout.readline().split()]
    assert len(workers) == 2 and reader.poll() is None
    reader.kill()
    reader.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper that may never come (PID 1 in a container)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _five_notes(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(5):
        (notes / f"{i}.md").write_text(f"Note {i} says something about topic {i}.\n")
    return notes


def _count_renders(monkeypatch) -> list[str]:
    """The wikitext of every page the MediaWiki reader renders from now on (in this process)."""
    from propdex.indexer.readers import mediawiki

    rendered: list[str] = []
    real_render = mediawiki.render_wikitext

    def render(text: str) -> str:
        rendered.append(text)
        return real_render(text)

    monkeypatch.setattr(mediawiki, "render_wikitext", render)
    return rendered


def test_a_part_of_a_build_reads_only_its_own_pages_and_files(tmp_path: Path, dump_records: list[Record], monkeypatch,
                                                              tiny) -> None:
    """read_corpus(part=(i, n)) yields every record of part i (j % n == i)
    as the whole read does, and in the other places an OTHER_PART skip for a
    page or whole file it did not render or read; a build that is not told
    the part refuses such a stream rather than count the placeholders."""
    from propdex.encoders import load_encoder
    from propdex.indexer.build import IndexWriter
    from propdex.indexer.readers.base import OTHER_PART

    notes = _five_notes(tmp_path)
    rendered = _count_renders(monkeypatch)
    whole = dump_records + list(read_corpus([notes]))
    rendered.clear()
    for i in range(3):
        part = list(read_corpus([DUMP_DIR, notes], part=(i, 3)))
        assert len(part) == len(whole)
        assert [r for j, r in enumerate(part) if j % 3 == i] == [r for j, r in enumerate(whole) if j % 3 == i]
        assert all(isinstance(r, Skip) and r.reason == OTHER_PART for j, r in enumerate(part) if j % 3 != i)
    articles = sum(isinstance(r, Document) for r in dump_records)
    assert len(rendered) == articles  # each article rendered by one part only
    with pytest.raises(ValueError, match="another part"):
        IndexWriter(tmp_path / "i", load_encoder("tokens", backbone=tiny)).build(read_corpus([notes], part=(0, 2)))


def test_a_resumed_build_reads_on_where_it_stopped(tmp_path: Path, dump_records: list[Record], monkeypatch, tiny) -> None:
    """read_corpus(start=n) leaves the first n records unread where it can
    tell them apart (a dump's pages, whole files), a COMMITTED skip in each
    place; a build killed after some shards, resumed from
    `IndexWriter.resume_at`, renders only the articles it had not committed
    and ends as an uninterrupted build; a build that did not commit what a
    stream left unread refuses it."""
    from propdex.encoders import load_encoder
    from propdex.indexer.build import IndexWriter
    from propdex.indexer.readers import mediawiki
    from propdex.indexer.readers.base import COMMITTED, OTHER_PART

    notes = _five_notes(tmp_path)
    rendered = _count_renders(monkeypatch)
    whole = dump_records + list(read_corpus([notes]))
    articles_from = lambda n: sum(isinstance(r, Document) for r in dump_records[n:])  # noqa: E731
    for start in (0, 7, len(dump_records) + 2, len(whole)):
        rendered.clear()
        records = list(read_corpus([DUMP_DIR, notes], start=start))
        assert records[start:] == whole[start:] and len(records) == len(whole)
        assert all(isinstance(r, Skip) and r.reason == COMMITTED for r in records[:start])
        assert len(rendered) == articles_from(start)
    monkeypatch.setattr(mediawiki, "POOL_BYTES", 0)  # rendered by worker processes, the committed pages answered here
    for start in (7, len(dump_records)):
        records = list(read_corpus([DUMP_DIR], start=start))
        assert records[start:] == dump_records[start:] and [r.reason for r in records[:start]] == [COMMITTED] * start
    monkeypatch.undo()
    rendered = _count_renders(monkeypatch)
    records = list(read_corpus([DUMP_DIR, notes], part=(1, 3), start=6))  # a part resumed: its own records from 6 on
    assert [r for j, r in enumerate(records) if j % 3 == 1 and j >= 6] == [r for j, r in enumerate(whole) if j % 3 == 1 and j >= 6]
    assert all(r.reason == (COMMITTED if j < 6 else OTHER_PART) for j, r in enumerate(records) if j < 6 or j % 3 != 1)

    encoder = load_encoder("single", backbone=tiny)

    def killed(records, after: int):
        for j, record in enumerate(records):
            if j == after:
                raise KeyboardInterrupt  # the build stops here, its committed shards kept
            yield record

    IndexWriter(tmp_path / "whole", encoder, shard_docs=4, factory="Flat").build(read_corpus([DUMP_DIR, notes]))
    with pytest.raises(KeyboardInterrupt):
        IndexWriter(tmp_path / "i", encoder, shard_docs=4, factory="Flat").build(killed(read_corpus([DUMP_DIR, notes]), 100))
    writer = IndexWriter(tmp_path / "i", encoder, shard_docs=4, factory="Flat")
    at = writer.resume_at
    assert 0 < at <= 100 and at == sum(s.inputs for s in writer.manifest.shards)
    rendered.clear()
    resumed = writer.build(read_corpus([DUMP_DIR, notes], start=at))
    assert len(rendered) == articles_from(at) < articles_from(0)
    built = IndexWriter(tmp_path / "whole", encoder, shard_docs=4, factory="Flat").manifest
    assert resumed["counts"] == built.to_json()["counts"]
    assert [s["lmdb_sha256"] for s in resumed["shards"]] == [s.lmdb_sha256 for s in built.shards]
    with pytest.raises(ValueError, match="left unread as committed"):
        IndexWriter(tmp_path / "fresh", encoder).build(read_corpus([notes], start=2))


# ------------------------------------------------------- plain text and Markdown


BREAD_MD = """---
tags: [baking]
title: "Sourdough, the way Ana bakes it"
---
Feed the starter twice a day with equal weights
of flour and water. See [the guide](https://example.com/guide) and [[Starter log|my log]].

## Baking

- Bake at 250 C for 20 minutes
  with steam.
- Then 25 minutes without.

```python
print("hi")
```
"""
GARDEN_TXT = """Garden project
==============

Meeting with Ana on Tuesday: the budget for the garden project
is 400 euros, paid by the residents association.
buy seeds
call Tom
"""


def notes_folder(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "bread.md").write_text(BREAD_MD)
    (root / "sub" / "garden.txt").write_text(GARDEN_TXT)
    (root / ".draft.md").write_text("# Hidden\n\nNot for the index.\n")
    (root / "empty.md").write_text("\n\n")
    (root / "latin1.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1"))
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    return root


def test_a_folder_of_notes_is_text_one_document_a_file(tmp_path: Path) -> None:
    notes = notes_folder(tmp_path / "notes")
    assert detect_format(notes) == "text"
    records = list(read_corpus([notes]))
    skips = {Path(r.source).name: r.reason for r in records if isinstance(r, Skip)}
    assert skips == {"empty.md": "empty", "latin1.txt": "invalid_utf8", "photo.png": "unreadable"}
    bread, garden = docs(records)
    for doc in (bread, garden):
        check_document(doc)
    # Ids are absolute paths, so `add --update` finds a note however it is named.
    assert bread.id == str(notes / "bread.md") and garden.id == str(notes / "sub" / "garden.txt")
    assert bread.title == "Sourdough, the way Ana bakes it" and garden.title == "Garden project"
    # Front matter's other fields, and every note's path, are metadata to filter on.
    assert bread.metadata == {"path": bread.id, "tags": ["baking"]} and garden.metadata == {"path": garden.id}
    sentences = lambda d: [d.text[a:b] for a, b in d.sentences]
    # Markdown: a paragraph's lines join, headings lose their marks, list items and code stand alone, links keep their text.
    assert sentences(bread) == [
        "Feed the starter twice a day with equal weights of flour and water.",
        "See the guide and my log.",
        "Baking",
        "- Bake at 250 C for 20 minutes with steam.",
        "- Then 25 minutes without.",
        'print("hi")',
    ]
    # Plain text: wrapped prose joins up, short lines stay a list; an underlined first line is the title.
    assert sentences(garden) == [
        "Meeting with Ana on Tuesday: the budget for the garden project is 400 euros, paid by the residents association.",
        "buy seeds",
        "call Tom",
    ]


def test_front_matter_is_metadata_in_yaml_or_toml_and_a_broken_one_costs_only_itself(tmp_path: Path, caplog) -> None:
    import datetime

    (tmp_path / "post.md").write_text('+++\ntitle = "Static sites"\ndate = 2024-05-01\ntags = ["go", "web"]\n+++\n'
                                      "# Why Hugo\n\nHugo builds static sites.\n")
    (tmp_path / "log.md").write_text("---\ntitle: 2024\ndraft: true\n---\n# Ship log\n\nWe shipped.\n")
    (tmp_path / "broken.md").write_text("---\ntitle: [unclosed\n---\nThe body survives.\n")
    (tmp_path / "list.md").write_text("---\n- a\n- b\n---\nA list is not fields.\n")
    (tmp_path / "prose.txt").write_text("---\ntitle: not front matter in plain text\n---\nProse.\n")
    (tmp_path / "again.md").write_text("---\ntitle: Garden plan\n---\n\n# garden Plan\n\n## Garden plan\n\nSow in May.\n")
    by_name = {Path(d.id).name: d for d in docs(list(read_corpus([tmp_path])))}
    post, log, broken, listed, prose = (by_name[n] for n in ("post.md", "log.md", "broken.md", "list.md", "prose.txt"))
    # TOML's title titles the note, and the heading under it stays text; its date is a date until the index stores it.
    assert post.title == "Static sites" and post.text.startswith("Why Hugo")
    # A first heading that only repeats the title is not said twice (a context would spend words on it); a later one stays.
    assert by_name["again.md"].title == "Garden plan" and by_name["again.md"].text == "Garden plan\n\nSow in May."
    assert post.metadata == {"path": post.id, "date": datetime.date(2024, 5, 1), "tags": ["go", "web"]}
    # A title that is no string is a field; the heading titles the note.
    assert log.title == "Ship log" and log.metadata == {"path": log.id, "title": 2024, "draft": True}
    # Broken or non-mapping front matter: the note is indexed without it, and the log says which file and why.
    assert broken.text == "The body survives." and broken.metadata == {"path": broken.id}
    assert listed.text == "A list is not fields." and listed.metadata == {"path": listed.id}
    assert "broken.md: front matter does not parse" in caplog.text and "list.md: front matter is a list" in caplog.text
    assert prose.text.startswith("title: not front matter") and prose.metadata == {"path": prose.id}


def test_text_files_are_known_by_name_and_may_be_compressed_or_huge(tmp_path: Path) -> None:
    braces = tmp_path / "snippet.md"
    braces.write_text('{"not": "jsonl"} is how the config starts.\n')
    packed = tmp_path / "log.txt.gz"
    packed.write_bytes(gzip.compress(b"# not a heading in plain text\nOne line.\n"))
    plain = tmp_path / "README"
    plain.write_text("No suffix, so no telling.\n")
    assert detect_format(braces) == "text" and detect_format(packed) == "text"
    (snippet,) = docs(list(read_corpus([braces])))
    assert snippet.title == "snippet" and snippet.text.startswith('{"not"')
    (log,) = docs(list(read_corpus([packed])))
    assert log.title == "log" and log.text == "# not a heading in plain text\nOne line."
    (forced,) = docs(list(read_corpus([plain], format="text")))
    assert forced.title == "README"
    with pytest.raises(ValueError, match="cannot detect"):
        read_corpus([plain])
    (big,) = read_corpus([plain], format="text", max_chars=10)
    assert isinstance(big, Skip) and big.reason == "too_large" and big.source == str(plain)


# ------------------------------------------------------------------------- PDF


def pdf_bytes(pages: list[list[str]], title: str | None = None) -> bytes:
    """A real PDF, written by hand: each page's lines set in Helvetica, one
    text line under the other, as a word processor lays out prose."""
    def literal(s: str) -> str:
        return "(" + s.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") + ")"

    n = len(pages)
    font, info = 3 + 2 * n, 4 + 2 * n
    objects = {1: "<< /Type /Catalog /Pages 2 0 R >>",
               2: f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(n))}] /Count {n} >>",
               font: "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
               info: f"<< /Title {literal(title)} >>" if title else "<< >>"}
    for i, lines in enumerate(pages):
        shown = " T* ".join(f"{literal(line)} Tj" for line in lines)
        stream = f"BT /F1 11 Tf 14 TL 72 720 Td {shown} ET" if lines else ""
        objects[3 + 2 * i] = (f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                              f"/Resources << /Font << /F1 {font} 0 R >> >> /Contents {4 + 2 * i} 0 R >>")
        objects[4 + 2 * i] = f"<< /Length {len(stream.encode('latin-1'))} >>\nstream\n{stream}\nendstream"
    out, offsets = b"%PDF-1.4\n", {}
    for k in sorted(objects):
        offsets[k] = len(out)
        out += f"{k} 0 obj\n{objects[k]}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offsets[k]:010d} 00000 n \n" for k in sorted(objects)).encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info {info} 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def test_a_pdf_is_one_document_its_pages_in_order_and_a_bad_one_a_counted_skip(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("pypdf")
    paper = tmp_path / "papers" / "retrieval.pdf"
    paper.parent.mkdir()
    paper.write_bytes(pdf_bytes([
        ["Late interaction keeps one vector for every token of a passage and scores",
         "a query by the sum of its tokens best matches, which is called MaxSim. Its retrie-",
         "val quality is high."],
        ["Compression keeps the index small.", "Results"],
    ], title="Late  interaction, explained"))
    (tmp_path / "papers" / "scan.pdf").write_bytes(pdf_bytes([[], []]))  # images only: no text layer
    (tmp_path / "papers" / "torn.pdf").write_bytes(pdf_bytes([["Half a file."]])[:60])
    (tmp_path / "papers" / "misnamed.bin").write_bytes(pdf_bytes([["Content, not the name, says PDF."]]))
    assert detect_format(paper) == "pdf" and detect_format(tmp_path / "papers" / "misnamed.bin") == "pdf"
    records = list(read_corpus([tmp_path / "papers"]))
    skips = {Path(r.source).name: r.reason for r in records if isinstance(r, Skip)}
    assert skips == {"scan.pdf": "empty", "torn.pdf": "unreadable"}
    misnamed, pdf = docs(records)
    check_document(pdf)
    assert pdf.id == str(paper) and pdf.title == "Late interaction, explained" and misnamed.title == "misnamed"
    assert pdf.metadata == {"path": str(paper), "pages": 2}
    assert pdf.text.count("\f") == 1 and pdf.text.index("\f") < pdf.text.index("Compression")  # pages apart, for hits' pages
    # Set lines join into sentences, a word hyphenated over a line break is whole, pages end paragraphs.
    assert [pdf.text[a:b] for a, b in pdf.sentences] == [
        "Late interaction keeps one vector for every token of a passage and scores a query by the sum of its tokens "
        "best matches, which is called MaxSim.",
        "Its retrieval quality is high.",
        "Compression keeps the index small.",
        "Results",
    ]
    # Without pypdf the file is still counted, and the skip says what to install.
    monkeypatch.setitem(__import__("sys").modules, "pypdf", None)
    (skip,) = read_corpus([paper])
    assert isinstance(skip, Skip) and skip.reason == "unreadable" and "propdex[pdf]" in skip.detail


# ------------------------------------------------------------------------ HTML


LLAMA_HTML = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Llama &amp; alpaca care</title>
<meta name="author" content="Ana Ruiz"><meta name="keywords" content="llamas, farming , animals">
<style>body { color: red }</style><script>var x = "never shown";</script></head>
<body><h1>Caring for <em>llamas</em></h1>
<p>Llamas need
   shelter from rain and a com<b>pan</b>ion; a lone llama is stressed.<br>They eat hay.</p>
<ul><li>Trim toenails every <b>two</b> months.</li><li>Shear in spring.</li></ul>
<pre>feed(llama)
water(llama)</pre>
<table><tr><td>Age</td><td>Weight</td></tr></table>
</body></html>
"""


def test_an_html_page_is_the_text_a_browser_shows_titled_by_its_title(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "llamas.html").write_text(LLAMA_HTML)
    # No <title>: the first <h1>, whole. Declared latin-1: read as the page says. No suffix: its opening says HTML.
    (site / "cafe.htm").write_bytes('<html><meta charset="iso-8859-1"><h1>Caf\xe9 <i>cr\xe8me</i></h1><p>Strong.</p></html>'
                                    .encode("latin-1"))
    (site / "saved").write_text("<!doctype html><p>Saved without a name.</p>")
    (site / "blank.html").write_text("<html><head><title>Only a title</title></head><body> </body></html>")
    (site / "odd.html").write_text('<html><meta charset="klingon"><p>Qapla.</p></html>')
    (site / "bad.html").write_bytes(b"<html><p>caf\xe9</p></html>")
    assert detect_format(site / "saved") == "html" and detect_format(site / "cafe.htm") == "html"
    records = list(read_corpus([site]))
    assert {Path(r.source).name: r.reason for r in records if isinstance(r, Skip)} == {
        "blank.html": "empty", "odd.html": "unreadable", "bad.html": "invalid_utf8"}
    cafe, llamas, saved = docs(records)
    for doc in (cafe, llamas, saved):
        check_document(doc)
    assert llamas.title == "Llama & alpaca care" and llamas.id == str(site / "llamas.html")
    assert llamas.metadata == {"path": llamas.id, "author": "Ana Ruiz", "keywords": ["llamas", "farming", "animals"]}
    # Blocks and <br> end lines, inline elements join into them, <pre> keeps its lines; head, style and script are gone.
    assert [llamas.text[a:b] for a, b in llamas.sentences] == [
        "Caring for llamas", "Llamas need shelter from rain and a companion; a lone llama is stressed.", "They eat hay.",
        "Trim toenails every two months.", "Shear in spring.", "feed(llama)", "water(llama)", "Age", "Weight"]
    assert cafe.title == "Café crème" and cafe.text == "Café crème\n\nStrong."
    assert saved.title == "saved" and saved.text == "Saved without a name."


# ------------------------------------------------------------------------ Word


def docx_bytes(paragraphs: list[str], core: str | None = None) -> bytes:
    """A .docx as Word writes one: a zip of Office Open XML; each paragraph's
    XML given inside <w:p>."""
    import io
    import zipfile

    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    body = "".join(f"<w:p>{p}</w:p>" for p in paragraphs)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("[Content_Types].xml", '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>')
        z.writestr("word/document.xml", f'<?xml version="1.0"?><w:document {w}><w:body>{body}</w:body></w:document>')
        if core is not None:
            z.writestr("docProps/core.xml", '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/'
                       f'metadata/core-properties" xmlns:dc="http://purl.org/dc/elements/1.1/">{core}</cp:coreProperties>')
    return out.getvalue()


def test_a_word_document_is_its_paragraphs_as_a_reader_sees_them(tmp_path: Path) -> None:
    import zipfile

    run = lambda text: f"<w:r><w:t xml:space=\"preserve\">{text}</w:t></w:r>"
    report = tmp_path / "report.docx"
    report.write_bytes(docx_bytes([
        '<w:pPr><w:pStyle w:val="Title"/></w:pPr>' + run("Quarterly ") + run("report"),
        run("We cut travel by a third. ") + "<w:del><w:r><w:delText>Old plan.</w:delText></w:r></w:del>" + run("Alice drafts."),
        run("Bob checks") + "<w:r><w:tab/></w:r>" + run("quotes.") + "<w:r><w:br/></w:r>" + run("Eve books rooms."),
        "<w:tbl><w:tr><w:tc><w:p>" + run("GPUs") + "</w:p></w:tc></w:tr></w:tbl>",
    ], core="<dc:creator> Ana  Ruiz </dc:creator>"))
    titled = tmp_path / "titled.docx"
    titled.write_bytes(docx_bytes([run("Body.")], core="<dc:title>From the properties</dc:title>"))
    (tmp_path / "torn.docx").write_bytes(report.read_bytes()[:100])
    with zipfile.ZipFile(tmp_path / "other.docx", "w") as z:
        z.writestr("readme.txt", "a zip, not a Word document")
    records = list(read_corpus([tmp_path]))
    assert {Path(r.source).name: r.reason for r in records if isinstance(r, Skip)} == {
        "torn.docx": "unreadable", "other.docx": "unreadable"}
    doc, named = docs(records)
    check_document(doc)
    assert doc.id == str(report) and doc.title == "Quarterly report" and doc.metadata == {"path": doc.id, "author": "Ana Ruiz"}
    # Paragraphs are lines; a deleted run is gone; a tab is a space and a line break a new line; table cells are paragraphs.
    assert [doc.text[a:b] for a, b in doc.sentences] == [
        "Quarterly report", "We cut travel by a third.", "Alice drafts.", "Bob checks quotes.", "Eve books rooms.", "GPUs"]
    assert named.title == "From the properties" and named.text == "Body." and named.metadata == {"path": named.id}


# ------------------------------------------------------- JSON documents, notebooks


def test_a_json_document_is_read_whole_and_other_json_is_one_skip_not_one_a_line(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "records.json").write_text(json.dumps(
        [{"id": "a", "text": "Alpha particles are helium nuclei."}, {"id": "b", "title": "Beta", "text": "Beta decay.", "year": 1899}, 3],
        indent=2))
    (folder / "single.json").write_text(json.dumps({"title": "One", "text": "A record over many lines.", "tags": ["x"]}, indent=2))
    (folder / "package.json").write_text(json.dumps({"name": "app", "version": "1.0", "scripts": {"a": "b"}}, indent=2))
    (folder / "first_bad.txt.jsonl").write_text('{"id": 1, "text": \n{"id": "2", "text": "The second line survives."}\n')
    (folder / "spread.data").write_text('{"id": 1,\n "text": \n')  # opens as an object, parses neither whole nor by lines
    assert detect_format(folder / "records.json") == "json" and detect_format(folder / "single.json") == "json"
    assert detect_format(folder / "first_bad.txt.jsonl") == "jsonl"
    records = list(read_corpus([folder]))
    skips = [(Path(r.source).name, r.reason) for r in records if isinstance(r, Skip)]
    assert skips == [("first_bad.txt.jsonl:1", "malformed_json"), ("package.json", "unreadable"),
                     ("records.json#2", "malformed_json"), ("spread.data:1", "malformed_json"), ("spread.data:2", "malformed_json")]
    second, a, b, single = docs(records)
    assert second.id == "2" and (a.id, b.id, b.title, b.metadata) == ("a", "b", "Beta", {"year": 1899})
    # One object without an id is one record, known by its file's path.
    assert single.id == str(folder / "single.json") and single.title == "One" and single.metadata == {"tags": ["x"]}
    assert "no records" in next(r.detail for r in records if isinstance(r, Skip) and r.source.endswith("package.json"))


def test_a_jupyter_notebook_is_its_markdown_and_code_without_outputs(tmp_path: Path) -> None:
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Churn analysis\n", "\n", "We model customer churn\n", "with [boosting](https://x.org)."]},
        {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": ["import xgboost as xgb\n", "model = xgb.XGBClassifier()"],
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["AUC 0.91\n"]}]},
        {"cell_type": "raw", "metadata": {}, "source": "not shown"},
        {"cell_type": "markdown", "metadata": {}, "source": "- churn is 4% a month"}],
        "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "churn.ipynb"
    path.write_text(json.dumps(nb, indent=1))
    (tmp_path / "broken.ipynb").write_text('{"cells": ')
    (tmp_path / "odd.ipynb").write_text('{"not": "a notebook"}')
    assert detect_format(path) == "notebook"
    records = list(read_corpus([tmp_path]))
    assert {Path(r.source).name: r.reason for r in records if isinstance(r, Skip)} == {
        "broken.ipynb": "malformed_json", "odd.ipynb": "unreadable"}
    (doc,) = docs(records)
    check_document(doc)
    assert doc.title == "Churn analysis" and doc.metadata == {"path": str(path), "language": "python"}
    assert [doc.text[a:b] for a, b in doc.sentences] == [
        "We model customer churn with boosting.", "import xgboost as xgb", "model = xgb.XGBClassifier()", "- churn is 4% a month"]
    assert "AUC" not in doc.text and "not shown" not in doc.text
