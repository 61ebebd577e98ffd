"""Binary codes of an encoder's vectors: B bits a vector, one head a bit.

Bit k of a vector x is the sign of head k's score, w_k . x + b_k (the
contrastive-hashing paper's rule: one head, one bit). Every method here is
such a linear map followed by a sign, so they differ only in where the map
comes from:

- `learned`: heads trained over the frozen encoder by `propdex train hashing`
  (contrastive hashing, shipped as weights/hashing-<encoder>-<bits>);
- `untrained`: the same heads at their initialisation, the control;
- `lsh`: random hyperplanes through the origin (Charikar's SimHash);
- `pca`: the top B principal directions of a sample, centred (the
  default: fitted to the corpus it codes, it ranked best on held-out
  questions, eval/notebook/hashing.md); bits beyond the directions a
  sample or a narrow vector has are random hyperplanes through its mean;
- `itq`: PCA, then FAISS's iterative-quantisation rotation (fitted by the
  indexer, which holds FAISS: `indexer.binary`).

A stored vector keeps its code alone. A query keeps its scores: stage 2
scores a query vector against a code asymmetrically, as the cosine of its
B scores with the code's +-1 vector, so no float copy of a document vector
is needed anywhere, and the query loses nothing to its own rounding.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

METHODS = ("learned", "untrained", "lsh", "pca", "itq")
FITTED = ("pca", "itq")  # methods that learn their map from the corpus's own sample, at index time


@dataclass(frozen=True)
class HashCodec:
    """B linear heads over dim-dimensional vectors: `weight` (B, dim), `bias` (B,)."""

    weight: np.ndarray
    bias: np.ndarray
    method: str

    @property
    def bits(self) -> int:
        return int(self.weight.shape[0])

    @property
    def dim(self) -> int:
        return int(self.weight.shape[1])

    @property
    def code_bytes(self) -> int:
        return self.bits // 8

    def scores(self, x: np.ndarray) -> np.ndarray:
        """Each head's score, float32 (n, B). Multiplied by torch, which keeps
        to the process's thread setting: numpy's BLAS splits even a query's
        few rows over every core, and waits for them where they are busy."""
        import torch

        w = torch.from_numpy(np.ascontiguousarray(self.weight, dtype=np.float32))
        out = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)) @ w.T
        return out.add_(torch.from_numpy(np.ascontiguousarray(self.bias, dtype=np.float32))).numpy()

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Packed codes, uint8 (n, B/8): bit k (little-endian within a byte) set where head k scores above 0."""
        return pack(self.scores(x) > 0)

    def query(self, x: np.ndarray) -> np.ndarray:
        """A query vector's side of the asymmetric score: its heads' scores, unit
        length, so that every query vector weighs the same in MaxSim, as the
        cosine of float vectors does."""
        s = self.scores(x)
        return s / np.maximum(np.linalg.norm(s, axis=1, keepdims=True), 1e-12)

    def state(self) -> dict[str, np.ndarray]:
        return {"weight": self.weight, "bias": self.bias}


def pack(bits: np.ndarray) -> np.ndarray:
    """bool (n, B) -> uint8 (n, B/8), bit k of a row in byte k // 8 at position k % 8."""
    return np.packbits(np.ascontiguousarray(bits), axis=1, bitorder="little")


def signs(codes: np.ndarray, bits: int) -> np.ndarray:
    """Packed codes -> float32 (n, B) rows of +-1/sqrt(B): unit vectors whose
    inner product with `HashCodec.query` is the cosine of scores and code.
    Decoded by one gather a byte from a table of the 256 bytes' eight
    values: stage 2 decodes every candidate's rows, and the gather writes
    each float once where unpacking, casting and scaling pass over it thrice."""
    return np.take(sign_table(bits), np.ascontiguousarray(codes), axis=0).reshape(len(codes), bits)


@lru_cache(maxsize=None)
def sign_table(bits: int) -> np.ndarray:
    """(256, 8) float32: the +-1/sqrt(bits) values of a byte's bits, little-endian."""
    out = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little").astype(np.float32)
    out *= 2.0 / np.sqrt(bits)
    out -= 1.0 / np.sqrt(bits)
    out.flags.writeable = False
    return out


def check_bits(bits: int, dim: int | None = None, method: str = "pca") -> None:
    """Bits are whole bytes; ITQ rotates `bits` principal directions, so it has at most `dim`."""
    if bits <= 0 or bits % 8:
        raise ValueError(f"bits must be a positive multiple of 8 (whole bytes a code), got {bits}")
    if dim is not None and method == "itq" and bits > dim:
        raise ValueError(f"hashing={method} keeps at most the vectors' {dim} principal directions; {bits} bits asked")


# -- the maps ------------------------------------------------------------------------
def lsh(dim: int, bits: int, seed: int = 0) -> HashCodec:
    """Random hyperplanes through the origin: vectors are unit length, so the
    share of differing bits estimates their angle (SimHash)."""
    w = np.random.default_rng(seed).standard_normal((bits, dim)).astype(np.float32)
    return HashCodec(w, np.zeros(bits, np.float32), "lsh")


def initial(dim: int, bits: int, seed: int = 0) -> HashCodec:
    """The trained heads' starting point (orthogonal rows, no bias): the
    `untrained` control, and what `propdex train hashing` starts from."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((max(bits, dim), max(bits, dim)))
    q, _ = np.linalg.qr(g)
    return HashCodec(np.ascontiguousarray(q[:bits, :dim], dtype=np.float32), np.zeros(bits, np.float32), "untrained")


def pca(sample: np.ndarray, bits: int, seed: int = 0) -> HashCodec:
    """Signs of the top `bits` principal components of `sample`, centred on
    its mean. A sample has at most min(len - 1, dim) directions with any
    variance: a tiny corpus, or vectors narrower than the code (a 64-d
    proposition under 256 bits), fill the bits left with random hyperplanes
    through the mean, so any corpus and any encoder get a code."""
    dim = sample.shape[1]
    check_bits(bits, dim, "pca")
    mean = sample.mean(0) if len(sample) else np.zeros(dim, np.float32)
    w = np.zeros((0, dim), np.float32)
    if len(sample):
        _, sv, vt = np.linalg.svd(np.asarray(sample - mean, dtype=np.float64), full_matrices=False)
        w = vt[sv > 1e-6 * sv[0]][:bits].astype(np.float32)  # sv falls: the directions with variance, first
    if len(w) < bits:
        w = np.concatenate([w, lsh(dim, bits - len(w), seed).weight])
    return HashCodec(np.ascontiguousarray(w), (-w @ mean).astype(np.float32), "pca")


def learned_name(encoder: str, bits: int) -> str:
    """The packaged weights a `learned` map of `encoder`'s vectors at `bits` is read from."""
    return f"hashing-{encoder}-{bits}"


def load_learned(path: str | Path, encoder_config: dict[str, Any], bits: int) -> tuple[HashCodec, str]:
    """Trained heads and their sha256, refused with one line where they were
    trained for another encoder, backbone or number of bits: codes of vectors
    they were not trained on would be silently poor."""
    from .provenance import read_weights, verified_sha256

    state, config = read_weights(path, "hashing heads", f"train them with `propdex train hashing --encoder "
                                                        f"{encoder_config['name']} --bits {bits}`")
    trained_for = config.get("encoder", {})
    for key in ("name", "backbone", "dim"):
        if trained_for.get(key) != encoder_config.get(key):
            raise ValueError(f"{path}: hashing heads trained for {key}={trained_for.get(key)!r}, this index's encoder has "
                             f"{encoder_config.get(key)!r}; train them for it with `propdex train hashing --encoder "
                             f"{encoder_config['name']} --bits {bits}`")
    codec = HashCodec(state["weight"].float().numpy(), state["bias"].float().numpy(), "learned")
    if codec.bits != bits:
        raise ValueError(f"{path}: hashing heads of {codec.bits} bits, {bits} asked")
    return codec, verified_sha256(path)
