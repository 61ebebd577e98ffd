"""The scale curve: the same index built over growing prefixes of one corpus.

Each point is `propdex index CORPUS --limit N --encoder E` run as its own
process (E as eval's systems spell it: index options such as
`nugget:ratio=0.1:store=binary:bits=128` become the command's flags),
exactly as a user runs it (its peak RSS is its own and is recorded in the
manifest; a point whose index is already committed is measured, not
rebuilt, so a killed curve resumes; every point trains its codec, if it
has one, in full, so the points differ only in size), then the same query
texts searched one at a time with `threads` threads in a fresh process, the query encoder's
backbone run by `runtime` (eager torch, or ONNX Runtime: encoders.runtime). Per point: documents,
vectors, encode docs/s, build seconds, peak RSS, bytes all in per vector and
per document, p50/p95 and the mean time a query spends in each stage of the search, and
the searching process's peak RSS. `project` extends the largest point's per-document
costs linearly to a target corpus size: encoding and bytes grow with the
corpus; IVF training does not (its sample is capped), so it is carried as
measured.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from propdex.indexer.manifest import read_manifest

from .indexes import all_in_bytes
from .measures import in_child, latency, torch_sync

log = logging.getLogger(__name__)


# `tokens` over 1,000 Wikipedia articles encodes for about 20 minutes on 2 cores.
SCALE_SHARD_DOCS = 1000


def scale_curve(corpus: Path, sizes: list[int], encoders: list[str], queries: list[str], work: Path,
                threads: int, runtime: str = "torch") -> dict[str, Any]:
    """{"points": [...], "corpus": ..., "queries": n, "threads": n, "query_runtime": ...}: one point per
    encoder and size, smallest first.

    Points are built in shards of SCALE_SHARD_DOCS documents: a build commits
    (and a killed bench resumes) a shard at a time, so an hours-long point
    loses at most one shard's encoding, not all of it. A point's folder is
    always handed to the same `propdex index` command: a complete index
    built as the spec builds today is left as it is, a killed one resumes,
    and one built under other settings or another encoder is refused with
    the writer's own error, never measured in the spec's name."""
    points = []
    for name in encoders:
        for n in sorted(sizes):
            out = work / f"{name.replace(':', '_')}-{n}"
            log.info("scale: %s over the first %d documents of %s in %s", name, n, corpus, out)
            command = [sys.executable, "-m", "propdex", "-q", "index", str(corpus), "--limit", str(n), "--out", str(out),
                       "--shard-docs", str(SCALE_SHARD_DOCS), *index_command(name)]
            if subprocess.run(command).returncode:
                raise ValueError(f"scale: {' '.join(command)} failed (its error is above)")
            point = {"encoder": name, "limit": n, "text_bytes": _text_bytes(corpus, n), **_build_figures(out),
                     **in_child(measure_latency, index=str(out), queries=queries, threads=threads, runtime=runtime)}
            log.info("scale: %s", point)
            points.append(point)
    return {"corpus": str(corpus), "queries": len(queries), "threads": threads, "query_runtime": runtime, "points": points}


def encode_rates(corpus: Path, sizes: list[int], encoders: list[str], device: str = "auto") -> dict[str, Any]:
    """Each encoder's docs/s alone, over the first `n` documents of `corpus`
    for each n, on `device`: cutting passages, tokenising, the forward pass
    and pooling, as `propdex index` does them, but no index. This is the
    part of a build that a GPU takes over (the FAISS training and adds stay
    on the CPU, and the scale curve measures them), so it is what projects a
    GPU build. One warm-up batch per encoder runs first, untimed."""
    from propdex.encoders import load_encoder
    from propdex.encoders.backbone import Backbone
    from propdex.encoders.provenance import hardware

    backbone = Backbone.load(device=device)
    docs = first_documents(corpus, max(sizes))
    points = []
    for name in encoders:
        encoder = load_encoder(point_spec(name)[0], backbone=backbone)
        encoder.encode([p for d in docs[:4] for p in encoder.passages(d)])
        for n in sorted(sizes):
            prefix = docs[:n]
            torch_sync(backbone.device)()
            started = time.perf_counter()
            passages = [p for ps in encoder.cut(prefix) for p in ps]
            encoded = encoder.encode(passages, progress=True)
            seconds = time.perf_counter() - started  # the vectors are on the CPU already: the device is done
            point = {"encoder": name, "batch_size": encoder.batch_size, "documents": len(prefix), "passages": len(passages),
                     "vectors": sum(len(e.units) for e in encoded), "encode_s": round(seconds, 2),
                     "encode_docs_per_s": round(len(prefix) / seconds, 1)}
            log.info("encode: %s", point)
            points.append(point)
    return {"corpus": str(corpus), "device": hardware(),
            "dtype": str(next(backbone.model.parameters()).dtype), "points": points}


def point_spec(spec: str) -> tuple[str, dict[str, str]]:
    """A point's spec as the encoder's spec and the index options written
    on it (`systems.INDEX_OPTIONS`, as eval's systems split them)."""
    from propdex.encoders.spec import split_spec

    from .systems import INDEX_OPTIONS

    name, options = split_spec(spec, "scale point")
    encoder = ":".join([name, *(f"{k}={v}" for k, v in options.items() if k not in INDEX_OPTIONS)])
    return encoder, {k: v for k, v in options.items() if k in INDEX_OPTIONS}


def index_command(spec: str) -> list[str]:
    """`propdex index` flags for a point's spec; the codec trains in full
    unless the spec says otherwise."""
    encoder, options = point_spec(spec)
    flags = {"training": "full"} | options
    return ["--encoder", encoder, *(x for k, v in flags.items() for x in (f"--{k.replace('_', '-')}", v))]


def first_documents(corpus: Path, n: int) -> list:
    """The first `n` documents `propdex index --limit n` reads (skips left out)."""
    from itertools import islice

    from propdex.encoders.units import Document
    from propdex.indexer.readers import read_corpus

    return list(islice((r for r in read_corpus([corpus]) if isinstance(r, Document)), n))


def _text_bytes(corpus: Path, n: int) -> int:
    """UTF-8 bytes of the first `n` documents' titles and texts: what
    per-document costs hide when a corpus's documents differ in length."""
    return sum(len(d.title.encode()) + len(d.text.encode()) for d in first_documents(corpus, n))


def _build_figures(index: Path) -> dict[str, Any]:
    m = read_manifest(index)
    t = m["timings"]
    docs, vectors = m["counts"]["documents"], m["counts"]["vectors"]
    total = all_in_bytes(index, m, m["encoder"]["dim"])
    return {
        "documents": docs, "vectors": vectors, "store": m["settings"]["store"], "code_bytes": m["settings"].get("code_bytes"),
        "factory": m["index"]["factory"],
        "encode_s": t["encode_s"], "encode_docs_per_s": round(docs / t["encode_s"], 2) if t["encode_s"] else None,
        "build_s": round(t["encode_s"] + t["train_s"] + t["add_s"], 1), "train_s": t["train_s"], "add_s": t["add_s"],
        "peak_rss_mb": t.get("peak_rss_mb"),
        "bytes_per_vector": round(total / vectors, 1), "bytes_per_doc": round(total / docs, 1),
    }


def measure_latency(index: str, queries: list[str], threads: int, runtime: str = "torch") -> dict[str, Any]:
    """p50/p95 of one-at-a-time searches (k=10, query encoding included, its
    backbone run by `runtime`), the mean milliseconds a query spends in each
    stage of the shipped search (`retriever.stage_times`: which part grows
    with the index), and the searching process's peak RSS; runs in a child
    (`in_child`)."""
    import resource

    from propdex.encoders import encoder_from_config
    from propdex.retriever import STAGES, Searcher, stage_times

    encoder = encoder_from_config(read_manifest(Path(index))["encoder"], device="cpu", runtime=runtime)
    with Searcher.load(Path(index), encoder=encoder, threads=threads) as searcher:
        searcher.search(queries[0], k=10)  # load pages and kernels once
        times = []
        with stage_times() as spent:
            for text in queries:
                started = time.perf_counter()
                searcher.search(text, k=10)
                times.append((time.perf_counter() - started) * 1000)
    stages = {name: round(spent[name] * 1000 / len(queries), 2) for name in STAGES if name in spent}
    rss_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return latency(times) | {"stages_ms": stages, "query_runtime": encoder.backbone.runtime, "search_rss_mb": rss_mb}


def project(points: list[dict[str, Any]], documents: int) -> dict[str, dict[str, Any]]:
    """Per encoder, the largest point's per-document encode seconds and bytes
    times `documents`, and per gigabyte of text; its training seconds as measured."""
    out = {}
    for name in dict.fromkeys(p["encoder"] for p in points):
        big = max((p for p in points if p["encoder"] == name), key=lambda p: p["documents"])
        scale, per_gb = documents / big["documents"], 1e9 / big["text_bytes"]
        out[name] = {
            "from_documents": big["documents"], "documents": documents,
            "encode_hours": round(big["encode_s"] * scale / 3600, 1),
            "add_hours": round(big["add_s"] * scale / 3600, 2), "train_s": big["train_s"],
            "vectors": round(big["vectors"] * scale), "bytes_all_in_gb": round(big["bytes_per_doc"] * documents / 1e9, 1),
            # Per gigabyte of text, for a corpus whose documents are shorter or longer.
            "per_text_gb": {"encode_hours": round(big["encode_s"] * per_gb / 3600, 2), "vectors": round(big["vectors"] * per_gb),
                            "bytes_all_in_gb": round(big["bytes_per_doc"] * big["documents"] * per_gb / 1e9, 2)},
        }
    return out


def plot(curve: dict[str, Any], path: Path) -> None:
    """Encode docs/s, build seconds, peak RSS, bytes and p50 against corpus size (log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("encode_docs_per_s", "encode docs/s"), ("build_s", "build s"), ("peak_rss_mb", "peak RSS MB"),
              ("bytes_per_doc", "bytes per document, all in"), ("p50_ms", "p50 ms, one thread")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.4))
    for ax, (key, label) in zip(axes, panels):
        for name in dict.fromkeys(p["encoder"] for p in curve["points"]):
            pts = [p for p in curve["points"] if p["encoder"] == name]
            ax.plot([p["documents"] for p in pts], [p[key] for p in pts], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_xlabel("documents")
        ax.set_title(label)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
