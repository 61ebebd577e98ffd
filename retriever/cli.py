"""`propdex search`, `propdex info` and `propdex verify`."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tqdm.auto import tqdm

from propdex.encoders import RUNTIMES
from propdex.encoders.options import add_flags, given
from propdex.indexer import integrity
from propdex.indexer.info import summary
from propdex.indexer.manifest import read_manifest

from . import filters, trec
from .searcher import Searcher
from .settings import SearchSettings


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="search an index", description="Search an index and print ranked results, or "
                       "answer a topics file as a TREC run (--topics FILE --run OUT).")
    p.add_argument("index", type=Path, metavar="DIR")
    p.add_argument("query", metavar="QUERY", nargs="?", help="the query (or --topics)")
    p.add_argument("--topics", type=Path, metavar="FILE", help="answer every query of a topics file: TSV 'qid<TAB>text', "
                                                               "BEIR queries.jsonl or a HotpotQA JSON file")
    p.add_argument("--run", dest="run_file", type=Path, metavar="OUT", help="with --topics: write the TREC run 'qid Q0 docno rank score tag' here")
    p.add_argument("--tag", default="propdex", help="the run's tag column (default propdex)")
    p.add_argument("--batch-size", type=int, default=32, help="queries searched at once with --topics (default 32)")
    p.add_argument("--context", type=int, metavar="WORDS", help="print the best hits packed into a prompt of at most WORDS "
                                                                "words, each piece cited (unless told: sentences, --hybrid, --hops 2)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_flags(p, SearchSettings, exclusive=("hybrid", "bm25"))
    p.add_argument("--threads", type=int, help="FAISS and torch threads (default: theirs, one per core)")
    p.add_argument("--device", default="auto")
    p.add_argument("--runtime", default="torch", choices=RUNTIMES, help="what runs the query encoder's backbone on a CPU")
    p.set_defaults(run=run_search)

    p = sub.add_parser("info", help="print an index's manifest summary as JSON")
    p.add_argument("index", type=Path, metavar="DIR")
    p.add_argument("--json", action="store_true", help="JSON (the only output format; accepted for scripts)")
    p.set_defaults(run=run_info)

    p = sub.add_parser("verify", help="check every file of an index against its manifest's sha256s",
                       description="Read every committed file of an index and compare it with the manifest; exit 1 if any differs.")
    p.add_argument("index", type=Path, metavar="DIR")
    p.set_defaults(run=run_verify)


def search_options(args: argparse.Namespace) -> dict:
    """The search options the flags give (SearchSettings' defaults for the rest)."""
    options = given(args, SearchSettings)
    if "where" in options:
        options["where"] = filters.from_clauses(options["where"])
    return options


def run_search(args: argparse.Namespace) -> int:
    if (args.query is None) == (args.topics is None):
        raise ValueError("give a QUERY or --topics FILE (with --run OUT)")
    if args.topics is not None:
        return run_topics(args)
    if args.run_file is not None:
        raise ValueError("--run writes the answers to --topics")
    if not args.query.strip():
        raise ValueError("empty query")
    try:
        args.query.encode("utf-8")
    except UnicodeEncodeError:  # argv bytes that are not UTF-8 arrive as lone surrogates
        raise ValueError("the query is not valid UTF-8") from None
    options = search_options(args)
    SearchSettings.of(**options)  # a bad option fails before the model loads
    if args.context is not None:
        return print_context(args, options)
    with Searcher.load(args.index, device=args.device, threads=args.threads, runtime=args.runtime) as searcher:
        hits = searcher.search(args.query, **options)
    if args.json:
        print(json.dumps({"query": args.query, "results": [h.to_json() for h in hits]}, ensure_ascii=False, indent=1))
        return 0
    for h in hits:
        hop = "  (second hop)" if h.hop == 2 else ""
        # The id says where a hit lives (a note's path, a page id); the title what it is about.
        name = h.doc_id if h.title in ("", h.doc_id) else f"{h.title} ({h.doc_id})"
        page = f", page {h.page}" if h.page is not None else ""
        print(f"{h.rank:>3}. {h.score:8.3f}  {printable(name)}  [sentence {h.sentence_index}{page}]{hop}")
        print(f"     {printable(highlight(h.sentence_text, h.spans))}")
    if not hits:
        print("no results")
    return 0


def print_context(args: argparse.Namespace, options: dict) -> int:
    """The packed context, then its citations (or JSON)."""
    if args.context < 1:
        raise ValueError("--context takes a budget of at least 1 word")
    # What the flags say; the rest is Index.context's defaults (retriever.context.CONTEXT_DEFAULTS).
    options = {k: v for k, v in options.items() if k not in ("k", "level")}
    with Searcher.load(args.index, device=args.device, threads=args.threads, runtime=args.runtime) as searcher:
        context = searcher.context(args.query, args.context, args.level, **options)
    if args.json:
        print(json.dumps({"query": args.query, **context.to_json()}, ensure_ascii=False, indent=1))
        return 0
    print("\n".join(printable(line) for line in context.text.split("\n")) if context.text else "no results")
    print(f"\n{context.words} of {context.budget} words; from:")
    for c in context.citations:
        page = f", page {c.page}" if c.page is not None else ""
        print(f"  [{c.at}] {printable(c.doc_id)} sentence {c.sentence}{page}, characters {c.start}-{c.end}{'' if c.whole else ' (part)'}")
    return 0


def run_topics(args: argparse.Namespace) -> int:
    """Every query of the topics file, searched in batches, written as a TREC run."""
    if args.run_file is None:
        raise ValueError("--topics needs --run OUT, the file the TREC run is written to")
    if args.level == "unit":
        raise ValueError("a TREC run names documents or sentences: use --level doc or sentence")
    if args.context is not None:
        raise ValueError("--context packs one query's hits: give a QUERY, not --topics")
    if args.batch_size < 1:
        raise ValueError("--batch-size must be at least 1")
    options = search_options(args)
    settings = SearchSettings.of(**options)
    topics = trec.read_topics(args.topics)
    sentence = settings.level == "sentence"
    started, found = time.perf_counter(), 0
    args.run_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.run_file.with_name(args.run_file.name + ".tmp")
    with Searcher.load(args.index, device=args.device, threads=args.threads, runtime=args.runtime) as searcher, \
            open(tmp, "w", encoding="utf-8") as out, tqdm(total=len(topics), unit="query", desc="search") as bar:
        for at in range(0, len(topics), args.batch_size):
            batch = topics[at:at + args.batch_size]
            for (qid, _), hits in zip(batch, searcher.search_batch([text for _, text in batch], **options)):
                trec.write_run(out, qid, [(h.doc_id, h.sentence_index if sentence else None, h.score) for h in hits], args.tag)
                found += len(hits)
            bar.update(len(batch))
    tmp.replace(args.run_file)  # a run is whole or absent
    elapsed = time.perf_counter() - started
    print(f"{len(topics)} queries, {found} results, written to {args.run_file} in {elapsed:.1f}s ({1000 * elapsed / max(len(topics), 1):.1f} ms a query)")
    return 0


def highlight(text: str, spans: list[tuple[int, int]]) -> str:
    """Mark matched spans with [brackets] for a terminal. Spans that touch
    or overlap are marked as one: the word pieces of one word ("code" "c")
    read as the word ("[codec]"), and no text is marked twice."""
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, pos = [], 0
    for a, b in merged:
        out += [text[pos:a], "[", text[a:b], "]"]
        pos = b
    out.append(text[pos:])
    return "".join(out)


def printable(text: str) -> str:
    """Text safe for a terminal: control characters (escape sequences among
    them) shown as \\x.. escapes instead of being obeyed."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def run_info(args: argparse.Namespace) -> int:
    print(json.dumps(summary(args.index), indent=1, ensure_ascii=False))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    m = read_manifest(args.index)
    files = integrity.committed_files(m)
    problems = integrity.check(args.index, m, full=True)
    for problem in problems:
        print(f"damaged: {problem}")
    size = sum((args.index / f.path).stat().st_size for f in files if integrity.inside(f.path) and (args.index / f.path).is_file())
    verdict = f"{len(problems)} of {len(files)} files damaged" if problems else f"ok: {len(files)} files, {size:,} bytes match the manifest"
    print(f"{args.index}: {verdict} (status {m['status']})")
    return 1 if problems else 0
