"""Held-out queries for choices made on a scale-curve index (never a reported set's), shared by the notebook's
scripts: sentences of 8-30 words, `per_side` from inside the first `indexed` extract articles (each with its
article's id; from past its 30th sentence, so not the lead a title repeats) and `per_side` from articles after
them (None: the answer is not indexed; none past the extract's last article)."""
import random, re, time
from pathlib import Path
from propdex.eval.scale import first_documents
from propdex.retriever import stage_times

def dev_queries(indexed, per_side=75, seed=7, corpus=Path("../shared/data/wikipedia/extracted")):
    docs = first_documents(corpus, min(6514, max(4 * indexed, 2000)))
    rng = random.Random(seed)
    def sentences(d): return [s for s in re.split(r"(?<=[.!?])\s+", d.text) if 8 <= len(s.split()) <= 30]
    inside = [d for d in docs[:indexed] if len(sentences(d)) > 40]
    queries = [(rng.choice(sentences(d)[30:]), d.id) for d in rng.sample(inside, min(per_side, len(inside)))]
    return queries + [(rng.choice(sentences(d)), None) for d in rng.sample(docs[indexed:], min(per_side, len(docs[indexed:]))) if sentences(d)]


def timed_runs(searcher, queries, nprobe):
    """The top-10 document ids of each query at `nprobe` probes, mean ms a query and mean ms a stage (1 thread)."""
    out = []
    with stage_times() as spent:
        t = time.perf_counter()
        for q, _ in queries:
            out.append([h.doc_id for h in searcher.search(q, k=10, nprobe=nprobe)])
        ms = (time.perf_counter() - t) * 1000 / len(queries)
    return out, round(ms, 1), {k: round(v * 1000 / len(queries), 1) for k, v in spent.items()}


def agreement(base, got, queries):
    """How far the top 10s `got` stand from `base`, query by query: the share of each top 10 they share, how
    often the first document is the same, and [got, base, of] counts of queries with an indexed answer that
    find it in their top 10."""
    gold = [(g in b[:10], g in a[:10]) for (_, g), a, b in zip(queries, base, got) if g]
    return {"top10_overlap": round(float(sum(len(set(a) & set(b)) / max(1, len(a)) for a, b in zip(base, got)) / len(base)), 4),
            "same_first": round(sum(a[:1] == b[:1] for a, b in zip(base, got)) / len(base), 4),
            "gold_in_top10": [sum(x for x, _ in gold), sum(y for _, y in gold), len(gold)]}


def codes_and_tables(store):
    """A codes shard's memory-mapped standalone codes and the CodesDecoder that reads them (its decoder's closure)."""
    if hasattr(store.decoder, "tables"):  # a CodesReader, since codes rows keep their scale
        return store.decoder.codes, store.decoder.tables
    cells = dict(zip(store.decoder.__code__.co_freevars, (c.cell_contents for c in store.decoder.__closure__)))
    return cells["codes"], cells["self"]
