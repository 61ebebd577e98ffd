"""Does a per-vector scale help binary codes? Held-out Wikipedia neighbour recall@10.

Stage 2 scores a float query against a code as the cosine of the query's head
scores with the code's +-1 vector. Two corrections that store one number a
vector beside the code were tried here, on the held-out vectors that
`propdex train hashing --cache runs/hashing/cache` encoded (wiki_70..99):
- `l1`: the code's least-squares length, |h(x)|_1 / B (h(x) ~ that * sign(h(x)));
- `rabitq`: RaBitQ's unbiased estimate, <q, sign> * |h(x)| / cos(h(x), sign).
Usage: python eval/notebook/hashing_scale.py runs/hashing/cache/hashing-<key>.npz ENCODER
"""
import json
import sys

import numpy as np

from propdex.encoders import weights_path
from propdex.encoders.hashing import load_learned, lsh, pca, signs
from propdex.indexer.binary import fit_itq


def recall(codec, vectors, scale, anchors=1000, k=10):
    a = np.random.default_rng(0).choice(len(vectors), size=min(anchors, len(vectors)), replace=False)
    exact = vectors[a] @ vectors.T
    h = codec.scores(vectors)
    code = signs(codec.encode(vectors), codec.bits)
    approx = codec.query(vectors[a]) @ code.T
    if scale == "l1":
        approx *= (np.abs(h).sum(1) / codec.bits)[None, :]
    elif scale == "rabitq":
        cos = ((h / np.linalg.norm(h, axis=1, keepdims=True)) * code).sum(1)
        approx *= (np.linalg.norm(h, axis=1) / cos)[None, :]
    exact[np.arange(len(a)), a] = approx[np.arange(len(a)), a] = -np.inf
    top_exact = np.argpartition(-exact, k, axis=1)[:, :k]
    top_approx = np.argpartition(-approx, k, axis=1)[:, :k]
    return float(np.mean([len(set(e) & set(p)) / k for e, p in zip(top_exact.tolist(), top_approx.tolist())]))


def main(cache: str, encoder: str) -> None:
    with np.load(cache) as f:
        train, heldout = f["x0"], f["h0"]
    sample = train[np.random.default_rng(0).choice(len(train), size=min(len(train), 65_536), replace=False)]
    for bits in (128, 256):
        path = weights_path(f"hashing-{encoder}-{bits}")
        config = json.loads((path / "config.json").read_text())["encoder"]
        codecs = {"learned": load_learned(path, config, bits)[0], "itq": fit_itq(sample, bits), "pca": pca(sample, bits),
                  "lsh": lsh(train.shape[1], bits)}
        for name, codec in codecs.items():
            print(f"| {encoder}, {bits} bits | {name} | " + " | ".join(f"{recall(codec, heldout, s):.3f}" for s in ("none", "l1", "rabitq")) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
