"""Merge: commit the parts of a build (`--num-shards N --shard-id I`, or
Ray's workers) as one index, trained once.

Each part is an index directory whose build stopped after encoding (status
`encoded`). The merge links (or copies) every part's shard stores into the
new index in part order, committing each, then trains the ANN index once on
a sample of all their vectors, fills every shard and builds BM25, exactly
as the last phases of a single build do. A killed merge run again with the
same parts resumes; the parts are left as they were.
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .build import SETTINGS, IndexWriter
from .commit import Transaction, shard_name
from .manifest import Manifest, Merged, Status
from .store import LMDB_DIR, VECTORS, ShardStore

if TYPE_CHECKING:
    from propdex.encoders import Encoder

log = logging.getLogger(__name__)


def merge(out: str | Path, parts: list[str | Path], *, encoder: "Encoder | None" = None, device: str = "cpu") -> dict[str, Any]:
    """Commit `parts` as one index at `out` and finish its build there;
    returns its manifest (raw)."""
    out, parts = Path(out), [Path(p) for p in parts]
    manifests = [Manifest.read(p) for p in parts]
    _check_parts(parts, manifests)
    first = manifests[0]
    if encoder is None:
        from propdex.encoders import encoder_from_config

        encoder = encoder_from_config(first.encoder, device=device)
    settings = first.settings.to_json()
    writer = IndexWriter(out, encoder, inputs=first.inputs, **{k: settings[k] for k in SETTINGS if k in settings})
    try:
        if writer.manifest.status == Status.ENCODING:
            _commit_parts(writer.transaction, parts, manifests)
        return writer.build(iter(()))
    finally:
        writer.close()


def _check_parts(parts: list[Path], manifests: list[Manifest]) -> None:
    """The parts of one build: each encoded, built alike, each of 0..n-1 once, no id in two."""
    first = manifests[0]
    for path, m in zip(parts, manifests):
        if not m.part:
            raise ValueError(f"{path} is not a part of a build (made with --num-shards/--shard-id)")
        if m.status != Status.ENCODED:
            raise ValueError(f"{path}: its build is unfinished ({m.status}); run its command again first")
        for key in ("encoder", "backbone", "settings", "inputs"):
            if getattr(m, key) != getattr(first, key):
                raise ValueError(f"{path} was built with other {key} than {parts[0]}; parts of one index share them")
    n = first.part.of
    ids = sorted(m.part.id for m in manifests)
    if ids != list(range(n)):
        missing = sorted(set(range(n)) - set(ids))
        raise ValueError(f"the parts must be each of 0..{n - 1} once; got {ids}" + (f" (missing {missing})" if missing else ""))
    _no_shared_ids(parts, manifests)


def _commit_parts(tx: Transaction, parts: list[Path], manifests: list[Manifest]) -> None:
    """Link every part's shards into the index in part order, committing each
    (with what it was, so a killed merge skips it when run again); then the
    build goes on at training."""
    manifest = tx.manifest
    if manifest.merged is None:
        manifest.merged = []
    copied = {(c.part, c.shard) for c in manifest.merged}
    for path, m in sorted(zip(parts, manifests), key=lambda pm: pm[1].part.id):
        for s in m.shards:
            if (m.part.id, s.name) in copied:
                continue
            entry = s.copy()
            entry.name, entry.index, entry.index_sha256 = shard_name(tx.next_shard()), None, None
            _link_shard(path / s.name, tx.out / entry.name)
            manifest.shards.append(entry)
            manifest.merged.append(Merged(part=m.part.id, shard=s.name, as_=entry.name))
            tx.commit()
    manifest.status = Status.TRAINING
    tx.commit()


def _link_shard(source: Path, target: Path) -> None:
    """The shard's store at `target`, by hard link where the filesystem allows
    (the stores are immutable once committed), else by copy; renamed into place."""
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / LMDB_DIR).mkdir(parents=True)
    for f in (source / LMDB_DIR).iterdir():
        if f.name == "lock.mdb":
            continue
        try:
            os.link(f, tmp / LMDB_DIR / f.name)
        except OSError:
            shutil.copy2(f, tmp / LMDB_DIR / f.name)
    if (source / VECTORS).is_file():
        try:
            os.link(source / VECTORS, tmp / VECTORS)
        except OSError:
            shutil.copy2(source / VECTORS, tmp / VECTORS)
    tmp.rename(target)


def _no_shared_ids(parts: list[Path], manifests: list[Manifest]) -> None:
    """One id, one document: a single build skips a repeated id, so parts must not share one."""
    seen: dict[str, Path] = {}
    for path, m in zip(parts, manifests):
        for s in m.shards:
            store = ShardStore(path / s.name, s.stored)
            try:
                for doc_id in store.doc_ids():
                    if doc_id in seen:
                        raise ValueError(f"document id {doc_id!r} is in {seen[doc_id]} and in {path}; "
                                         f"remove the repeated record from the input and build that part again")
                    seen[doc_id] = path
            finally:
                store.close()
