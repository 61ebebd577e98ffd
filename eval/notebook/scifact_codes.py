"""What the notebook's code-only SciFact measures share (hashing_levels.py, hashing_tuned.py): every stored
vector of a one-shard float16 index, which document each belongs to, the 65,536-vector sample a fitted map is
fitted on (seed 0, as the indexer draws it), and SciFact's train claims encoded by the index's own encoder."""
from pathlib import Path

import numpy as np

from propdex.encoders import encoder_from_config
from propdex.eval.datasets import load_beir
from propdex.eval.metrics import beir_metrics, rank_scores
from propdex.indexer.manifest import read_manifest
from propdex.indexer.store import listed_store


class Claims:
    def __init__(self, index: Path, sample_size: int = 65_536):
        manifest = read_manifest(index)
        [shard] = manifest["shards"]
        store = listed_store(index, shard)
        self.x = np.concatenate([b.astype(np.float16) for b in store.iter_vectors(rows=65_536)])
        self.owner = store.doc_of_vectors(np.arange(len(self.x)))
        self.starts = np.flatnonzero(np.r_[True, self.owner[1:] != self.owner[:-1]])
        self.doc_ids = {o: d for d, o in store.id_ordinals()}
        self.sample = self.x[np.random.default_rng(0).choice(len(self.x), sample_size, replace=False)].astype(np.float32)
        self.task = load_beir("../shared/data/beir/scifact", split="train")
        encoder = encoder_from_config(manifest["encoder"], device="cpu")
        self.queries = [encoder.encode_queries([q.text])[0].vectors.astype(np.float32) for q in self.task.queries]
        print("vectors", len(self.x), "queries", len(self.queries), flush=True)

    def rank(self, doc_side: np.ndarray, query_side) -> dict:
        """BEIR metrics of every document scored by whole-document MaxSim of query_side(claim vectors) against doc_side rows."""
        return self.rank_by(lambda qv: query_side(qv) @ doc_side.T)

    def rank_by(self, similarities) -> dict:
        """BEIR metrics of every document scored by whole-document MaxSim over
        similarities(claim vectors): (query vectors, stored vectors), for codes that decode to more than one product."""
        run = {}
        for q, qv in zip(self.task.queries, self.queries):
            best = np.maximum.reduceat(similarities(qv), self.starts, axis=1).sum(0)
            run[q.id] = rank_scores(self.doc_ids[int(self.owner[self.starts[i]])] for i in np.argsort(-best)[:10])
        return beir_metrics(run, self.task.qrels)
