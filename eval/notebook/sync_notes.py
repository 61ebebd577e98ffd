"""A folder of notes kept in sync: what a re-sync costs against the build.

Writes the extract's first N articles as Markdown notes (`# title`, then the
text), builds an index over the folder with `propdex index`, then changes a
few notes (edits, deletions, one new note) and runs the sync a user runs,
`propdex add DIR FOLDER --update --delete-missing`, twice: once after the
changes, once with nothing changed. Each command runs as a user runs it (a
fresh process, the default encoder) and is timed from outside.

    python eval/notebook/sync_notes.py WORK OUT.json [--articles 300]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from propdex.encoders import Document
from propdex.indexer.readers import read_corpus

EXTRACT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "wikipedia" / "extracted"


def run(*args: str) -> tuple[float, str]:
    """`propdex -q ARGS --device cpu` in a fresh process: seconds, its last line."""
    return timed([sys.executable, "-m", "propdex", "-q", *args, "--device", "cpu"])


def timed(argv: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - started, done.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--articles", type=int, default=300)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    notes = args.work / "notes"
    notes.mkdir(parents=True)
    docs = [r for r in read_corpus([EXTRACT]) if isinstance(r, Document)][: args.articles]
    for i, d in enumerate(docs):
        (notes / f"{i:05d}.md").write_text(f"# {d.title}\n\n{d.text}\n")
    index = args.work / "index"
    rows = {"build": run("index", str(notes), "--out", str(index))}
    for i in (1, 2, 3):  # edited
        path = notes / f"{i:05d}.md"
        path.write_text(path.read_text() + "\nA sentence added in an edit.\n")
    for i in (4, 5):  # deleted
        (notes / f"{i:05d}.md").unlink()
    (notes / "new.md").write_text("# A new note\n\nWritten after the build.\n")
    rows["sync after 3 edits, 2 deletions, 1 new note"] = run("add", str(index), str(notes), "--update", "--delete-missing")
    rows["sync with nothing changed"] = run("add", str(index), str(notes), "--update", "--delete-missing")
    report(args.out, rows, articles=len(docs), chars=sum(len(d.text) for d in docs))


def report(out: Path, rows: dict[str, tuple[float, str]], **facts: object) -> None:
    """Each timed step's seconds and last line, to `out` (with the command) and the terminal."""
    result = {"command": " ".join(sys.argv), **facts,
              "rows": {name: {"seconds": round(s, 1), "says": says} for name, (s, says) in rows.items()}}
    out.write_text(json.dumps(result, indent=1) + "\n")
    for name, (seconds, says) in rows.items():
        print(f"{name}: {seconds:.1f} s  ({says})")


if __name__ == "__main__":
    main()
