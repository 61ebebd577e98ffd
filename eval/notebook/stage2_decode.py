"""Stage 2's decode-and-multiply kernel over a scale-curve index's codes
(`propdex bench --sections scale --scale-sizes 100,1000 --work runs/bench`):
FAISS's `sa_decode` against the table decoder (`CodesDecoder`), each over
all rows at once and a block of rows at a time, through the product's own
`scoring.decoded_similarities`. The rows are windows of 300 consecutive
vectors at random places in the shard, as stage 2 decodes a candidate's hit
windows; 32 random query vectors; 1 thread; mean ms over 20 draws.

    python eval/notebook/stage2_decode.py runs/bench/scale/tokens-1000 33000
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

from propdex.indexer import ann
from propdex.indexer.decoding import CodesDecoder
from propdex.indexer.manifest import read_manifest
from propdex.retriever.scoring import decoded_similarities


def main(path: Path, rows: int, draws: int = 20) -> None:
    torch.set_num_threads(1)
    ann.set_threads(1)
    manifest = read_manifest(path)
    codec = ann.read_faiss(path / manifest["index"]["trained"])
    shard = manifest["shards"][0]
    codes = ann.read_codes(path / shard["name"] / shard["index"])
    norm = manifest["index"].get("vector_norm")
    faiss_rows = ann.scoring_decoder(ann.decoding_codec(codec), codes, norm)[0]
    tables = CodesDecoder(codec, norm).reader(codes)
    rng = np.random.default_rng(0)
    sets = [np.concatenate([np.arange(s, s + 300) for s in rng.integers(0, len(codes) - 300, rows // 300)]) for _ in range(draws)]
    q = np.random.default_rng(1).standard_normal((32, faiss_rows(sets[0][:1]).shape[1])).astype(np.float32)
    assert np.array_equal(decoded_similarities(q, faiss_rows, sets[0]), decoded_similarities(q, tables, sets[0]))
    runs = [("FAISS, all rows", faiss_rows, 1 << 40), ("FAISS, 1,024 a block", faiss_rows, 1024),
            ("tables, all rows", tables, 1 << 40)] + [(f"tables, {b:,} a block", tables, b) for b in (512, 1024, 2048, 4096)]
    print(f"{path.name}: {rows:,} rows a query")
    for name, decode, block in runs:
        start = time.perf_counter()
        for ids in sets:
            decoded_similarities(q, decode, ids, block_rows=block)
        print(f"| {name} | {(time.perf_counter() - start) / draws * 1000:.1f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
