"""The `propdex` command: each layer contributes its own subcommands."""
from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
from pathlib import Path

import lmdb

from propdex.encoders import RUNTIMES
from propdex.encoders.training import cli as training_cli
from propdex.indexer import cli as indexer_cli
from propdex.retriever import cli as retriever_cli

# The measuring commands live in propdex.eval, which nothing imports at
# start-up: a command's module is loaded only when that command runs.
MEASURING = {
    "eval": ("propdex.eval.run", "measure systems side by side, or score a TREC run"),
    "bench": ("propdex.eval.bench", "performance figures on real data"),
    "loadtest": ("propdex.eval.loadtest", "drive a running `propdex serve` with concurrent searches and adds"),
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line; `argv` names the command whose measuring module, if
    it has one, is loaded (the others are listed by name and help only)."""
    parser = argparse.ArgumentParser(prog="propdex", description="Multi-vector retrieval: index text, search it, measure it.")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    indexer_cli.add_commands(sub)
    indexer_cli.add_update_commands(sub)
    retriever_cli.add_commands(sub)
    command = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    for name, (module, help) in MEASURING.items():
        if name == command:
            importlib.import_module(module).add_commands(sub)
        else:
            sub.add_parser(name, help=help, add_help=False)
    add_serve_command(sub)
    training_cli.add_commands(sub)
    return parser


def add_serve_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve an index over HTTP (extra [serve])",
                       description="Search and change an index over HTTP: /v1/search, /v1/docs, /v1/info, /healthz; OpenAPI at /docs.")
    p.add_argument("index", type=Path, metavar="DIR")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="worker processes (each loads the index; writes stay serialised)")
    p.add_argument("--token", default=os.environ.get("PROPDEX_TOKEN"), help="bearer token the write routes require (default: $PROPDEX_TOKEN)")
    p.add_argument("--threads", type=int, default=1,
                   help="FAISS and torch threads per worker (default 1: concurrent requests are the parallelism, and on 2 cores "
                        "threads would only contend; 0: their own default, one per core)")
    p.add_argument("--device", default="auto")
    p.add_argument("--runtime", default="torch", choices=RUNTIMES,
                   help="what runs the query encoder's backbone on a CPU (onnx: under half eager torch's time a query)")
    p.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ValueError("--workers must be at least 1")
    if args.threads < 0:
        raise ValueError("--threads must be 0 (the libraries' default) or more")
    try:
        from propdex.serve import serve
    except ImportError as e:
        raise ValueError(f"propdex serve needs the [serve] extra (pip install 'propdex[serve]'): {e}") from None
    serve(args.index, host=args.host, port=args.port, workers=args.workers, token=args.token, device=args.device, threads=args.threads or None,
          runtime=args.runtime)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser(argv).parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        return args.run(args)
    except (ValueError, FileNotFoundError, NotADirectoryError, PermissionError, ImportError) as e:
        # User errors (a missing extra among them): one line, no traceback.
        print(f"propdex: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `propdex ... | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (OSError, lmdb.Error) as e:
        # A full disk (LMDB reports it as its own error with the errno's text).
        if getattr(e, "errno", None) not in (errno.ENOSPC, errno.EDQUOT) and "No space left" not in str(e):
            raise
        where = f" writing {e.filename}" if getattr(e, "filename", None) else ""
        print(f"propdex: error: no space left on the device{where}; free some and run the same command again "
              f"(a build resumes from its last commit)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("propdex: interrupted (a build resumes where it stopped when run again)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
