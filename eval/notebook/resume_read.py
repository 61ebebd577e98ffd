"""What a resumed build spends passing over the records it committed before it stopped.

    python eval/notebook/resume_read.py DUMP.xml.bz2 PDF_FOLDER OUT.json [--share 0.8] [--rounds 3]

A build killed after its committed shards consumed the first n records
re-reads its input and passes over those n (`encoding.skip_records`).
Timed here, alternating, median of `--rounds`: passing over the first
`--share` of a MediaWiki dump's records (the dump `read_dump.py` writes) and
of a folder of PDFs (the one `sync_pdfs.py` writes), with every record
parsed as before (`read_corpus(paths)`) and with the committed ones left
unread (`read_corpus(paths, start=n)`, what `propdex index` now reads on a
resume); the dump both in one process and rendered by worker processes.
The records after the n must be the same either way.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from propdex.indexer.encoding import skip_records
from propdex.indexer.readers import mediawiki, parallel, read_corpus


def passed_over(paths: list[Path], n: int, start: int) -> tuple[float, list]:
    stream = read_corpus(paths, start=start)
    started = time.perf_counter()
    skip_records(stream, n)
    seconds = time.perf_counter() - started
    return seconds, list(stream)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dump", type=Path)
    ap.add_argument("pdfs", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--share", type=float, default=0.8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = {}
    for name, paths, pool in (("dump, one process", [args.dump], 1 << 62), (f"dump, {parallel.workers()} workers", [args.dump], 0),
                              ("PDF folder", [args.pdfs], 1 << 62)):
        mediawiki.POOL_BYTES = pool
        total = sum(1 for _ in read_corpus(paths))
        n = int(total * args.share)
        runs: dict[str, list[float]] = {"every record parsed": [], "committed left unread (start=n)": []}
        for _ in range(args.rounds):
            before, rest_before = passed_over(paths, n, 0)
            after, rest_after = passed_over(paths, n, n)
            assert rest_after == rest_before, f"{name}: the records after the first {n} differ"
            runs["every record parsed"].append(before)
            runs["committed left unread (start=n)"].append(after)
        rows[name] = {"records": total, "passed_over": n, "runs_s": runs,
                      "median_s": {k: round(statistics.median(v), 2) for k, v in runs.items()}}
        print(name, rows[name]["median_s"], flush=True)
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "cores": parallel.workers(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
