"""manifest.json: the commit point of an index, written aside and renamed into place.

A shard exists for readers only once a manifest listing it has been renamed
over the previous one, like a Lucene commit: a build killed at any moment
leaves the last manifest, and everything it lists, intact.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# Re-exported: the index records the same provenance as the trained weights.
from propdex.encoders.provenance import library_versions, sha256_file  # noqa: F401

MANIFEST = "manifest.json"
FORMAT = "propdex-index"
FORMAT_VERSION = 2
# Version 2 adds shards of standalone codes (`ann.CODES_FILE`), which a
# reader of version 1 would take for FAISS files: a manifest says 2 only once
# it lists such a shard, so every other index stays readable by version 1.


def read_manifest(directory: Path) -> dict[str, Any]:
    path = Path(directory) / MANIFEST
    if not Path(directory).is_dir():
        raise ValueError(f"no index at {directory}: directory does not exist")
    if not path.is_file():
        raise ValueError(f"no index at {directory}: {MANIFEST} missing (not a propdex index, or its build never committed a shard)")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError(f"{path} is not valid JSON: the index is damaged") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a propdex manifest")
    if manifest.get("version", 0) > FORMAT_VERSION:
        raise ValueError(f"index format version {manifest['version']} is newer than this propdex supports ({FORMAT_VERSION})")
    return manifest


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    tmp = Path(directory) / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, Path(directory) / MANIFEST)
    _fsync_dir(Path(directory))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
