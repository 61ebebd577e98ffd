"""Held-out queries for choices made on a scale-curve index (never a reported set's), shared by the notebook's
scripts: sentences of 8-30 words, `per_side` from inside the first `indexed` extract articles (each with its
article's id; from past its 30th sentence, so not the lead a title repeats) and `per_side` from articles after
them (None: the answer is not indexed)."""
import random, re
from pathlib import Path
from propdex.eval.scale import first_documents

def dev_queries(indexed, per_side=75, seed=7, corpus=Path("../shared/data/wikipedia/extracted")):
    docs = first_documents(corpus, min(6514, max(4 * indexed, 2000)))
    rng = random.Random(seed)
    def sentences(d): return [s for s in re.split(r"(?<=[.!?])\s+", d.text) if 8 <= len(s.split()) <= 30]
    inside = [d for d in docs[:indexed] if len(sentences(d)) > 40]
    queries = [(rng.choice(sentences(d)[30:]), d.id) for d in rng.sample(inside, min(per_side, len(inside)))]
    return queries + [(rng.choice(sentences(d)), None) for d in rng.sample(docs[indexed:], per_side) if sentences(d)]
