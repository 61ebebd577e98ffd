"""How fast a MediaWiki dump is read, in one process and rendered by worker processes.

    python eval/notebook/read_dump.py WORK OUT.json [--copies 20]

Writes the shortened dump's pages `--copies` times over into one bz2 file (a
dump of that many pages, as Wikipedia compresses them), then reads it through
`read_corpus` with every page rendered in this process, and rendered by
`parallel.workers()` worker processes (`mediawiki.POOL_BYTES`), `--rounds`
times each, alternating; the median is reported. Both reads must give the
same records; pages a second and characters of text a second are reported,
with the cores there were.
"""
from __future__ import annotations

import argparse
import bz2
import json
import statistics
import sys
import time
from pathlib import Path

from propdex.encoders import Document
from propdex.indexer.readers import mediawiki, parallel, read_corpus

DUMP = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "wikipedia" / "dump"


def timed_read(path: Path, pool_bytes: int) -> tuple[float, list]:
    mediawiki.POOL_BYTES = pool_bytes
    started = time.perf_counter()
    records = list(read_corpus([path]))
    return time.perf_counter() - started, records


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    (dump,) = DUMP.iterdir()
    xml = bz2.decompress(dump.read_bytes())
    first, last = xml.index(b"  <page>"), xml.rindex(b"</page>") + len(b"</page>\n")
    big = args.work / "dump.xml.bz2"
    args.work.mkdir(parents=True, exist_ok=True)
    big.write_bytes(bz2.compress(xml[:first] + xml[first:last] * args.copies + xml[last:]))
    serial_runs, pooled_runs = [], []
    for _ in range(args.rounds):
        seconds, serial = timed_read(big, 1 << 62)
        serial_runs.append(seconds)
        seconds, pooled = timed_read(big, 0)
        pooled_runs.append(seconds)
        assert pooled == serial, "the pooled read differs"
    serial_s, pooled_s = statistics.median(serial_runs), statistics.median(pooled_runs)
    chars = sum(len(r.text) for r in serial if isinstance(r, Document))
    rows = {"one process": serial_s, f"{parallel.workers()} worker processes": pooled_s}
    result = {"command": " ".join(sys.argv), "pages": len(serial), "articles": sum(isinstance(r, Document) for r in serial),
              "runs_s": {"one process": serial_runs, "workers": pooled_runs},
              "text_chars": chars, "xml_bytes": len(xml[:first]) + (last - first) * args.copies, "bz2_bytes": big.stat().st_size,
              "rows": {name: {"seconds": round(s, 2), "pages_per_s": round(len(serial) / s, 1),
                              "text_mchars_per_s": round(chars / s / 1e6, 2)} for name, s in rows.items()}}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, s in rows.items():
        print(f"{name}: {s:.2f} s, {len(serial) / s:.0f} pages/s, {chars / s / 1e6:.2f} M text chars/s")


if __name__ == "__main__":
    main()
