"""Stage 1 over the first half of each code: the in-memory stage-1 index
rebuilt at load from the leading sub-quantizers of the stored codes only
(M/2 of OPQ's M, the first half of the rotated dimensions), scored as
q.c (the full coarse score from the shared assignment) + the partial
residual's product. Stage 1 streams every probed list's codes from memory,
so half the bytes should be about half the time; stage 2 still decodes
the full codes. Compared with today's stage 1 on the dev queries:

    PYTHONPATH=eval/notebook python eval/notebook/stage1_half_codes.py INDEX INDEXED OUT.json 48,72
"""
import json, sys
from pathlib import Path

import numpy as np

from dev_queries import agreement, codes_and_tables, dev_queries, timed_runs
from propdex.encoders import encoder_from_config
from propdex.indexer import ann, codes as codes_module
from propdex.indexer.faiss_setup import faiss
from propdex.indexer.manifest import read_manifest
from propdex.retriever import Searcher

ORIGINAL = ann.search_assigned


def sliced(index, assigned, k, allowed=None):
    """search_assigned with the mapped queries cut to the index's width."""
    d = faiss.extract_index_ivf(index).d
    if d < assigned.mapped.shape[1]:
        assigned = ann.Assignment(np.ascontiguousarray(assigned.mapped[:, :d]), assigned.lists, assigned.distances)
    return ORIGINAL(index, assigned, k, allowed)


def half_index(codec, codes, keep_bytes):
    """A fast-scan IVF-PQ over the first `keep_bytes` bytes of each code (2 sub-quantizers a byte)."""
    typed = faiss.downcast_index(codec)
    full = faiss.downcast_index(typed.index)
    m = 2 * keep_bytes
    dsub = full.pq.dsub
    d = m * dsub
    quantizer = faiss.IndexFlatIP(d)
    quantizer.add(np.zeros((full.nlist, d), np.float32))
    ivf = faiss.IndexIVFPQ(quantizer, d, full.nlist, m, 4, faiss.METRIC_INNER_PRODUCT)
    ivf.by_residual, ivf.is_trained = True, True
    book = faiss.vector_to_array(full.pq.centroids).reshape(full.pq.M, full.pq.ksub, dsub)[:m]
    faiss.copy_array_to_vector(np.ascontiguousarray(book).ravel(), ivf.pq.centroids)
    lb = codes.shape[1] - full.pq.code_size
    part = np.ascontiguousarray(codes[:, : lb + keep_bytes])
    if lb != int(ivf.coarse_code_size()):
        raise SystemExit("list bytes differ")
    codes_module._fill(ivf, part, 1 << 16)
    fast = codes_module.fast_scan(ivf)
    fast.referenced_objects = [*getattr(fast, "referenced_objects", ()), quantizer]
    return fast


def main(index, indexed, out, keeps):
    queries = dev_queries(indexed)
    encoder = encoder_from_config(read_manifest(index)["encoder"], device="cpu")
    record = {"index": str(index), "queries": len(queries), "runs": {}}
    with Searcher.load(index, encoder=encoder, threads=1) as searcher:
        searcher.search(queries[0][0], k=10)
        base, ms, stages = timed_runs(searcher, queries, None)
        record["runs"]["full codes"] = {"ms": ms, "stages": stages}
        print(record["runs"]["full codes"], flush=True)
        originals = [s.index for s in searcher.shards]
        for keep in keeps:
            for s in searcher.shards:
                s.index = half_index(s.codec, codes_and_tables(s.store)[0], keep)
            ann.search_assigned = sliced
            got, ms, stages = timed_runs(searcher, queries, None)
            ann.search_assigned = ORIGINAL
            for s, o in zip(searcher.shards, originals):
                s.index = o
            record["runs"][f"{keep} bytes"] = {"ms": ms, "stages": stages, **agreement(base, got, queries)}
            print(keep, record["runs"][f"{keep} bytes"], flush=True)
    Path(out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], [int(x) for x in sys.argv[4].split(",")])
