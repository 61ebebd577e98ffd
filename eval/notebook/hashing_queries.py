"""Which binary map, and which asymmetric score, keeps float MaxSim's ranking of passages for queries?
Held-out Wikipedia only (files 70-99; the shipped heads trained on 0-69): `docs` passages of about 120
words with their titles, and `queries` sentences of 8-30 words from other held-out passages. For each
query, the passages ranked by exact float32 MaxSim against the ranking under each map's codes; the
figure is the share of the float top 10 that the codes' top 10 keep (and the top 1).

Scores of a float query vector q against a code b (B bits) compared:
- `cos` (shipped): cos(W q + c, b), the query's head scores centred by the heads' bias.
- `ip`: (W q) . (a * b), the inner product with the code's least-squares reconstruction around the
  sample mean, a_k = mean |w_k x + c_k| over the sample: q . x ~ q . mean + sum_k (w_k q) a_k b_k, and
  q . mean is the same for every passage, so MaxSim ranks by the sum alone (W with orthonormal rows:
  pca, itq; for other maps it is the estimate their heads would give if they were).
Usage: python eval/notebook/hashing_queries.py tokens|nugget [docs] [queries]
"""
import json
import sys
import time

import numpy as np

from propdex.encoders import Document, load_encoder, weights_path
from propdex.encoders.hashing import initial, load_learned, lsh, pca, signs
from propdex.encoders.training.data import WIKI_EXTRACTED, packed_sentences, wiki_sample
from propdex.encoders.text import split_sentences
from propdex.encoders.units import Passage
from propdex.indexer.binary import fit_itq


def held_out(n_docs, n_queries):
    chunks = wiki_sample(WIKI_EXTRACTED, "heldout", n_docs + n_queries, lambda text, title: [
        (title, c) for c in packed_sentences(text, 120) if len(c.split()) >= 40], seed=11)
    docs = [Document(f"d{i}", text, title) for i, (title, text) in enumerate(chunks[:n_docs])]
    rng = np.random.default_rng(3)
    queries = []
    for title, text in chunks[n_docs:]:
        sents = [text[a:b] for a, b in split_sentences(text) if 8 <= len(text[a:b].split()) <= 30]
        if sents:
            queries.append(sents[rng.integers(len(sents))])
    return docs, queries


def maxsim(scores, starts):
    """MaxSim of every passage for each query: `scores` a list of (m, N) arrays, a query's vectors against
    every stored vector, stored vectors grouped by passage from `starts`."""
    return np.stack([np.maximum.reduceat(s, starts, axis=1).sum(0) for s in scores])


def agreement(exact, approx, k=10):
    te = np.argsort(-exact, 1)[:, :k]
    ta = np.argsort(-approx, 1)[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(te.tolist(), ta.tolist())])), float(np.mean(te[:, 0] == ta[:, 0]))


def main(encoder_name="tokens", n_docs=1500, n_queries=300):
    t0 = time.time()
    docs, queries = held_out(int(n_docs), int(n_queries))
    enc = load_encoder(encoder_name)
    encoded = enc.encode([Passage(d, 0, len(d.text), 0) for d in docs])
    dv = np.concatenate([e.vectors for e in encoded]).astype(np.float32)
    starts = np.cumsum([0] + [len(e.vectors) for e in encoded[:-1]])
    qenc = enc.encode_queries(queries)
    print(f"{encoder_name}: {len(docs)} passages, {len(dv)} vectors, {len(queries)} queries, encoded in {time.time() - t0:.0f} s")
    exact = maxsim([q.vectors @ dv.T for q in qenc], starts)
    sample = dv[np.random.default_rng(0).choice(len(dv), size=min(len(dv), 65_536), replace=False)]
    rows = []
    for bits in (128, 256):
        path = weights_path(f"hashing-{encoder_name}-{bits}")
        config = json.loads((path / "config.json").read_text())["encoder"]
        codecs = {"learned": load_learned(path, config, bits)[0], "untrained": initial(dv.shape[1], bits), "lsh": lsh(dv.shape[1], bits),
                  "pca": pca(sample, bits), "itq": fit_itq(sample, bits)}
        for name, codec in codecs.items():
            code = signs(codec.encode(dv), bits)
            scale = np.abs(codec.scores(sample)).mean(0)
            res = {}
            for score in ("cos", "ip"):
                side = (lambda v: codec.query(v)) if score == "cos" else (lambda v: (v @ codec.weight.T) * scale)
                qs = (side(q.vectors) @ code.T for q in qenc)
                res[score] = agreement(exact, maxsim(qs, starts))
            rows.append((bits, name, res))
            print(f"| {encoder_name} | {bits} | {name} | " + " | ".join(f"{res[s][0]:.3f} / {res[s][1]:.3f}" for s in ("cos", "ip")) + " |", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
