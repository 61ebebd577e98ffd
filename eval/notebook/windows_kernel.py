"""Stage 2's window bookkeeping alone, as it runs for one shard's candidates:
the sentence windows of 32 documents and the units of the windows a query's
hits fell in (40 hits a document at random units), ms per 32 documents, the
median of 50 rounds over 20 draws of documents. Run it at two commits on one
index to compare how they do it (before `sentence_windows_of`, a document at a time).

    python eval/notebook/windows_kernel.py runs/bench/scale/tokens-1000
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from propdex.indexer.manifest import read_manifest
from propdex.retriever import rescoring, scoring
from propdex.retriever.loading import open_shards


def main(index: Path, window: int = 254, docs: int = 32) -> None:
    shards = open_shards(index, read_manifest(index), False, None)
    store = shards[0].store
    rng = np.random.default_rng(0)
    batched = hasattr(scoring, "sentence_windows_of")
    times = []
    for _ in range(20):
        sentences = store.unit_sentences(rng.choice(len(store), docs, replace=False).tolist())
        hits = [rng.integers(0, len(s), 40) for s in sentences]
        for _ in range(50):
            start = time.perf_counter()
            if batched:
                windows = scoring.sentence_windows_of(sentences, window)
                [rescoring.hit_windows(w, h) for w, h in zip(windows, hits)]
            else:
                windows = [scoring.sentence_windows(s, window) for s in sentences]
                [rescoring.hit_windows(w[0], h) for w, h in zip(windows, hits)]
            times.append(time.perf_counter() - start)
    units = sum(len(s) for s in sentences) / docs
    print(f"{'batched' if batched else 'per document'}: {np.median(times) * 1000:.2f} ms for {docs} documents "
          f"(last draw {units:.0f} units a document)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
