"""`propdex loadtest URL`: concurrent clients against a running `propdex serve`.

N clients send a fixed number of searches while one writer adds documents;
every response must be a 200 with well-formed hits, and once the writer is
done every added document must be there (GET /v1/docs) and found by its own
text. The documents are made up, or with `--docs` the first `--adds` of a
corpus (any format `propdex index` reads), added in order. Prints p50/p95 latency, requests per second and the errors (a JSON
line; exit 1 on any error or lost document). Bounded: it sends exactly
`--requests` searches and `--adds` documents, to the URL given (loopback
by default).
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

QUERIES = ["who founded the company", "a river in europe", "the first album of the band", "american film director",
           "where was the battle fought", "a species of flowering plant", "the capital of the province", "olympic athlete"]


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("loadtest", help="drive a running `propdex serve` with concurrent searches and adds")
    p.add_argument("url", nargs="?", default="http://127.0.0.1:8000")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=400, help="searches in all")
    p.add_argument("--adds", type=int, default=20, help="documents added while searching, one request each")
    p.add_argument("--docs", help="add the first --adds documents of this corpus (file or folder) instead of made-up ones")
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
    report = load_test(args.url, clients=args.clients, requests=args.requests, adds=args.adds, token=args.token, docs=docs)
    command = ["propdex", "loadtest", args.url, "--clients", str(args.clients), "--requests", str(args.requests), "--adds", str(args.adds)]
    command += ["--docs", args.docs] if args.docs else []
    report["command"] = shlex.join(command + (["--token", "TOKEN"] if args.token else []))  # the token itself stays out
    print(json.dumps(report))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if not report["errors"] and not report["lost"] else 1


def load_test(url: str, *, clients: int = 8, requests: int = 400, adds: int = 20, token: str | None = None,
              docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`docs`: the documents to add (their first `adds`), else made-up ones."""
    import httpx

    if clients < 1 or requests < 0 or adds < 0:
        raise ValueError("--clients must be at least 1, --requests and --adds at least 0")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    errors: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()
    tag = f"loadtest-{time.time_ns()}"
    added = docs[:adds] if docs is not None else [
        {"id": f"{tag}-{i}", "title": f"Load test {i}", "text": f"Zorblax {tag} {i} quantum turnip festival number {i}."}
        for i in range(adds)]

    def search(i: int) -> None:
        q = QUERIES[i % len(QUERIES)]
        t = time.perf_counter()
        try:
            r = http.get(f"{url}/v1/search", params={"q": q, "k": 5})
            ok = r.status_code == 200 and r.json()["query"] == q and all({"doc_id", "text", "score"} <= set(h) for h in r.json()["results"])
            problem = None if ok else f"search {i}: HTTP {r.status_code} {r.text[:200]}"
        except httpx.HTTPError as e:
            problem = f"search {i}: {type(e).__name__}: {e}"
        with lock:
            latencies.append((time.perf_counter() - t) * 1000)
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
    ms = np.array(latencies) if latencies else np.zeros(1)
    return {
        "url": url, "clients": clients, "searches": requests, "adds": len(added), "shards": shards,
        "p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1),
        "searches_per_s": round(requests / searched, 1) if searched else None,
        "errors": errors[:20], "n_errors": len(errors), "lost": lost,
    }
