"""Indexing on a Ray cluster: parts encoded by actors, merged into one index.

Ray Data runs one actor per part (`map_batches` over the part numbers); each
actor loads the encoder once, reads the inputs, keeps every n-th record
(`IndexWriter.build(part=(i, n))`) and writes its shards into
`OUT.parts/part-i` itself; the driver then merges the parts
(`indexer.merge`), which trains the ANN index once. With GPUs in the
cluster each actor takes one. Workers must see the inputs and OUT's parent
at the same paths (one machine, or a shared filesystem). A killed run
resumes: finished parts are kept, unfinished ones resume their builds.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class _PartBuilder:
    """A Ray actor: one encoder, loaded once, builds the parts it is handed."""

    def __init__(self, spec: str, backbone: str, device: str, batch_size: int, settings: dict[str, Any],
                 paths: list[str], format: str | None, inputs: dict[str, Any], parts_dir: str, n_parts: int) -> None:
        from propdex.encoders import load_encoder

        self.encoder = load_encoder(spec, backbone=backbone, device=device, batch_size=batch_size)
        self.settings, self.paths, self.format, self.inputs = settings, paths, format, inputs
        self.parts_dir, self.n_parts = Path(parts_dir), n_parts

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        from .build import IndexWriter
        from .readers import read_corpus

        docs = []
        for i in batch["part"]:
            writer = IndexWriter(self.parts_dir / f"part-{int(i):04d}", self.encoder, inputs=self.inputs, **self.settings)
            part = (int(i), self.n_parts)
            writer.build(read_corpus(self.paths, self.format, part=part, start=writer.resume_at), part=part)
            docs.append(writer.manifest.counts.documents)
        return {"part": batch["part"], "documents": docs}


def build_with_ray(out: Path, encoder_spec: str, *, paths: list[str], format: str | None, inputs: dict[str, Any],
                   settings: dict[str, Any], backbone: str, device: str = "auto", batch_size: int = 32,
                   parts: int | None = None, address: str | None = None, keep_parts: bool = False,
                   encoder: Any = None) -> dict[str, Any]:
    """Build the index at `out` on Ray; `encoder` (the driver's, for the
    merge) is loaded from the spec when not given."""
    import ray

    from .merge import merge

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:  # propdex -q: Ray's progress reports too
        ray.data.DataContext.get_current().enable_progress_bars = False
        logging.getLogger("ray").setLevel(logging.WARNING)
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    n = parts or max(gpus, int(ray.cluster_resources().get("CPU", 1)) // 2, 1)
    parts_dir = out.with_name(out.name + ".parts")
    log.info("encoding %d parts on Ray (%d GPUs in the cluster) into %s", n, gpus, parts_dir)
    dataset = ray.data.from_items([{"part": i} for i in range(n)])
    built = dataset.map_batches(
        _PartBuilder, batch_size=1, concurrency=min(n, gpus) if gpus else n, num_gpus=1 if gpus else 0, num_cpus=1,
        fn_constructor_kwargs={"spec": encoder_spec, "backbone": backbone, "device": "cuda" if gpus else device,
                               "batch_size": batch_size, "settings": settings, "paths": paths, "format": format,
                               "inputs": inputs, "parts_dir": str(parts_dir), "n_parts": n},
    ).take_all()
    log.info("parts encoded: %s documents", sum(int(b["documents"]) for b in built))
    manifest = merge(out, [parts_dir / f"part-{i:04d}" for i in range(n)], encoder=encoder)
    if not keep_parts:
        shutil.rmtree(parts_dir)  # the merged index holds hard links (or copies) of their stores
    return manifest
