"""How a BM25 hit finds the sentence to show (the one holding the most
distinct query terms): stemming every word of the document, as it did
before (`before` below, the earlier code kept here), against today's
`hits.lexical_hit` (distinct words, only those that can stem to a query
term, each stemmed once). Both answer the bench's first 100 questions on
INDEX, alternated in one process, 1 thread, `rounds` times, each credited
with its median round: BM25 alone, and `Index.context`'s default search
(sentence level, fused with BM25, with the second hop, whose documents are
BM25 hits too). The hits of both are compared.

    python eval/notebook/bm25_hits.py INDEX OUT.json [ROUNDS]
"""
import json, statistics, sys, time
from pathlib import Path

from propdex.encoders import encoder_from_config
from propdex.eval.datasets import load_hotpotqa
from propdex.indexer import lexical
from propdex.indexer.manifest import read_manifest
from propdex.retriever import Searcher, hybrid
from propdex.retriever.context import CONTEXT_DEFAULTS
from propdex.retriever.hits import Hit, lexical_passage, passage_text, sentences_of

SHIPPED = hybrid.lexical_hit


def before(rank, doc, score, terms):
    sentences = sentences_of(doc)
    best, best_spans, best_n = 0, [], -1
    for i, (a, b) in enumerate(sentences):
        spans = [(m.start(), m.end()) for m in lexical.WORDS.finditer(doc.text[a:b]) if set(lexical.analyze(m.group())) & terms]
        n = len({doc.text[a + x:a + y].lower() for x, y in spans})
        if n > best_n:
            best, best_spans, best_n = i, spans, n
    a, b = sentences[best]
    passage = lexical_passage(doc, best)
    return Hit(rank, doc.id, doc.title, score, best, doc.text[a:b], best_spans, text=passage_text(doc, *passage),
               metadata=dict(doc.metadata), passage=passage, document=doc)


def main(index: Path, out: str, rounds: int = 3) -> None:
    questions = [q.text for q in load_hotpotqa(Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"), limit=100).queries]
    searcher = Searcher.load(index, encoder=encoder_from_config(read_manifest(index)["encoder"], device="cpu"), threads=1)
    searches = {"bm25 alone": {"bm25": True}, "context's search": dict(CONTEXT_DEFAULTS)}
    runs = {(s, v): [] for s in searches for v in ("before", "today")}
    found = {}
    for r in range(rounds):
        for s, options in searches.items():
            for version, fn in (("before", before), ("today", SHIPPED)):
                hybrid.lexical_hit = fn
                times, hits = [], []
                for q in questions:
                    t = time.perf_counter()
                    hits.append([(h.doc_id, h.sentence_index, h.spans, h.hop) for h in searcher.search(q, k=10, **options)])
                    times.append((time.perf_counter() - t) * 1000)
                hybrid.lexical_hit = SHIPPED
                runs[s, version].append(statistics.median(times))
                found[s, version] = hits
                print(r, s, version, round(runs[s, version][-1], 1), flush=True)
    record = {"index": str(index), "questions": len(questions), "rounds": rounds,
              "p50": {f"{s}, {v}": round(statistics.median(x), 1) for (s, v), x in runs.items()},
              "same_hits": {s: sum(a == b for a, b in zip(found[s, "before"], found[s, "today"])) for s in searches}}
    print(json.dumps(record, indent=1))
    Path(out).write_text(json.dumps(record, indent=1))
    searcher.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:4]))
