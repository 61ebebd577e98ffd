"""`propdex loadtest URL`: concurrent clients against a running `propdex serve`.

N clients send a fixed number of searches while one writer adds documents;
every response must be a 200 with well-formed hits, and once the writer is
done every added document must be there (GET /v1/docs) and found by its own
text. The documents are made up, or with `--docs` the first `--adds` of a
corpus (any format `propdex index` reads), added in order; the searches are
a few fixed ones, or with `--queries` a topics file's, in turn.

With `--baseline URL` (the same documents built in bulk, served beside),
the grown index is measured against it once the adds are done: the same
searches from the same clients at rest, first on the grown index, then on
the baseline (p95 of each and their ratio), and BM25's top 10 for the
first `--bm25-queries` queries compared hit by hit (same documents, same
scores): what a living index owes its users is to answer as a bulk build
of its documents would.

Prints p50/p95 latency, requests per second and the errors (a JSON line;
exit 1 on any error, lost document or BM25 difference). Bounded: it sends
exactly `--requests` searches (twice more at rest with a baseline) and
`--adds` documents, to the URLs given (loopback by default).
"""
from __future__ import annotations

import argparse
import json
import logging
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .provenance import run_versions

QUERIES = ["who founded the company", "a river in europe", "the first album of the band", "american film director",
           "where was the battle fought", "a species of flowering plant", "the capital of the province", "olympic athlete"]


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("loadtest", help="drive a running `propdex serve` with concurrent searches and adds")
    p.add_argument("url", nargs="?", default="http://127.0.0.1:8000")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=400, help="searches in all")
    p.add_argument("--adds", type=int, default=20, help="documents added while searching, one request each")
    p.add_argument("--docs", help="add the first --adds documents of this corpus (file or folder) instead of made-up ones")
    p.add_argument("--queries", help="search with this topics file's queries, in turn (any format `propdex search --topics` reads)")
    p.add_argument("--baseline", help="URL of the same documents built in bulk: compared at rest once the adds are done")
    p.add_argument("--bm25-queries", type=int, default=100, help="queries whose BM25 top 10 must match the baseline's")
    p.add_argument("--token", help="bearer token of the write routes")
    p.add_argument("--out", help="write the report here too")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    docs = None
    if args.docs:
        from itertools import islice

        from propdex.indexer.readers import read_corpus

        docs = [{"id": d.id, "title": d.title, "text": d.text, "metadata": dict(d.metadata or {})}
                for d in islice(read_corpus([args.docs]), args.adds)]
    queries = None
    if args.queries:
        from propdex.retriever.trec import read_topics

        queries = [text for _, text in read_topics(args.queries)]
    report = load_test(args.url, clients=args.clients, requests=args.requests, adds=args.adds, token=args.token, docs=docs,
                       queries=queries, baseline=args.baseline, bm25_queries=args.bm25_queries)
    command = ["propdex", "loadtest", args.url, "--clients", str(args.clients), "--requests", str(args.requests), "--adds", str(args.adds)]
    command += ["--docs", args.docs] if args.docs else []
    command += ["--queries", args.queries] if args.queries else []
    command += ["--baseline", args.baseline, "--bm25-queries", str(args.bm25_queries)] if args.baseline else []
    report["command"] = shlex.join(command + (["--token", "TOKEN"] if args.token else []))  # the token itself stays out
    report["versions"] = run_versions()
    print(json.dumps(report))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if not report["errors"] and not report["lost"] and not report.get("bm25_differences") else 1


def load_test(url: str, *, clients: int = 8, requests: int = 400, adds: int = 20, token: str | None = None,
              docs: list[dict[str, Any]] | None = None, queries: list[str] | None = None, baseline: str | None = None,
              bm25_queries: int = 100) -> dict[str, Any]:
    """`docs`: the documents to add (their first `adds`), else made-up ones;
    `queries`: what the clients search, in turn (QUERIES by default);
    `baseline`: the URL of a bulk build to compare the grown index with at rest."""
    import httpx

    if clients < 1 or requests < 0 or adds < 0 or bm25_queries < 0:
        raise ValueError("--clients must be at least 1, --requests, --adds and --bm25-queries at least 0")
    queries = queries or QUERIES
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    errors: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()
    tag = f"loadtest-{time.time_ns()}"
    added = docs[:adds] if docs is not None else [
        {"id": f"{tag}-{i}", "title": f"Load test {i}", "text": f"Zorblax {tag} {i} quantum turnip festival number {i}."}
        for i in range(adds)]

    def search(i: int, at: str = url, into: list[float] = latencies) -> None:
        q = queries[i % len(queries)]
        t = time.perf_counter()
        try:
            r = http.get(f"{at}/v1/search", params={"q": q, "k": 5})
            ok = r.status_code == 200 and r.json()["query"] == q and all({"doc_id", "text", "score"} <= set(h) for h in r.json()["results"])
            problem = None if ok else f"search {i}: HTTP {r.status_code} {r.text[:200]}"
        except httpx.HTTPError as e:
            problem = f"search {i}: {type(e).__name__}: {e}"
        with lock:
            into.append((time.perf_counter() - t) * 1000)
            if problem:
                errors.append(problem)

    def write() -> None:
        for doc in added:
            try:
                r = http.post(f"{url}/v1/docs", json={"documents": [doc]}, headers=headers)
                if r.status_code != 200 or r.json().get("added") != 1:
                    with lock:
                        errors.append(f"add {doc['id']}: HTTP {r.status_code} {r.text[:200]}")
            except httpx.HTTPError as e:
                with lock:
                    errors.append(f"add {doc['id']}: {type(e).__name__}: {e}")

    with httpx.Client(timeout=120) as http:
        started = time.perf_counter()
        writer = threading.Thread(target=write)
        writer.start()
        with ThreadPoolExecutor(max_workers=clients) as pool:
            list(pool.map(search, range(requests)))
        searched = time.perf_counter() - started
        writer.join()
        lost = []
        for doc in added:
            got = http.get(f"{url}/v1/docs/{doc['id']}")
            top = http.get(f"{url}/v1/search", params={"q": doc["text"], "k": 3, "bm25": True})
            if got.status_code != 200 or got.json()["text"] != doc["text"] or doc["id"] not in [h["doc_id"] for h in top.json()["results"]]:
                lost.append(doc["id"])
        shards = http.get(f"{url}/v1/info").json().get("shards")
        report = {
            "url": url, "clients": clients, "searches": requests, "adds": len(added), "shards": shards,
            **_percentiles(latencies), "searches_per_s": round(requests / searched, 1) if searched else None,
        }
        if baseline:
            at_rest: dict[str, list[float]] = {url: [], baseline: []}
            for at in (url, baseline):  # one after the other: neither shares the cores with the other's searches
                with ThreadPoolExecutor(max_workers=clients) as pool:
                    list(pool.map(lambda i, at=at: search(i, at, at_rest[at]), range(requests)))
            grown, bulk = _percentiles(at_rest[url]), _percentiles(at_rest[baseline])
            report |= {"baseline": baseline, "at_rest": {"grown": grown, "baseline": bulk,
                                                           "p95_ratio": round(grown["p95_ms"] / max(bulk["p95_ms"], 1e-9), 2)},
                       "bm25_queries": min(bm25_queries, len(queries)),
                       "bm25_differences": _bm25_differences(http, url, baseline, queries[:bm25_queries])}
    return report | {"errors": errors[:20], "n_errors": len(errors), "lost": lost}


def _percentiles(latencies: list[float]) -> dict[str, float]:
    ms = np.array(latencies) if latencies else np.zeros(1)
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1)}


def _bm25_differences(http: Any, url: str, baseline: str, queries: list[str], k: int = 10) -> list[str]:
    """The queries whose BM25 top k differs between two servers: another
    document, or the same one at another score (beyond float32 rounding).
    Tied documents may come in either order, and a tie at the k-th place may
    keep either, so the scores are compared in rank order and the documents
    above the k-th score as sets."""
    differences = []
    for q in queries:
        grown, bulk = ({h["doc_id"]: h["score"] for h in http.get(f"{at}/v1/search", params={"q": q, "k": k, "bm25": True}).json()["results"]}
                       for at in (url, baseline))
        same_scores = len(grown) == len(bulk) and np.allclose(sorted(grown.values()), sorted(bulk.values()), rtol=1e-4, atol=1e-6)
        last = min(bulk.values(), default=0.0) + 1e-4 * max(1.0, abs(min(bulk.values(), default=0.0)))
        if not same_scores or {d for d, s in grown.items() if s > last} != {d for d, s in bulk.items() if s > last}:
            differences.append(q)
    return differences
