"""A folder of PDFs kept in sync: a sync that reads every file against one that reads only the changed ones.

Copies a PDF N times into a folder (each copy its own document), builds an
index over it with `propdex index`, then times, each in a fresh process as a
user runs it:

- the sync before file stamps, every file parsed and compared with its stored
  document (`Index.update(read_corpus([folder]), delete_missing=True)`);
- `propdex add DIR FOLDER --update --delete-missing` with nothing changed;
- the same after one copy is replaced by another PDF.

    python eval/notebook/sync_pdfs.py WORK OUT.json --pdf FILE.pdf --other OTHER.pdf [--copies 12]
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from sync_notes import report, run, timed  # eval/notebook/, the script's own folder


def parse_all(index: Path, folder: Path) -> tuple[float, str]:
    code = (f"import propdex; i = propdex.Index.open({str(index)!r}, device='cpu'); "
            f"print(i.update(propdex.read_corpus([{str(folder)!r}]), delete_missing=True))")
    return timed([sys.executable, "-c", code])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--pdf", type=Path, required=True)
    ap.add_argument("--other", type=Path, required=True, help="the PDF one copy is replaced by")
    ap.add_argument("--copies", type=int, default=12)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    folder = args.work / "pdfs"
    folder.mkdir(parents=True)
    for i in range(args.copies):
        shutil.copy(args.pdf, folder / f"{i:03d}.pdf")
    index = args.work / "index"
    rows = {"build": run("index", str(folder), "--out", str(index))}
    rows["sync parsing every file (Index.update(read_corpus(...)))"] = parse_all(index, folder)
    rows["sync with nothing changed (add --update --delete-missing)"] = run("add", str(index), str(folder), "--update", "--delete-missing")
    shutil.copy(args.other, folder / "000.pdf")
    rows["sync after one file replaced"] = run("add", str(index), str(folder), "--update", "--delete-missing")
    report(args.out, rows, copies=args.copies, pdf_bytes=args.pdf.stat().st_size)


if __name__ == "__main__":
    main()
