"""`Index.context`'s search (sentence level, fused with BM25, second hop)
with the second hop scoring its documents by the vectors the first hop
encoded (shipped) against encoding the question again (as before: the hop
handed no vectors on), alternated in one process on INDEX, the bench's
first 100 questions, 1 thread, `rounds` times, each credited with its
median round; hits compared.

    python eval/notebook/hop_encoding.py INDEX OUT.json [ROUNDS]
"""
import json, statistics, sys, time
from pathlib import Path

from propdex.encoders import encoder_from_config
from propdex.eval.datasets import load_hotpotqa
from propdex.indexer.manifest import read_manifest
from propdex.retriever import Searcher, stage_times
from propdex.retriever.context import CONTEXT_DEFAULTS
from propdex.retriever.searcher import Searcher as _Searcher

SHIPPED = _Searcher._second_hop


def again(self, query, hits, st, skip, allowed, vectors):
    return SHIPPED(self, query, hits, st, skip, allowed, None)


def main(index: Path, out: str, rounds: int = 3) -> None:
    questions = [q.text for q in load_hotpotqa(Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"), limit=100).queries]
    searcher = Searcher.load(index, encoder=encoder_from_config(read_manifest(index)["encoder"], device="cpu"), threads=1)
    runs, found = {"encoded again": [], "first hop's vectors": []}, {}
    for r in range(rounds):
        for name, hop in (("encoded again", again), ("first hop's vectors", SHIPPED)):
            _Searcher._second_hop = hop
            times, hits = [], []
            with stage_times() as spent:
                for q in questions:
                    t = time.perf_counter()
                    hits.append([(h.doc_id, h.sentence_index, h.hop, round(h.score, 5)) for h in searcher.search(q, k=10, **CONTEXT_DEFAULTS)])
                    times.append((time.perf_counter() - t) * 1000)
            _Searcher._second_hop = SHIPPED
            runs[name].append({"p50": round(statistics.median(times), 1), **{k: round(v * 1000 / len(questions), 2) for k, v in spent.items()}})
            found[name] = hits
            print(r, name, runs[name][-1], flush=True)
    record = {"index": str(index), "questions": len(questions), "search": CONTEXT_DEFAULTS, "rounds": runs,
              "median": {k: {m: statistics.median(x[m] for x in rs) for m in rs[0]} for k, rs in runs.items()},
              "same_hits": sum(a == b for a, b in zip(found["encoded again"], found["first hop's vectors"]))}
    print(json.dumps(record["median"], indent=1), "same hits", record["same_hits"])
    Path(out).write_text(json.dumps(record, indent=1))
    searcher.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:4]))
