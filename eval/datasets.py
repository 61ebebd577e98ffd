"""Evaluation tasks built from the real data in ../shared/data.

A `Task` is a corpus of `Document`s, queries, and what counts as a hit:

- `load_hotpotqa(path)`: HotpotQA distractor questions over the union of their
  context paragraphs (one document per title); gold = supporting-fact titles,
  gold sentences = (title, sentence index).
- `load_beir(folder, split)`: a BEIR dataset (SciFact); graded `qrels`.
- `load_propsegment(folder)`: atomic-fact retrieval on PropSegment dev, as in
  the sub-sentence encoder paper: corpus items are propositions, a query is a
  proposition, gold = the premise propositions that entail it.

A proposition is a `Document` whose `text` is its whole sentence and whose
`focus` holds the character spans of its tokens. `Task.index_text(doc)` is
what a baseline that cannot see boundaries (BM25, a plain sentence encoder)
should index: the proposition's own text. `Task.sentence_of` /
`Task.document_of` map a corpus id to its (source document id, sentence index)
and source document id, for sentence- or document-level metrics by max
aggregation (see `eval.metrics.dedup_ranking`).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from propdex.encoders.segment import spans_text, word_spans
from propdex.encoders.units import Document, Span
from propdex.indexer.manifest import sha256_file
from propdex.indexer.readers import PropSegment


@dataclass(frozen=True)
class Query:
    """A query. `doc` is the query as a Document with focus (PropSegment)."""

    id: str
    text: str
    doc: Document | None = None


@dataclass
class Task:
    """Corpus, queries and relevance for one evaluation.

    `gold_docs[qid]` are corpus ids; `gold_sentences[qid]` are (source
    document id, sentence index) pairs where defined; `qrels[qid][doc_id]` are
    graded judgements (BEIR; grade >= 1 is relevant); `exclude[qid]` are corpus
    ids to drop from that query's ranking before scoring. `prop_text` holds the
    plain text of proposition items (their spans joined by a space) and `units`
    their (source document id, sentence index); both are empty for corpora of
    whole documents. `info` has counts and the sha256 of every data file read.
    """

    name: str
    corpus: list[Document]
    queries: list[Query]
    gold_docs: dict[str, set[str]]
    gold_sentences: dict[str, set[tuple[str, int]]] | None = None
    qrels: dict[str, dict[str, int]] | None = None
    exclude: dict[str, set[str]] = field(default_factory=dict)
    prop_text: dict[str, str] = field(default_factory=dict)
    units: dict[str, tuple[str, int]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    answers: dict[str, str] = field(default_factory=dict)  # HotpotQA: the gold answer string

    def index_text(self, doc: Document) -> str:
        """The text a boundary-blind model should see for a corpus item."""
        return self.prop_text.get(doc.id, doc.text)

    def sentence_of(self, doc_id: str) -> tuple[str, int]:
        """(source document id, sentence index) of a proposition item."""
        return self.units[doc_id]

    def document_of(self, doc_id: str) -> str:
        """Source document id of a corpus item (itself for whole documents)."""
        unit = self.units.get(doc_id)
        return unit[0] if unit is not None else doc_id


def _read_corpus(paths: list[Path], format: str) -> tuple[list[Document], dict[str, int]]:
    """The indexer's reader's Documents, and its skips counted by reason."""
    # Imported lazily so the PropSegment loader does not depend on the indexer.
    from propdex.indexer.readers import read_corpus

    docs: list[Document] = []
    skipped: Counter = Counter()
    for record in read_corpus([str(p) for p in paths], format=format):
        if isinstance(record, Document):
            docs.append(record)
        else:
            skipped[record.reason] += 1
    return docs, dict(skipped)


# --------------------------------------------------------------------------
# HotpotQA


def load_hotpotqa(path: str | Path, limit: int | None = None) -> Task:
    """HotpotQA (distractor): questions over the union of their paragraphs.

    Corpus: one document per distinct context title (the indexer's
    `read_corpus(format="hotpotqa")`, id = title). With `limit` N, the first
    N questions and the union of *their* context paragraphs only.
    """
    path = Path(path)
    questions = json.loads(path.read_text(encoding="utf-8"))
    if limit is not None:
        questions = questions[:limit]
    titles = {title for q in questions for title, _ in q["context"]}
    docs, skipped = _read_corpus([path], "hotpotqa")
    corpus = [d for d in docs if d.id in titles]

    queries, gold_docs, gold_sentences, answers = [], {}, {}, {}
    for q in questions:
        qid = str(q["_id"])
        queries.append(Query(qid, q["question"]))
        answers[qid] = str(q.get("answer", ""))
        gold_docs[qid] = {t for t, _ in q["supporting_facts"]}
        gold_sentences[qid] = {(t, int(i)) for t, i in q["supporting_facts"]}
    return Task(
        name="hotpotqa" if limit is None else f"hotpotqa[:{limit}]",
        corpus=corpus,
        queries=queries,
        gold_docs=gold_docs,
        gold_sentences=gold_sentences,
        answers=answers,
        info={
            "n_queries": len(queries),
            "n_docs": len(corpus),
            "n_gold_docs": sum(map(len, gold_docs.values())),
            "n_gold_sentences": sum(map(len, gold_sentences.values())),
            "skipped": skipped,
            "sha256": {path.name: sha256_file(path)},
        },
    )


# --------------------------------------------------------------------------
# BEIR


def beir_queries(path: str | Path) -> dict[str, str]:
    """A BEIR queries.jsonl: query id -> text, in file order."""
    texts: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                texts[str(rec["_id"])] = rec["text"]
    return texts


def load_beir(folder: str | Path, split: str = "test", limit: int | None = None) -> Task:
    """A BEIR dataset: corpus.jsonl, queries.jsonl, qrels/{split}.tsv.

    Queries are those with judgements in the split, in qrels order; `qrels`
    keeps the grades, `gold_docs` the documents graded >= 1. With `limit` N,
    the first N of those queries; the corpus is unchanged.
    """
    folder = Path(folder)
    corpus_path = folder / "corpus.jsonl"
    queries_path = folder / "queries.jsonl"
    qrels_path = folder / "qrels" / f"{split}.tsv"

    qrels: dict[str, dict[str, int]] = {}
    n_judgements = 0
    with open(qrels_path, encoding="utf-8") as f:
        next(f)  # header: query-id corpus-id score
        for line in f:
            if not line.strip():
                continue
            qid, did, grade = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(grade)
            n_judgements += 1
    if limit is not None:
        qrels = dict(list(qrels.items())[:limit])

    texts = beir_queries(queries_path)
    missing = [q for q in qrels if q not in texts]
    if missing:
        raise ValueError(f"{len(missing)} judged queries not in {queries_path}: {missing[:5]}")

    corpus, skipped = _read_corpus([corpus_path], "beir")
    return Task(
        name=f"beir/{folder.name}/{split}" + ("" if limit is None else f"[:{limit}]"),
        corpus=corpus,
        queries=[Query(q, texts[q]) for q in qrels],
        gold_docs={q: {d for d, g in docs.items() if g >= 1} for q, docs in qrels.items()},
        qrels=qrels,
        info={
            "n_queries": len(qrels),
            "n_docs": len(corpus),
            "n_judgements": sum(map(len, qrels.values())),
            "n_judgements_split": n_judgements,
            "skipped": skipped,
            "sha256": {
                str(p.relative_to(folder)): sha256_file(p)
                for p in (corpus_path, queries_path, qrels_path)
            },
        },
    )


# --------------------------------------------------------------------------
# PropSegment

ENTAILS = "RELATIONSHIP_ENTAILS"


def prop_id(document_id: str, sentence_index: int, token_indices) -> str:
    """Stable corpus id of a proposition: "doc:sentence:t1-t2-..." (sorted)."""
    return f"{document_id}:{sentence_index}:{'-'.join(map(str, sorted(token_indices)))}"


def token_spans(sentence: dict, token_indices) -> tuple[Span, ...]:
    """Character spans of the tokens, merging neighbours separated by spaces only.

    Token i covers [offset, offset + len(text)) of `sentence_text`. Tokens
    that are not neighbours in the sentence (text in between) stay separate.
    """
    offsets = np.array(
        [(t["character_offset_of_token_in_sentence"], t["character_offset_of_token_in_sentence"] + len(t["text"]))
         for t in sentence["tokens"]],
        dtype=np.int64,
    ).reshape(-1, 2)
    return word_spans(sentence["sentence_text"], offsets, token_indices)


def load_propsegment(folder: str | Path, limit: int | None = None) -> Task:
    """PropSegment v1 atomic-fact retrieval (dev relations), Wikipedia only.

    Corpus (propositions of SOURCE_WIKI_CLUSTERS sentences, dev and test):
      - every proposition of the reference segmentation response of every
        sentence with text;
      - every supporting premise proposition of a query not among them (raters
        may pick a premise proposition no segmentation has);
      - every query proposition not among them (a query may come from a
        non-reference segmentation): the query is in the corpus and is then
        excluded from its own ranking only, as in the paper.
      Duplicates (same sentence and token set) are kept once. On v1 this gives
      3,976 + 335 + 10 = 4,321 propositions.
    Queries: dev hypothesis propositions (Wikipedia) for which a relation
      record has a strict majority of its raters marking RELATIONSHIP_ENTAILS
      with a supporting premise proposition (raters who did not understand
      count in the denominator); gold = the supporting premise propositions of
      those entailing raters. A hypothesis with several qualifying records
      (several premise documents) is one query with the union of their gold;
      on v1 every Wikipedia hypothesis has exactly one record, so this choice
      does not change the counts (349 queries). `exclude[q]` = {q}.
    `limit` N keeps the first N queries (file order); the corpus is unchanged.
    """
    folder = Path(folder)
    files = [f"document_clusters.{s}.json" for s in ("dev", "test")]
    files += [f"propositions.{s}.json" for s in ("dev", "test")]
    files += ["relationships.dev.json"]
    data = PropSegment(folder)

    # sentences with text, in file order
    sentences: dict[tuple[str, int], dict] = {}
    for split in ("dev", "test"):
        sentences.update((key, sentence.record) for key, sentence in data.sentences(split).items())

    # per sentence: the propositions in the corpus, as sorted token tuples
    props: dict[tuple[str, int], dict[tuple[int, ...], None]] = {k: {} for k in sentences}
    n_reference = 0
    n_no_reference = 0
    for split in ("dev", "test"):
        for rec in data.segmentations(split):
            sid = rec["sentence_id"]
            key = (str(sid["document_id"]), int(sid["sentence_index"]))
            if key not in sentences:
                continue
            refs = [r for r in rec["segmentation_responses"] if r.get("is_reference_response")]
            if not refs:
                n_no_reference += 1
                continue
            for p in refs[0].get("propositions", []):
                props[key].setdefault(tuple(sorted(p["token_indices"])), None)
                n_reference += 1
    n_reference_distinct = sum(map(len, props.values()))

    # queries from the dev relation records
    gold_keys: dict[tuple, set[tuple]] = {}  # hypothesis -> premise propositions
    n_records = Counter()
    for rec in data.relationships("dev"):
        hyp = rec["hypothesis_proposition"]
        hkey = (str(hyp["document_id"]), int(hyp["sentence_index"]))
        if hkey not in sentences:
            continue  # news cluster: no text
        hprop = hkey + (tuple(sorted(hyp["proposition"]["token_indices"])),)
        n_records[hprop] += 1
        raters = rec["relationship_responses"]
        entailing = [
            r for r in raters
            if r.get("relationship") == ENTAILS and r.get("supporting_premise_proposition")
        ]
        if 2 * len(entailing) <= len(raters):
            continue
        premise_doc = str(rec["premise_document_id"])
        for r in entailing:
            sp = r["supporting_premise_proposition"]
            pkey = (premise_doc, int(sp["sentence_index"]))
            if pkey not in sentences:
                raise ValueError(f"premise sentence {pkey} has no text")
            gold_keys.setdefault(hprop, set()).add(
                pkey + (tuple(sorted(sp["proposition"]["token_indices"])),)
            )

    n_premise_added = n_query_added = 0
    for hprop, gold in gold_keys.items():
        for pkey in sorted(gold):
            if pkey[2] not in props[pkey[:2]]:
                props[pkey[:2]][pkey[2]] = None
                n_premise_added += 1
    for hprop in gold_keys:
        if hprop[2] not in props[hprop[:2]]:
            props[hprop[:2]][hprop[2]] = None
            n_query_added += 1

    # corpus, grouped by sentence in file order
    corpus: list[Document] = []
    by_id: dict[str, Document] = {}
    prop_text: dict[str, str] = {}
    units: dict[str, tuple[str, int]] = {}
    for (doc_id, s_idx), sent in sentences.items():
        text = sent["sentence_text"]
        for toks in props[(doc_id, s_idx)]:
            pid = prop_id(doc_id, s_idx, toks)
            spans = token_spans(sent, toks)
            d = Document(pid, text, sentences=((0, len(text)),), focus=spans)  # PropSegment ids are numbers, not titles
            corpus.append(d)
            by_id[pid] = d
            prop_text[pid] = spans_text(text, spans)
            units[pid] = (doc_id, s_idx)

    queries: list[Query] = []
    gold_docs: dict[str, set[str]] = {}
    gold_sentences: dict[str, set[tuple[str, int]]] = {}
    exclude: dict[str, set[str]] = {}
    for hprop, gold in gold_keys.items():
        qid = prop_id(*hprop)
        queries.append(Query(qid, prop_text[qid], by_id[qid]))
        gold_docs[qid] = {prop_id(*g) for g in gold}
        gold_sentences[qid] = {g[:2] for g in gold}
        exclude[qid] = {qid}
    if limit is not None:
        queries = queries[:limit]
        keep = {q.id for q in queries}
        gold_docs = {q: g for q, g in gold_docs.items() if q in keep}
        gold_sentences = {q: g for q, g in gold_sentences.items() if q in keep}
        exclude = {q: g for q, g in exclude.items() if q in keep}

    return Task(
        name="propsegment" if limit is None else f"propsegment[:{limit}]",
        corpus=corpus,
        queries=queries,
        gold_docs=gold_docs,
        gold_sentences=gold_sentences,
        exclude=exclude,
        prop_text=prop_text,
        units=units,
        info={
            "n_queries": len(queries),
            "n_docs": len(corpus),
            "n_sentences_with_text": len(sentences),
            "n_sentences_without_reference": n_no_reference,
            "n_reference_props": n_reference,
            "n_reference_props_distinct": n_reference_distinct,
            "n_premise_props_added": n_premise_added,
            "n_query_props_added": n_query_added,
            "n_hypotheses_with_records": len(n_records),
            "n_hypotheses_multiple_records": sum(v > 1 for v in n_records.values()),
            "n_gold": sum(map(len, gold_docs.values())),
            "sha256": {name: sha256_file(folder / name) for name in files},
        },
    )
