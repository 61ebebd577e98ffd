"""The commit API every writer goes through: an index directory, the
manifest being prepared for it, and the files written aside until it lands.

Lucene's commit, in small: shards are written under a temporary name and
renamed into place (`write_shard`), but readers see only what a manifest
lists, and a manifest lists a file only once `commit` has renamed the
manifest over the last one. Whatever a killed writer left that no manifest
lists is removed by the next writer (`remove_uncommitted`). The build
(`phases`), the living index (`living`), `merge` and Ray's parts all commit
through a `Transaction`.
"""
from __future__ import annotations

import resource
import shutil
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from . import ann, lexical
from .encoding import Batch
from .lock import LOCK
from .manifest import FORMAT_VERSION, MANIFEST, Counts, Manifest, Shard, Timings, library_versions, sha256_file
from .store import LMDB_DIR, VECTORS, Rows, ShardStore, ShardWriter, read_deleted

TRAINED = "trained.faiss"


def shard_name(i: int) -> str:
    return f"shard-{i:05d}"


class Transaction:
    """Changes to the index at `out`, made visible together by `commit`.
    `dim`: the encoder's vector size, which shard stores are written with."""

    def __init__(self, out: Path, manifest: Manifest, dim: int) -> None:
        self.out = out
        self.manifest = manifest
        self.dim = dim

    # -- shards ---------------------------------------------------------------
    def next_shard(self) -> int:
        """The number after every listed shard's: numbers are never reused,
        so a shard written aside never meets a committed one's files."""
        return max((int(s.name.split("-")[1]) + 1 for s in self.manifest.shards), default=0)

    def write_shard(self, number: int, batches: Iterable[Batch], n_inputs: int = 0, skipped: Counter | None = None,
                    examples: dict | None = None, rows: Rows | None = None) -> Shard:
        """Write `batches` into shard `number`, in place but not committed:
        the caller lists the entry returned. A batch is written before the
        next is made, so a shard's vectors are never in memory together.
        With `rows`, the batches carry the rows of the shard's index file
        (a binary shard's codes), which the entry lists as its index."""
        started = time.time()
        name = shard_name(number)
        tmp = self.out / f"{name}.tmp"
        remove(tmp)
        writer = ShardWriter(tmp, self.dim, rows)
        passages, repaired = 0, Counter()
        try:
            for docs, encoded, read in batches:
                writer.add(docs, encoded)
                passages += read
                repaired.update(r for d in docs for r in d.repairs)
            info = writer.finish()
        finally:
            writer.close()
        tmp.rename(self.out / name)
        return self._shard_entry(name, info, n_inputs, passages, skipped or Counter(), examples or {}, repaired, started, rows)

    def _shard_entry(self, name: str, info: dict, n_inputs: int, passages: int, skipped: Counter, examples: dict,
                     repaired: Counter, started: float, rows: Rows | None) -> Shard:
        lmdb, file = self.out / name / LMDB_DIR / "data.mdb", self.out / name / (rows.file if rows else VECTORS)
        entry = Shard(
            name=name, inputs=n_inputs, docs=info["docs"], sentences=info["sentences"], vectors=info["vectors"],
            passages=passages, skipped=dict(skipped), skipped_examples=examples, repaired=dict(repaired),
            lmdb_sha256=sha256_file(lmdb), lmdb_bytes=lmdb.stat().st_size,
            encode_s=round(time.time() - started, 3), index=None, index_sha256=None,
        )
        digest, size = sha256_file(file), file.stat().st_size
        if rows is None:
            entry.stored, entry.stored_sha256, entry.stored_bytes = VECTORS, digest, size
        else:
            entry.index, entry.index_sha256, entry.index_bytes, entry.add_s = rows.file, digest, size, 0.0
        return entry

    def store(self, shard: Shard) -> ShardStore:
        return ShardStore(self.out / shard.name, shard.stored)

    def deleted(self, shard: Shard) -> np.ndarray:
        """The ordinals of the shard's deleted documents."""
        return read_deleted(self.out / shard.name / shard.deleted) if shard.deleted else np.zeros(0, np.int32)

    # -- the commit -----------------------------------------------------------
    def commit(self) -> None:
        """Write the manifest, with its totals derived from the shards it
        lists, and rename it into place: from here on, readers see it."""
        m = self.manifest
        skipped: Counter[str] = Counter()
        repaired: Counter[str] = Counter()
        for s in m.shards:
            skipped.update(s.skipped)
            repaired.update(s.repaired or {})
        m.counts = _counts(m.shards, skipped)
        m.skipped = dict(sorted(skipped.items()))
        m.repaired = dict(sorted(repaired.items()))
        m.timings = self._timings()
        if any(s.index and ann.holds_codes(s.index) for s in m.shards):
            m.version = max(m.version, FORMAT_VERSION if m.index.scaled_codes else 2)
        m.versions = library_versions()
        m.updated = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        m.write(self.out)

    def _timings(self) -> Timings:
        m = self.manifest
        train_s = m.index.train_s if m.index is not None and m.index.has("train_s") else 0.0
        before = m.timings.peak_rss_mb if m.timings is not None and m.timings.has("peak_rss_mb") else 0.0
        return Timings(
            encode_s=round(sum(_or(s.encode_s, 0.0) for s in m.shards), 3),
            train_s=train_s,
            add_s=round(sum(_or(s.add_s, 0.0) for s in m.shards), 3),
            peak_rss_mb=max(peak_rss_mb(), before),  # the largest any run of this build reached
        )

    def remove_uncommitted(self) -> None:
        """Delete whatever a killed writer left that the manifest does not list."""
        m = self.manifest
        listed = {s.name for s in m.shards}
        trained = m.index.trained if m.index is not None else None
        bm25 = m.lexical.dir if m.lexical is not None else None  # an index's one BM25 from before segments
        for path in self.out.iterdir():
            if path.name in (MANIFEST, LOCK) or path.name == bm25:
                continue
            if path.is_dir() and path.name in listed:
                shard = m.shard(path.name)
                for f in path.iterdir():
                    if f.name not in (LMDB_DIR, shard.stored, shard.index, shard.deleted, shard.bm25):
                        remove(f)
            elif path.name != trained:
                remove(path)


def _counts(shards: list[Shard], skipped: Counter) -> Counts:
    return Counts(
        inputs=sum(s.inputs for s in shards),
        documents=sum(s.live_docs for s in shards),
        deleted=sum(_or(s.deleted_docs, 0) for s in shards),
        sentences=sum(s.sentences for s in shards),
        vectors=sum(s.vectors for s in shards),
        skipped=sum(skipped.values()),
    )


def _or(value, default):
    """`value`, or `default` where the manifest has no such key (its JSON
    types kept: an int stays an int)."""
    return default if value is None else value


def peak_rss_mb() -> float:
    """This process's own peak resident memory, MB. Linux's VmHWM, not
    getrusage: ru_maxrss survives fork and exec, so a child would report its
    parent's peak at the spawn whenever that is larger."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:  # no procfs (macOS): getrusage, in bytes there
        pass
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(maxrss / (1 << 20 if sys.platform == "darwin" else 1024), 1)


def ours(path: Path) -> bool:
    """Files a build of ours may leave before its first commit."""
    return path.name.startswith(("shard-", TRAINED, MANIFEST, lexical.BM25_DIR, LOCK))


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
