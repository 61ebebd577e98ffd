"""Do 128 bits buy more as the residual of a float centroid (PLAID's and RaBitQ's layout) than as the vector's own signs?
SciFact train claims, codes only.

Codes only, no stage 1, as hashing_levels.py measures: every SciFact document
scored by whole-document MaxSim of the float train claims against what the
codes of its token vectors decode to (the float16 copy of `tokens`). Fitted on
random stored vectors (seed 0), as the indexer samples them:

- signs: 128 signs of the vectors' top PCA directions, the query's scores on
  those directions at unit length against the +-1 code (the shipped rule);
- centroid: only the nearest of K k-means centroids (log2 K bits a vector);
- centroid + residual signs: the centroid plus 128 signs of the residual's top
  PCA directions (fitted on the sample's residuals), each decoded to its
  direction's mean |residual score| (least squares); `unit`: that vector
  scaled to unit length, as the codes store scales what it decodes.

Usage: PYTHONPATH=eval/notebook python eval/notebook/hashing_residual.py INDEX OUT.json K[,K...]
"""
import json
import sys
from pathlib import Path

import faiss
import numpy as np

from scifact_codes import Claims

BITS = 128
index, out, ks = Path(sys.argv[1]), Path(sys.argv[2]), [int(k) for k in sys.argv[3].split(",")]
claims = Claims(index)
x, sample = claims.x, claims.sample
rng = np.random.default_rng(0)


def ranked(similarities) -> float:
    """nDCG@10 of whole-document MaxSim over similarities(claim vectors)."""
    return round(100 * claims.rank_by(similarities)["nDCG@10"], 2)


def pca(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = rows.mean(0)
    return mean, np.linalg.svd(rows - mean, full_matrices=False)[2][:BITS]


def blocks(fn, n: int = 64) -> np.ndarray:
    return np.concatenate([fn(b.astype(np.float32)) for b in np.array_split(x, n)])


results = {}
mean, vt = pca(sample)
signs = blocks(lambda b: np.sign((b - mean) @ vt.T)).astype(np.float32)
results["128 signs (shipped rule)"] = ranked(lambda qv: (lambda p: p / np.linalg.norm(p, axis=1, keepdims=True))(qv @ vt.T) @ signs.T)
print(results, flush=True)

for k in ks:
    train = x[rng.choice(len(x), min(len(x), 64 * k), replace=False)].astype(np.float32)
    km = faiss.Kmeans(x.shape[1], k, niter=20, seed=1, spherical=False)
    km.train(train)
    _, a = km.index.search(np.ascontiguousarray(sample), 1)
    c = km.centroids
    r_mean, r_vt = pca(sample - c[a[:, 0]])
    assign = blocks(lambda b: km.index.search(np.ascontiguousarray(b), 1)[1][:, 0])
    res = np.empty((len(x), BITS), np.float32)
    for idx in np.array_split(np.arange(len(x)), 64):
        res[idx] = (x[idx].astype(np.float32) - c[assign[idx]] - r_mean) @ r_vt.T
    magnitude = np.abs(res).mean(0)
    code = np.sign(res) * magnitude  # decoded residual in PCA coordinates
    base = c + r_mean  # the residual's mean rides with every centroid
    results[f"centroid only, K={k}"] = ranked(lambda qv: (qv @ c.T)[:, assign])
    results[f"centroid + residual signs, K={k}"] = ranked(lambda qv: (qv @ base.T)[:, assign] + (qv @ r_vt.T) @ code.T)
    # |decoded|^2 = |base|^2 + 2 base.(V^T code) + |code|^2 (V orthonormal)
    length = np.sqrt((base ** 2).sum(1)[assign] + 2 * np.einsum("nb,nb->n", (base @ r_vt.T)[assign], code) + (code ** 2).sum(1))
    results[f"centroid + residual signs, unit, K={k}"] = ranked(lambda qv: ((qv @ base.T)[:, assign] + (qv @ r_vt.T) @ code.T) / length)
    print(results, flush=True)

xf = x.astype(np.float32)
results["float32 exact"] = ranked(lambda qv: qv @ xf.T)
print(json.dumps(results, indent=1))
out.write_text(json.dumps({"command": " ".join(sys.argv), "nDCG@10": results}, indent=1))
