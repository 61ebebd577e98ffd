"""The fast-plaid side of `propdex bench --peers fast-plaid`, run by the peer's own Python.

fast-plaid pins torch==2.11.0, so it lives in an environment of its own
(`--fast-plaid-python`), one that has neither propdex nor FAISS. This
script is that environment's whole share of the bench, and it imports
nothing but numpy, torch and fast_plaid: propdex writes the vectors, runs
`python fast_plaid_peer.py FOLDER` and reads back what it measured.

FOLDER holds, written by eval.peers:
- documents.npy: every document's token vectors, float16, one row each,
  documents one after another; doclens.npy: their row counts (int64);
- queries.npy, qlens.npy: the queries' token vectors, the same way;
- settings.json: {"device", "threads", "k", "nbits", "n_ivf_probe", "n_full_scores"}.

It builds a fast-plaid index of the documents under FOLDER/index (its own
k-means, its own residual codec), then searches one query at a time, and
writes FOLDER/result.json: the passage ids and scores of each query's top
k, milliseconds per query (search alone), build seconds, index bytes,
peak resident memory (and the GPU's peak allocation) and the versions and device it ran on.
"""
from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np


def split(rows: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """`rows` cut into consecutive pieces of `lengths` rows."""
    return np.split(rows, np.cumsum(lengths)[:-1])


def main(folder: Path) -> None:
    import fast_plaid
    import torch
    from fast_plaid import search

    settings = json.loads((folder / "settings.json").read_text())
    torch.set_num_threads(settings["threads"])
    device = settings["device"]
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    # fast-plaid's search casts queries and centroids to float16 itself; documents go in as float16 on a GPU
    # and as float32 on a CPU, the dtype its own k-means picks there.
    dtype = np.float16 if device.startswith("cuda") else np.float32

    def tensors(rows: str, lengths: str) -> list[torch.Tensor]:
        return [torch.from_numpy(np.array(piece, dtype=dtype))  # a copy: the memory map is read-only
                for piece in split(np.load(folder / rows, mmap_mode="r"), np.load(folder / lengths))]

    docs, queries = tensors("documents.npy", "doclens.npy"), tensors("queries.npy", "qlens.npy")

    index = folder / "index"
    started = time.perf_counter()
    plaid = search.FastPlaid(index=str(index), device=device)
    # start_from_scratch=0: below that many documents fast-plaid also keeps a float32 copy for later
    # rebuilds, which search never reads and which would count against its bytes a vector.
    plaid.create(documents_embeddings=docs, nbits=settings["nbits"], start_from_scratch=0)
    sync(device)
    build_s = time.perf_counter() - started
    del docs

    def one(q: torch.Tensor) -> list[tuple[int, float]]:
        hits = plaid.search(queries_embeddings=q.unsqueeze(0), top_k=settings["k"], n_ivf_probe=settings["n_ivf_probe"],
                            n_full_scores=settings["n_full_scores"], show_progress=False)[0]
        sync(device)
        return hits

    one(queries[0])  # load the index onto the device and the kernels once
    ranked, ms = [], []
    for q in queries:
        started = time.perf_counter()
        hits = one(q)
        ms.append((time.perf_counter() - started) * 1000)
        ranked.append([[int(p), float(s)] for p, s in hits])
    (folder / "result.json").write_text(json.dumps({
        "ranked": ranked, "search_ms": ms, "build_s": round(build_s, 3),
        "index_bytes": sum(f.stat().st_size for f in index.rglob("*") if f.is_file()),
        "peak_rss_mb": peak_rss_mb(),
        "gpu_peak_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1) if device.startswith("cuda") else None,
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu", "dtype": np.dtype(dtype).name,
        "versions": {"fast_plaid": getattr(fast_plaid, "__version__", None) or _version("fast-plaid"), "torch": torch.__version__},
    }))


def peak_rss_mb() -> float:
    """This process's own peak resident memory (VmHWM), as propdex.indexer.build
    measures it (this script imports no propdex): ru_maxrss would report
    the bench's peak at the spawn, which it inherits through fork and exec."""
    try:
        with open("/proc/self/status") as status:
            return round(int(next(line for line in status if line.startswith("VmHWM:")).split()[1]) / 1024, 1)
    except (OSError, StopIteration):
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def sync(device: str) -> None:
    """Wait for the device, so that a timing covers the work and not its launch."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main(Path(sys.argv[1]))
