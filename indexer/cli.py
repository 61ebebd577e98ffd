"""`propdex index`: read a corpus, build an index."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path

from propdex.encoders import DEFAULT_BACKBONE, ENCODERS, RUNTIMES, load_encoder
from propdex.encoders.options import add_flags, given
from propdex.encoders.spec import EncoderSpec

from .build import IndexWriter
from .settings import IndexSettings
from .readers import FORMATS, fingerprint, read_corpus

log = logging.getLogger("propdex")

# Earlier spellings of encoder options, kept for scripts: (flag, argparse
# keywords, the option it sets, of which encoder).
_LEGACY = [
    ("--keep-punct", {"action": "store_true"}, "drop_punct", "tokens"),
    ("--query-segments", {"action": "store_true"}, "query_segments", "proposition"),
    ("--proposition-dims", {"type": int}, "dims", "proposition"),
    ("--proposition-standalone", {"action": "store_true"}, "standalone", "proposition"),
    ("--nugget-ratio", {"type": float}, "ratio", "nugget"),
    ("--nugget-query", {}, "query", "nugget"),
    ("--nugget-weights", {}, "weights", "nugget"),
    ("--crossthought-weights", {}, "weights", "crossthought"),
]


def _spec(text: str) -> EncoderSpec:
    try:
        return EncoderSpec.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="index a corpus", description="Encode a corpus and build a sharded index.")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="files or directories (JSONL, BEIR, HotpotQA, PropSegment, MediaWiki XML, WikiExtractor)")
    p.add_argument("--out", required=True, type=Path, help="index directory (created; an unfinished build there is resumed)")
    p.add_argument("--encoder", default="tokens", type=_spec, metavar="NAME[:option=value...]",
                   help=f"encoder and its options, as eval's systems spell them: {', '.join(ENCODERS)}; "
                        f"e.g. proposition:dims=64, nugget:ratio=0.25, crossthought:weights=crossthought-3 (default tokens)")
    p.add_argument("--format", choices=FORMATS, help="input format (default: detected)")
    add_flags(p, IndexSettings)
    p.add_argument("--backbone", default=DEFAULT_BACKBONE, help="Hugging Face model name or local directory")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--runtime", default="torch", choices=RUNTIMES,
                   help="what runs the backbone on a CPU: torch, or ONNX Runtime (extra [onnx]; onnx-int8: int8 weights, fastest)")
    p.add_argument("--batch-size", type=int, default=32)
    for flag, kind, _, _ in _LEGACY:
        p.add_argument(flag, help=argparse.SUPPRESS, **kind)
    p.add_argument("--limit", type=int, help="index at most N documents")
    p.add_argument("--no-title", action="store_true", help="leave documents' titles out of what the encoder and BM25 read")
    split = p.add_argument_group("beyond one machine", "encode parts in parallel, then commit them as one index, trained once")
    split.add_argument("--num-shards", type=int, help="with --shard-id: build part I of N (records I, I+N, ...), encoded only; "
                                                      "then `propdex merge OUT PART...` (SLURM arrays and the like)")
    split.add_argument("--shard-id", type=int, help="which part this process builds (0..N-1)")
    split.add_argument("--ray", action="store_true", help="encode the parts on a Ray cluster (extra [ray]) and merge them into --out")
    split.add_argument("--ray-address", help="Ray cluster to join (default: start a local one; 'auto': the running one)")
    split.add_argument("--ray-parts", type=int, help="parts (Ray actors) to split the input into (default: one per GPU, else per 2 CPUs)")
    p.set_defaults(run=run_index)


def add_update_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("add", help="add documents to an index", description="Encode the inputs' documents and commit them to an existing index.")
    p.add_argument("index", type=Path, metavar="DIR")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="files or directories, in any format `propdex index` reads")
    p.add_argument("--format", choices=FORMATS, help="input format (default: detected)")
    p.add_argument("--update", action="store_true", help="replace documents whose id the index holds (default: refuse them); "
                                                         "one equal to the stored document is left alone, and a file "
                                                         "unchanged since it was read is not read again")
    p.add_argument("--delete-missing", action="store_true",
                   help="with --update: also delete every document the inputs do not hold (the index mirrors them)")
    p.add_argument("--device", default="auto")
    p.set_defaults(run=run_add)

    p = sub.add_parser("delete", help="delete documents from an index by id")
    p.add_argument("index", type=Path, metavar="DIR")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.set_defaults(run=run_delete)

    p = sub.add_parser("merge", help="commit the parts of a build as one index",
                       description="Merge parts built with --num-shards/--shard-id into OUT: their shards are linked in, "
                                   "the ANN index is trained once on all of them, BM25 is built over all documents.")
    p.add_argument("out", type=Path, metavar="OUT")
    p.add_argument("parts", nargs="+", type=Path, metavar="PART")
    p.set_defaults(run=run_merge)

    p = sub.add_parser("compact", help="rewrite an index's shards without their deleted documents, merging small ones "
                                       "(and re-training an index that outgrew its factory)")
    p.add_argument("index", type=Path, metavar="DIR")
    p.add_argument("--retrain", action="store_true", help="re-train the index on its live vectors even where its factory still fits")
    p.set_defaults(run=run_compact)


def run_add(args: argparse.Namespace) -> int:
    if args.delete_missing and not args.update:
        raise ValueError("--delete-missing mirrors the inputs, which replaces what changed: give --update with it")
    records = read_corpus(args.inputs, args.format)  # checks the paths first
    writer = IndexWriter.open(args.index, device=args.device)
    if args.update:  # files unchanged since they were read are not read again
        result = writer.sync(args.inputs, args.format, delete_missing=args.delete_missing)
    else:
        result = writer.add(records)
    skipped = sum(result["skipped"].values())
    unchanged = f", {result['unchanged']} unchanged" if args.update else ""
    unchanged += f", {result['deleted']} deleted" if args.delete_missing else ""
    print(f"added {result['added']} documents to {args.index} ({result['replaced']} replaced{unchanged}); skipped {skipped} inputs"
          + (f" {json.dumps(result['skipped'])}" if skipped else ""))
    return 0


def run_delete(args: argparse.Namespace) -> int:
    result = _writer_without_encoder(args.index).delete(args.ids)
    print(f"deleted {result['deleted']} documents from {args.index}"
          + (f"; not found: {', '.join(result['missing'])}" if result["missing"] else ""))
    return 1 if result["missing"] else 0


def run_merge(args: argparse.Namespace) -> int:
    from .merge import merge

    _print_built(merge(args.out, args.parts), args.out)
    return 0


def run_compact(args: argparse.Namespace) -> int:
    result = _writer_without_encoder(args.index).compact(retrain=args.retrain)
    retrained = result.get("retrained")
    print(f"compacted {args.index}: {result['rewritten']} shards rewritten, {result['removed']} deleted documents removed, "
          f"{result['shards']} shards" + (f", re-trained {retrained['from']} -> {retrained['to']}" if retrained else ""))
    return 0


def _writer_without_encoder(path: Path) -> IndexWriter:
    """Deleting and compacting encode nothing: the writer's encoder is never loaded (IndexWriter.open defers it)."""
    return IndexWriter.open(path, device="cpu")


def run_index(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be at least 1")
    spec = args.encoder
    legacy = {}
    for flag, _, option, name in _LEGACY:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value not in (None, False) and spec.name == name:
            legacy[option] = False if flag == "--keep-punct" else value
    spec = EncoderSpec(spec.name, {**legacy, **spec.options, **({"title": False} if args.no_title else {})})
    encoder = load_encoder(spec, backbone=args.backbone, device=args.device, batch_size=args.batch_size, runtime=args.runtime)
    if (args.num_shards is None) != (args.shard_id is None):
        raise ValueError("--num-shards and --shard-id go together")
    part = None if args.num_shards is None else (args.shard_id, args.num_shards)
    read_corpus(args.inputs, args.format)  # checks the paths before anything is written
    inputs = {"paths": [str(Path(p).resolve()) for p in args.inputs], "format": args.format, "limit": args.limit,
              "files": fingerprint(args.inputs, args.format)}
    settings = dataclasses.asdict(IndexSettings(**given(args, IndexSettings)))
    if args.ray:
        if args.num_shards is not None or args.limit is not None:
            raise ValueError("--ray splits the input itself: leave out --num-shards/--shard-id and --limit")
        try:
            from .distributed import build_with_ray
        except ImportError as e:
            raise ValueError(f"--ray needs the [ray] extra (pip install 'propdex[ray]'): {e}") from None
        manifest = build_with_ray(args.out, str(spec), paths=[str(p) for p in args.inputs], format=args.format, inputs=inputs,
                                  settings=settings, backbone=args.backbone, device=args.device, batch_size=args.batch_size,
                                  parts=args.ray_parts, address=args.ray_address, encoder=encoder)
        _print_built(manifest, args.out)
        return 0
    writer = IndexWriter(args.out, encoder, inputs=inputs, **settings)
    records = read_corpus(args.inputs, args.format, part=part, start=writer.resume_at)  # a resumed build reads on where it stopped
    manifest = writer.build(records, limit=args.limit, part=part)
    if part is not None:
        c = manifest["counts"]
        print(f"encoded part {part[0]} of {part[1]}: {c['documents']} documents as {c['vectors']} vectors in "
              f"{len(manifest['shards'])} shards at {args.out}; commit the parts with `propdex merge OUT PART...`")
        return 0
    _print_built(manifest, args.out)
    return 0


def _print_built(manifest: dict, out: Path) -> None:
    c = manifest["counts"]
    print(
        f"indexed {c['documents']} documents ({c['sentences']} sentences) as {c['vectors']} vectors "
        f"in {len(manifest['shards'])} shards [{manifest['index']['factory']}] at {out}; "
        f"skipped {c['skipped']} inputs {json.dumps(manifest['skipped']) if manifest['skipped'] else ''}".rstrip()
        + (f"; repaired {json.dumps(manifest['repaired'])}" if manifest.get("repaired") else "")
    )
