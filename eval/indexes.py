"""Eval's index cache: each system's index over a task's corpus, built once under --work.

An encoder's index is built with the real IndexWriter (BM25 included, as
every index has it), so eval measures what `propdex index` ships; it is
reused by later runs while corpus and settings are unchanged, because
building is the slow part and search options do not change the index. A
directory whose index was built by what a spec meant before is left where
it is and a new one is named beside it (cached_index_dir). The cache is
eval's alone: nothing outside eval reads it. Also here: what an index
weighs on disk, counted from its manifest.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from propdex.encoders import recorded_config
from propdex.indexer import ann, binary
from propdex.indexer.ann import CODE_BYTES
from propdex.indexer.build import IndexWriter
from propdex.indexer.manifest import read_manifest
from propdex.indexer.settings import IndexSettings, store_of

from .datasets import Task
from .systems import EVAL_OPTIONS, SEARCH_OPTIONS, System, corpus_for, system_encoder

if TYPE_CHECKING:
    from propdex.encoders import Backbone, Encoder


def build_index(task: Task, system: System, work: Path, backbone: "Backbone") -> tuple[Path, "Encoder", dict[str, Any], bool]:
    """The system's index over the task's corpus, built with the real
    IndexWriter (BM25 included, as every index has it) under `work`, or
    reused from there when corpus and settings are unchanged. Also says
    whether the corpus's backbone states came from an earlier system of this
    run (its encode_s is then pooling only)."""
    encoder = system_encoder(system, backbone)
    corpus = corpus_for(task, system)
    key = hashlib.sha256("\n".join(f"{d.id}\t{d.text}\t{d.focus}" for d in corpus).encode()).hexdigest()[:12]
    # Search-time options (nprobe) do not change the index: reuse it.
    index_label = ":".join([system.name, *(f"{k}={v}" for k, v in system.options.items() if k not in (*SEARCH_OPTIONS, *EVAL_OPTIONS))])
    store, code_bytes, factory = system.options.get("store", IndexSettings.store), int(system.options.get("code_bytes", CODE_BYTES)), system.options.get("factory")
    training, hashing = system.options.get("training", IndexSettings.training), system.options.get("hashing", IndexSettings.hashing)
    out = cached_index_dir(work / f"{_slug(task.name.split('[')[0])}-{key}", _slug(index_label), encoder, store, code_bytes, factory,
                           training, hashing)
    writer = IndexWriter(
        out, encoder, shard_docs=10_000, factory=factory,
        backend=system.options.get("backend", "faiss"), store=store,
        code_bytes=code_bytes, bits=int(system.options.get("bits", IndexSettings.bits)),
        hashing=hashing, training=training,
        inputs={"task": task.name, "corpus_sha256": key},
    )
    cache_hits = backbone.state_cache_hits
    manifest = writer.build(corpus)
    return out, encoder, manifest, backbone.state_cache_hits > cache_hits


def ann_bytes(index: Path, manifest: dict[str, Any]) -> int:
    """The stage-1 index on disk: every shard's index file, and the trained
    codec where shards keep standalone codes (a FAISS index file holds its own)."""
    shards = manifest["shards"]
    total = sum((index / s["name"] / s["index"]).stat().st_size for s in shards if s["index"])
    if any(s["index"] and (ann.holds_codes(s["index"]) or binary.holds_bits(s["index"])) for s in shards):
        total += manifest["index"]["trained_bytes"]
    return total


def all_in_bytes(index: Path, manifest: dict[str, Any], dim: int) -> int:
    """What stage 1 and stage 2 read, all in: ANN index files, the float16
    copy, document offsets (not the text). Indexes from before the float16 file kept that copy
    in LMDB, unlisted: 2 * dim bytes a vector."""
    shards = manifest["shards"]
    total = ann_bytes(index, manifest) + 8 * sum(s["docs"] + 1 for s in shards)
    return total + sum((s.get("stored_bytes") or 0) if "stored" in s else 2 * dim * s["vectors"] for s in shards)


def cached_index_dir(corpus_dir: Path, label: str, encoder: "Encoder", store: str = IndexSettings.store, code_bytes: int = CODE_BYTES,
                     factory: str | None = None, training: str = IndexSettings.training, hashing: str = IndexSettings.hashing) -> Path:
    """Where eval keeps a system's index over one corpus: named for the
    system's spec, or, when the index there was built by what the spec meant
    before (new weights under a name, a default factory, store or hashing map that has moved on,
    codes from before standalone codes, their scaling and their stored scales), for the spec and what it means now,
    so the old index is neither reused nor in the way."""
    out = corpus_dir / label
    if not (out / "manifest.json").is_file():
        return out
    manifest = read_manifest(out)
    now: dict[str, Any] = {}
    built = (manifest.get("index") or {}).get("factory")
    if factory is None and built and manifest["index"]["backend"] == "faiss":
        n = manifest["counts"]["vectors"]
        chosen = binary.default_factory(n) if store == "binary" else ann.default_factory(n, encoder.dim, store, code_bytes)
        if chosen != built:
            now["factory"] = chosen
    if store == "codes" and "IVF" in (built or "") and (
            any(s["index"] and not ann.holds_codes(s["index"]) for s in manifest["shards"])
            or "vector_norm" not in manifest["index"]  # codes decoded unscaled
            or (manifest["index"]["vector_norm"] is not None and not manifest["index"].get("scaled_codes"))):  # scales not stored
        now["codes"] = ann.CODES_FILE
    if built and "IVF" in built and manifest["index"]["backend"] == "faiss" and store != "binary":
        effort = ann.training(training, manifest["counts"]["vectors"])
        if manifest["index"].get("training", "full") != effort:
            now["training"] = effort  # trained before the size rule, or under another
    if store_of(manifest) != store:  # built with the other store (the default before codes)
        now["store"] = store
    elif store == "binary" and (manifest["index"].get("hashing") or {}).get("method") != hashing:
        now["hashing"] = hashing  # built under another default map
    if recorded_config(manifest["encoder"]) != encoder.config() or now:
        key = encoder.config() if not now else {"encoder": encoder.config(), **now}
        out = corpus_dir / f"{label}-{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]}"
    return out


def _slug(name: str) -> str:
    return re.sub(r"[^\w.-]+", "-", name.replace("=", "-")).strip("-")
