"""Training a FAISS index on a sample and filling a copy of it with a shard's vectors.

k-means and filling run on the GPU where FAISS sees one; the index that
comes back is always on the CPU, as it is written and searched.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np

from .codes import _four_bit
from .faiss_setup import faiss

# The name the index build has always logged training under.
log = logging.getLogger("propdex.indexer.ann")


def make_index(factory: str, dim: int) -> faiss.Index:
    try:
        return faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise ValueError(f"invalid FAISS factory string {factory!r}: {str(e).splitlines()[0]}") from None


def train(factory: str, sample: np.ndarray, opq_iterations: int | None = None) -> faiss.Index:
    """An empty, trained index; an OPQ rotation is refined `opq_iterations`
    times (None: FAISS's default). k-means runs on the GPU when FAISS sees one."""
    index = make_index(factory, sample.shape[1])
    if index.is_trained:
        return index
    try:
        # Polysemous codes serve Hamming pre-filtering, which search never
        # uses; their simulated annealing was most of IVF-PQ training time.
        faiss.downcast_index(faiss.extract_index_ivf(index)).do_polysemous_training = False
    except (RuntimeError, AttributeError):
        pass
    _rotate_for_the_codes(index)
    if opq_iterations is not None:
        _refine(index, opq_iterations)
    if faiss.get_num_gpus() > 0:
        try:
            # The coarse k-means dominates training; it is the part worth moving.
            ivf = faiss.extract_index_ivf(index)
            ivf.clustering_index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatL2(ivf.d))
            log.info("training the coarse quantizer on %d GPU(s)", faiss.get_num_gpus())
        except RuntimeError:
            log.info("no IVF stage in %s; training on CPU", factory)
    try:
        index.train(np.ascontiguousarray(sample, dtype=np.float32))
    except RuntimeError as e:  # e.g. PQ8 needs 256 training points per sub-quantizer
        detail = next((line for line in str(e).splitlines() if "rror" in line or "should" in line), str(e).splitlines()[0])
        raise ValueError(f"FAISS factory {factory!r} cannot be trained on {len(sample)} vectors ({detail.strip()})") from None
    if faiss.get_num_gpus() > 0:
        try:
            faiss.extract_index_ivf(index).clustering_index = None
        except RuntimeError:
            pass
    return index


def _opq_matrices(index: faiss.Index) -> list[faiss.OPQMatrix]:
    """The OPQ rotations in front of an index (none without a pre-transform)."""
    typed = faiss.downcast_index(index)
    if not isinstance(typed, faiss.IndexPreTransform):
        return []
    chain = [faiss.downcast_VectorTransform(typed.chain.at(i)) for i in range(typed.chain.size())]
    return [t for t in chain if isinstance(t, faiss.OPQMatrix)]


def _rotate_for_the_codes(index: faiss.Index) -> None:
    """An OPQ rotation in front of 4-bit PQ codes is trained for them: FAISS
    trains it against 8-bit codes of as many sub-quantizers unless given the
    PQ to train against, at 16 times the centroids each."""
    typed = faiss.downcast_index(index)
    opqs = _opq_matrices(index)
    if len(opqs) != 1 or typed.chain.size() != 1:
        return
    opq, inner = opqs[0], faiss.downcast_index(typed.index)
    if _four_bit(inner) and opq.M == inner.pq.M:
        target = faiss.ProductQuantizer(opq.d_out, opq.M, 4)
        opq.pq = target
        opq.referenced_objects = [target]  # OPQMatrix keeps a raw pointer


def _refine(index: faiss.Index, iterations: int) -> None:
    """Refine the OPQ rotations in front of the index `iterations` times."""
    for opq in _opq_matrices(index):
        opq.niter = iterations


def fill(trained: faiss.Index, chunks: Iterable[np.ndarray]) -> faiss.Index:
    """A copy of `trained` holding the chunks' vectors with ids 0..N-1 in order."""
    index = faiss.clone_index(trained)
    gpu = None
    if faiss.get_num_gpus() > 0:
        try:
            gpu = faiss.index_cpu_to_all_gpus(index)
        except RuntimeError:
            gpu = None
    for chunk in chunks:
        (gpu or index).add(np.ascontiguousarray(chunk, dtype=np.float32))
    return faiss.index_gpu_to_cpu(gpu) if gpu is not None else index
