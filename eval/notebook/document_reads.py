"""What a search spends reading documents, shipped against the way it read
them before, alternated in one process on INDEX: the bench's first 100
questions, 1 thread, `rounds` times, each credited with its median round;
outputs compared.

Before (patched back in here): every hit read its document's record again
(a document with several sentence hits was parsed once a hit), fusion and
filters named each candidate by parsing its whole record, and the second hop
scored every one of its k + 1 documents' sentences before placing any.
Shipped: a document is read once a `dense_hits` call, ids come from
`ShardStore.doc_id` (the id alone), and the hop's documents are scored a
batch at a time as its places reach them.

Three searches: `Index.context(words=200)` (sentence level, BM25, second
hop: its defaults), `Index.context`'s search at k=10, and a hybrid
document-level search (k=10).

    python eval/notebook/document_reads.py INDEX OUT.json [ROUNDS]
"""
import json, statistics, sys, time
from pathlib import Path

from propdex.encoders import encoder_from_config
from propdex.eval.datasets import load_hotpotqa
from propdex.indexer.manifest import read_manifest
from propdex.indexer.store import ShardStore
from propdex.retriever import Searcher, fusion, hits, hybrid, searcher as searcher_module
from propdex.retriever.context import CONTEXT_DEFAULTS

SHIPPED = {"doc_id": ShardStore.doc_id, "dense_hits": searcher_module.dense_hits, "hop_order": hybrid.hop_order}


def dense_hits_before(shards, cands, rows, level, window=None):
    return [hits.dense_hit(rank + 1, shards[cands[ci].shard].store, cands[ci], shards[cands[ci].shard].store.document(cands[ci].ordinal),
                           score, None if level == "doc" else (level, j), window) for rank, (score, ci, j) in enumerate(rows)]


BEFORE = {"doc_id": lambda self, o: self.document(o).id, "dense_hits": dense_hits_before,
          "hop_order": lambda first, second, k: fusion.interleave(first, list(second))[:k]}


def use(patches):
    ShardStore.doc_id, searcher_module.dense_hits, hybrid.hop_order = patches["doc_id"], patches["dense_hits"], patches["hop_order"]


def main(index: Path, out: str, rounds: int = 3) -> None:
    questions = [q.text for q in load_hotpotqa(Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"), limit=100).queries]
    searcher = Searcher.load(index, encoder=encoder_from_config(read_manifest(index)["encoder"], device="cpu"), threads=1)
    jobs = {
        "context, 200 words": lambda q: searcher.context(q, words=200).text,
        "context's search, k=10": lambda q: [(h.doc_id, h.sentence_index, h.hop, h.score) for h in searcher.search(q, k=10, **CONTEXT_DEFAULTS)],
        "hybrid, documents, k=10": lambda q: [(h.doc_id, h.score, h.text) for h in searcher.search(q, k=10, hybrid=True)],
    }
    searcher.context(questions[0], words=200)
    runs = {side: {job: [] for job in jobs} for side in ("before", "shipped")}
    found: dict = {}
    for r in range(rounds):
        for side, patches in (("before", BEFORE), ("shipped", SHIPPED)):
            use(patches)
            for job, run in jobs.items():
                times, outputs = [], []
                for q in questions:
                    t = time.perf_counter()
                    outputs.append(run(q))
                    times.append((time.perf_counter() - t) * 1000)
                runs[side][job].append(round(statistics.median(times), 1))
                found[side, job] = outputs
            use(SHIPPED)
            print(r, side, {job: ms[-1] for job, ms in runs[side].items()}, flush=True)
    record = {"index": str(index), "questions": len(questions), "threads": 1, "rounds": runs,
              "p50_ms": {side: {job: statistics.median(ms) for job, ms in r.items()} for side, r in runs.items()},
              "same_outputs": {job: sum(a == b for a, b in zip(found["before", job], found["shipped", job])) for job in jobs}}
    print(json.dumps({k: record[k] for k in ("p50_ms", "same_outputs")}, indent=1))
    Path(out).write_text(json.dumps(record, indent=1))
    searcher.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:4]))
