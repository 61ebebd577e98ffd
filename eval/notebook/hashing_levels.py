"""Where do 16 bytes of PCA code buy most: 128 signs, or two-bit levels on fewer directions? SciFact train claims.

Codes only, no stage 1: every document of SciFact is scored by MaxSim of the
float query against the reconstructed codes of all its token vectors, so the
figure is the code's own quality, beside exact float32 MaxSim over the same
stored vectors (the float16 copy of `tokens`, runs/index/.../tokens-store-float16).
PCA is fitted on 65,536 random stored vectors. A direction kept at two bits
holds a thermometer level (00, 01, 11: Hamming distance between two codes is
still the L1 distance of their levels, so FAISS's binary indexes still rank
them) cut at +-0.612 of the direction's deviation, the Lloyd-Max cut of a
Gaussian into three; it decodes to the sample's mean score in its level. A
sign decodes to +-1 (`equal`, the shipped rule: query scores of unit length)
or to the mean |score| (`ls`).
Usage: PYTHONPATH=eval/notebook python eval/notebook/hashing_levels.py runs/index/beir-scifact-test-faf043e4089d/tokens-store-float16 OUT.json
"""
import json
import sys
from pathlib import Path

import numpy as np

from scifact_codes import Claims

index, out = Path(sys.argv[1]), Path(sys.argv[2])
claims = Claims(index)
x, sample = claims.x, claims.sample
mean = sample.mean(0)
_, _, vt = np.linalg.svd(sample - mean, full_matrices=False)
rank = claims.rank


def scores_of(directions: int) -> np.ndarray:
    return np.concatenate([(b.astype(np.float32) - mean) @ vt[:directions].T for b in np.array_split(x, 64)])


def levels(s: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """-1, 0, +1: below -0.612 sd, between, above."""
    return (s > 0.612 * sd).astype(np.int8) - (s < -0.612 * sd).astype(np.int8)


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


results = {}
s128 = scores_of(128)
sd = s128[np.random.default_rng(1).choice(len(x), 65_536, replace=False)].std(0)
def project(d):
    return lambda qv: qv @ vt[:d].T
signs = np.sign(s128).astype(np.float32)
results["sign128 equal"] = rank(signs, lambda qv: unit(project(128)(qv)))
magnitude = np.abs(s128).mean(0)
results["sign128 ls"] = rank(signs * magnitude, project(128))
for two in (32, 64):
    ones = 128 - 2 * two
    lv = levels(s128[:, :two], sd[:two])
    value = np.zeros((3, two), np.float32)
    for k, level in enumerate((-1, 0, 1)):
        m = lv == level
        value[k] = np.where(m, s128[:, :two], 0).sum(0) / np.maximum(m.sum(0), 1)
    decoded = np.take_along_axis(value, lv.astype(np.int64) + 1, 0)
    doc = np.concatenate([decoded, signs[:, two:two + ones] * magnitude[two:two + ones]], axis=1)
    results[f"{two} dirs x 2 bits + {ones} signs"] = rank(doc, project(two + ones))
    print(results, flush=True)
del s128, signs
results["float32 exact"] = rank(x.astype(np.float32), lambda qv: qv)
print(json.dumps({k: round(100 * v["nDCG@10"], 2) for k, v in results.items()}, indent=1))
out.write_text(json.dumps({"command": " ".join(sys.argv), "nDCG@10": {k: round(100 * v["nDCG@10"], 2) for k, v in results.items()}}, indent=1))
