"""What an index holds, read from its manifest and checked on disk: `propdex info` and a server's /v1/info."""
from __future__ import annotations

from pathlib import Path

from . import integrity
from .manifest import read_manifest
from .settings import store_of


def summary(path: Path) -> dict:
    """What `propdex info` prints (and a server's /v1/info returns)."""
    m = read_manifest(path)
    return {
        "path": str(path),
        "status": m["status"],
        "documents": m.get("counts", {}).get("documents", 0),
        "deleted": m.get("counts", {}).get("deleted", 0),  # tombstoned, until `propdex compact`
        "generation": m.get("generation", 0),
        "vectors": m.get("counts", {}).get("vectors", 0),
        "problems": integrity.check(path, m),
        "encoder": m["encoder"],
        "backbone": m["backbone"],
        "index": m["index"],
        "store": store_of(m),  # what stage 2 re-scores: a float16 copy, or the index's codes
        "bm25": {k: v for k, v in (m.get("lexical") or {}).items() if k != "files"} or None,
        "counts": m.get("counts", {}),
        "skipped": m.get("skipped", {}),
        "repaired": m.get("repaired", {}),
        "shards": len(m["shards"]),
        "bytes": sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()),
        "versions": m.get("versions", {}),
        "updated": m.get("updated"),
    }
