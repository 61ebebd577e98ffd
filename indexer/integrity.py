"""Whether the files on disk are still the ones a manifest committed.

A manifest names every file it commits, with its sha256 and (since this
module) its size. Two depths of checking:
- `check(..., full=False)` runs on every `Searcher.load` and `propdex info`:
  every path stays inside the index directory, every committed file exists,
  and a file whose size was recorded still has it (a truncated LMDB file
  would otherwise end the process with SIGBUS on the first read). It costs a
  few stat calls.
- `check(..., full=True)` (`propdex verify DIR`) also reads every byte and
  compares sha256s: it catches a flipped bit that keeps the size.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .manifest import sha256_file
from .store import LMDB_DIR

LMDB_FILE = f"{LMDB_DIR}/data.mdb"


@dataclass(frozen=True)
class Committed:
    path: str  # relative to the index directory
    sha256: str | None
    size: int | None


def committed_files(manifest: dict[str, Any]) -> list[Committed]:
    """Every file the manifest commits (shards, their tombstones, trained index, BM25)."""
    files = []
    for s in manifest.get("shards", []):
        files.append(Committed(f"{s['name']}/{LMDB_FILE}", s.get("lmdb_sha256"), s.get("lmdb_bytes")))
        if s.get("stored"):
            files.append(Committed(f"{s['name']}/{s['stored']}", s.get("stored_sha256"), s.get("stored_bytes")))
        if s.get("index"):
            files.append(Committed(f"{s['name']}/{s['index']}", s.get("index_sha256"), s.get("index_bytes")))
        if s.get("deleted"):
            files.append(Committed(f"{s['name']}/{s['deleted']}", s.get("deleted_sha256"), s.get("deleted_bytes")))
        for name, digest in (s.get("bm25_files") or {}).items():
            files.append(Committed(f"{s['name']}/{s['bm25']}/{name}", digest, None))
    index = manifest.get("index") or {}
    if index.get("trained"):
        files.append(Committed(index["trained"], index.get("trained_sha256"), index.get("trained_bytes")))
    lexical = manifest.get("lexical") or {}
    for name, digest in (lexical.get("files") or {}).items():  # an index from before segments
        files.append(Committed(f"{lexical['dir']}/{name}", digest, None))
    return files


def check(directory: Path, manifest: dict[str, Any], *, full: bool = False) -> list[str]:
    """One line per problem found (empty: the index is what its manifest says)."""
    directory = Path(directory)
    problems = []
    for f in committed_files(manifest):
        if not inside(f.path):
            problems.append(f"{f.path}: the manifest names a path outside the index directory")
            continue
        path = directory / f.path
        if not path.is_file():
            problems.append(f"{f.path}: missing")
        elif f.size is not None and path.stat().st_size != f.size:
            problems.append(f"{f.path}: {path.stat().st_size} bytes, committed with {f.size}")
        elif full and f.sha256 is not None and sha256_file(path) != f.sha256:
            problems.append(f"{f.path}: content differs from what was committed (sha256)")
    return problems


def inside(relative: str) -> bool:
    """Does the path stay inside the index directory (plain names: no root,
    no '..', no '.', no backslash)?"""
    parts = PurePosixPath(relative).parts
    return bool(parts) and not PurePosixPath(relative).is_absolute() and "\\" not in relative and all(p not in ("..", ".") for p in parts)
