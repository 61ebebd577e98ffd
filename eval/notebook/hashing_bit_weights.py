"""Does weighting each bit by its head's spread help stage 2 of pca codes? SciFact train claims, nDCG@10.

Stage 2 scores a query vector against a code as the cosine of the query's
head scores with the code's +-1 vector: every bit weighs the same. A PCA
head's scores spread as the corpus varies along its direction, so the
least-squares decoding of bit k is s_k = mean |score_k| times its sign. This
re-runs the product's eval over a cached `hashing=pca` index (built by the
`--split train` run in hashing.md) with the query's scores multiplied by
s ** POWER before their norm (0: the shipped rule; 1: least-squares
decoding; -1: whitened), s measured on 400 random documents' vectors.
Usage: python eval/notebook/hashing_bit_weights.py SPEC INDEX_DIR OUT.json POWER
"""
import random
import sys
from pathlib import Path

import numpy as np

from propdex.cli import main
from propdex.encoders import encoder_from_config, hashing
from propdex.eval.datasets import load_beir
from propdex.indexer.binary import read_codec
from propdex.indexer.manifest import read_manifest

spec, index, out, power = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
if power:
    codec = read_codec(Path(index) / "trained.hashing").hashing
    encoder = encoder_from_config(read_manifest(Path(index))["encoder"], device="cpu")
    docs = random.Random(0).sample(list(load_beir("../shared/data/beir/scifact", split="train").corpus), 400)
    vectors = np.concatenate([e.vectors for e in encoder.encode([p for ps in encoder.cut(docs) for p in ps])])
    weight = np.abs(codec.scores(vectors)).mean(0) ** power

    def query(self, x):
        q = self.scores(x) * weight
        return q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)

    hashing.HashCodec.query = query
sys.exit(main(["-q", "eval", "beir", "../shared/data/beir/scifact", "--split", "train", "--systems", spec, "--out", out]))
