"""`propdex index`: read a corpus, build an index."""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from propdex.encoders import DEFAULT_BACKBONE, ENCODERS, load_encoder

from . import ann
from .build import IndexWriter
from .readers import FORMATS, fingerprint, read_corpus

log = logging.getLogger("propdex")


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("index", help="index a corpus", description="Encode a corpus and build a sharded index.")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="files or directories (JSONL, BEIR, HotpotQA, PropSegment, MediaWiki XML, WikiExtractor)")
    p.add_argument("--out", required=True, type=Path, help="index directory (created; an unfinished build there is resumed)")
    p.add_argument("--encoder", default="tokens", choices=ENCODERS)
    p.add_argument("--format", choices=FORMATS, help="input format (default: detected)")
    p.add_argument("--shard-docs", type=int, default=10_000, help="documents per shard (default 10000)")
    p.add_argument("--factory", help="FAISS factory string (default: Flat for small corpora, else OPQ+IVF+PQ)")
    p.add_argument("--backend", default="faiss", choices=ann.BACKENDS, help="stage-1 ANN library")
    p.add_argument("--backbone", default=DEFAULT_BACKBONE, help="Hugging Face model name or local directory")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--keep-punct", action="store_true", help="tokens encoder: keep punctuation tokens")
    p.add_argument("--query-segments", action="store_true",
                   help="proposition encoder: segment queries into propositions (MaxSim) instead of one whole-query vector")
    p.add_argument("--proposition-dims", type=int,
                   help="proposition encoder: keep the head's leading dimensions (64: the paper's size; default: all 256)")
    p.add_argument("--proposition-standalone", action="store_true",
                   help="proposition encoder: encode every proposition's text alone (Dense X's way; a second pass, the in-context head's teacher)")
    p.add_argument("--nugget-ratio", type=float, help="nugget encoder: compression ratio r, k = ceil(n r) vectors per passage (default 0.25)")
    p.add_argument("--nugget-query", choices=("nuggets", "tokens"), default="tokens",
                   help="nugget encoder: encode queries as all their tokens (default) or as nuggets")
    p.add_argument("--nugget-weights", default="frozen",
                   help="nugget encoder: frozen (the backbone's own states, default), lora (the paper's trained model: AE + DocSplit), ae, or a weights directory")
    p.add_argument("--crossthought-weights", default="crossthought-5",
                   help="crossthought encoder: crossthought-3|5 (N slots), crossthought-mlm-1 (the masked-LM control), "
                        "untrained[-N] (the start training begins from), crossthought-lora-* (the earlier inline design), or a weights directory")
    p.add_argument("--limit", type=int, help="index at most N documents")
    p.add_argument("--no-title", action="store_true", help="leave documents' titles out of what the encoder and BM25 read")
    p.add_argument("--no-bm25", action="store_true", help="build no BM25 index beside the vectors")
    p.set_defaults(run=run_index)


def add_update_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("add", help="add documents to an index", description="Encode the inputs' documents and commit them to an existing index.")
    p.add_argument("index", type=Path, metavar="DIR")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="files or directories, in any format `propdex index` reads")
    p.add_argument("--format", choices=FORMATS, help="input format (default: detected)")
    p.add_argument("--update", action="store_true", help="replace documents whose id the index holds (default: refuse them)")
    p.add_argument("--device", default="auto")
    p.set_defaults(run=run_add)

    p = sub.add_parser("delete", help="delete documents from an index by id")
    p.add_argument("index", type=Path, metavar="DIR")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.set_defaults(run=run_delete)

    p = sub.add_parser("compact", help="rewrite an index's shards without their deleted documents, merging small ones")
    p.add_argument("index", type=Path, metavar="DIR")
    p.set_defaults(run=run_compact)


def run_add(args: argparse.Namespace) -> int:
    records = read_corpus(args.inputs, args.format)  # checks the paths first
    result = IndexWriter.open(args.index, device=args.device).add(records, replace=args.update)
    skipped = sum(result["skipped"].values())
    print(f"added {result['added']} documents to {args.index} ({result['replaced']} replaced); skipped {skipped} inputs"
          + (f" {json.dumps(result['skipped'])}" if skipped else ""))
    return 0


def run_delete(args: argparse.Namespace) -> int:
    result = _writer_without_encoder(args.index).delete(args.ids)
    print(f"deleted {result['deleted']} documents from {args.index}"
          + (f"; not found: {', '.join(result['missing'])}" if result["missing"] else ""))
    return 1 if result["missing"] else 0


def run_compact(args: argparse.Namespace) -> int:
    result = _writer_without_encoder(args.index).compact()
    print(f"compacted {args.index}: {result['rewritten']} shards rewritten, {result['removed']} deleted documents removed, "
          f"{result['shards']} shards")
    return 0


def _writer_without_encoder(path: Path) -> IndexWriter:
    """Deleting and compacting encode nothing: the backbone loads on the CPU."""
    return IndexWriter.open(path, device="cpu")


def run_index(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be at least 1")
    options: dict = {}
    if args.encoder == "tokens":
        options["drop_punct"] = not args.keep_punct
    if args.encoder == "proposition":
        options |= {"query_segments": args.query_segments, "dims": args.proposition_dims, "standalone": args.proposition_standalone}
    if args.encoder == "nugget":
        options |= {"ratio": args.nugget_ratio, "query": args.nugget_query, "weights": args.nugget_weights}
    if args.encoder == "crossthought":
        options["weights"] = args.crossthought_weights
    encoder = load_encoder(args.encoder, backbone=args.backbone, device=args.device, batch_size=args.batch_size, title=not args.no_title, **options)
    records = read_corpus(args.inputs, args.format)  # checks the paths first
    inputs = {"paths": [str(Path(p).resolve()) for p in args.inputs], "format": args.format, "limit": args.limit,
              "files": fingerprint(args.inputs, args.format)}
    writer = IndexWriter(args.out, encoder, shard_docs=args.shard_docs, factory=args.factory, backend=args.backend,
                         bm25=not args.no_bm25, inputs=inputs)
    manifest = writer.build(records, limit=args.limit)
    c = manifest["counts"]
    print(
        f"indexed {c['documents']} documents ({c['sentences']} sentences) as {c['vectors']} vectors "
        f"in {len(manifest['shards'])} shards [{manifest['index']['factory']}] at {args.out}; "
        f"skipped {c['skipped']} inputs {json.dumps(manifest['skipped']) if manifest['skipped'] else ''}".rstrip()
        + (f"; repaired {json.dumps(manifest['repaired'])}" if manifest.get("repaired") else "")
    )
    return 0
