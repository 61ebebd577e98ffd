"""How the bench times a system, the same way for propdex and every peer.

Each system runs in a fresh interpreter (in_child) with the same threads, so
that its peak resident memory is its own and no peer's threads or
extensions reach the next system. Each query is timed alone after one
warm-up query, and quality is nDCG@10 of the order returned.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from .metrics import beir_metrics, rank_scores


def thread_env(threads: int, *more: str) -> dict[str, str]:
    """This process's environment with OpenMP's and the BLAS libraries' threads (and `more` variables) set to `threads`."""
    return os.environ | {var: str(threads) for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", *more)}


def in_child(fn: Callable[..., dict[str, Any]], **kwargs) -> dict[str, Any]:
    """`fn(**kwargs)` (a module-level function) in a fresh interpreter: its
    peak RSS is its own, and no peer's threads or extensions reach the next system."""
    name = fn.__name__
    code = f"import json, sys; from {fn.__module__} import {name}; print(json.dumps({name}(**json.load(sys.stdin))))"
    # numpy's BLAS (stage 2's products, the exact scan) spawns a thread per core unless told before it loads.
    env = thread_env(kwargs["threads"])
    code, stdout, error = run_child([sys.executable, "-c", code], json.dumps(kwargs), env)
    if code:
        raise RuntimeError(f"bench: {name} failed (exit {code}): {error}")
    return json.loads(stdout.strip().splitlines()[-1])


def run_child(command: list[str], stdin: str | None, env: dict[str, str]) -> tuple[int, str, str]:
    """(exit code, stdout, the last line of stderr) of `command`; its stderr
    is copied to ours as it comes (progress and tracebacks stay visible),
    and its last line names the failure in the error a caller raises."""
    child = subprocess.Popen(command, stdin=subprocess.PIPE if stdin is not None else None, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    last = [""]

    def tee() -> None:
        for line in child.stderr:
            sys.stderr.write(line)
            if line.strip():
                last[0] = line.strip()

    copier = threading.Thread(target=tee, daemon=True)
    copier.start()
    if stdin is not None:  # the child reads all of it before it writes anything
        child.stdin.write(stdin)
        child.stdin.close()
    stdout = child.stdout.read()
    child.wait()
    copier.join()
    return child.returncode, stdout, last[0]


def torch_sync(device) -> Callable[[], None]:
    """A function that waits for `device` (a no-op off CUDA), so that a timing covers the work and not its launch."""
    import torch

    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


def timed(queries: list[tuple[str, str]], search) -> tuple[dict[str, dict[str, float]], list[float]]:
    search(queries[0][1])  # load pages and kernels once
    run, times = {}, []
    for qid, text in queries:
        started = time.perf_counter()
        hits = search(text)
        times.append((time.perf_counter() - started) * 1000)
        run[qid] = rank_scores(doc_id for doc_id, _ in hits)
    return run, times


def latency(times: list[float]) -> dict[str, float]:
    """p50 and p95 of per-query milliseconds."""
    return {"p50_ms": round(float(np.percentile(times, 50)), 1), "p95_ms": round(float(np.percentile(times, 95)), 1)}


def quality_and_latency(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], times: list[float]) -> dict[str, Any]:
    return {"nDCG@10": round(beir_metrics(run, qrels)["nDCG@10"], 4), "queries": len(times), **latency(times)}
