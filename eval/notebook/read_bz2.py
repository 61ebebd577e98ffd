"""A multistream dump decompressed by one thread against several.

    python eval/notebook/read_bz2.py WORK OUT.json [--copies 40] [--rounds 3] [--jobs bytes,read,...]

Writes the shortened dump's pages `--copies` times over as a multistream bz2
file, 100 pages a member as Wikipedia's multistream dumps are, then times,
alternating, median of `--rounds`, with decompression in one thread
(`streams.PARALLEL_BYTES` out of reach) and in `parallel.workers()` threads
(the default for a file this large): the bytes alone (`open_binary`), the
whole read (`read_corpus`, pages rendered by worker processes), and a
resumed build's pass over the first 80% of its records
(`read_corpus(start=n)`). Each pair must give the same bytes or records.
"""
from __future__ import annotations

import argparse
import bz2
import json
import re
import statistics
import sys
import time
from pathlib import Path

from propdex.indexer.encoding import skip_records
from propdex.indexer.readers import parallel, read_corpus, streams

DUMP = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "wikipedia" / "dump"


def multistream(out: Path, copies: int, pages_a_member: int = 100) -> None:
    (dump,) = DUMP.iterdir()
    xml = bz2.decompress(dump.read_bytes())
    cuts = [m.start() for m in re.finditer(rb"  <page>", xml)]
    head, pages, tail = xml[: cuts[0]], xml[cuts[0] : xml.rindex(b"</page>") + len(b"</page>\n")], xml[xml.rindex(b"</page>") + len(b"</page>\n") :]
    body = pages * copies
    starts = [m.start() for m in re.finditer(rb"  <page>", body)]
    members = [head] + [body[a:b] for a, b in zip(starts[::pages_a_member], starts[pages_a_member::pages_a_member] + [len(body)])] + [tail]
    out.write_bytes(b"".join(bz2.compress(m) for m in members))


def timed(work) -> tuple[float, object]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", default="bytes,read,resume pass-over (80%)")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    dump = args.work / "multistream.xml.bz2"
    multistream(dump, args.copies)
    total = sum(1 for _ in read_corpus([dump]))
    n = int(total * 0.8)

    def passed_over() -> tuple[float, object]:  # the pass over alone is timed; the rest is read to compare
        stream = read_corpus([dump], start=n)
        seconds, _ = timed(lambda: skip_records(stream, n))
        return seconds, list(stream)

    jobs = {"bytes": lambda: timed(streams.open_binary(dump).read), "read": lambda: timed(lambda: list(read_corpus([dump]))),
            "resume pass-over (80%)": passed_over}
    default = streams.PARALLEL_BYTES
    rows = {}
    for name in args.jobs.split(","):
        job = jobs[name]
        runs: dict[str, list[float]] = {"one thread": [], f"{parallel.workers()} threads": []}
        for _ in range(args.rounds):
            streams.PARALLEL_BYTES = 1 << 62
            one, a = job()
            streams.PARALLEL_BYTES = default
            many, b = job()
            assert a == b, f"{name}: the threaded read differs"
            runs["one thread"].append(one)
            runs[f"{parallel.workers()} threads"].append(many)
        rows[name] = {k: round(statistics.median(v), 2) for k, v in runs.items()} | {"runs_s": runs}
        print(name, {k: v for k, v in rows[name].items() if k != "runs_s"}, flush=True)
    record = {"command": " ".join(sys.argv), "bz2_bytes": dump.stat().st_size, "records": total, "cores": parallel.workers(),
              "parallel_bytes": default, "rows": rows}
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
