"""eval/RESULTS.md, the scoreboard: rendered from the JSON files `propdex eval` writes.

    python -m propdex.eval.scoreboard                      # rewrite eval/RESULTS.md (and README's headline) from eval/results/scoreboard/
    python -m propdex.eval.scoreboard agree RESULT.json --topics FILE --qrels FILE [--level doc|sentence]

Every figure in the file comes from a JSON file it names, which records the
command that wrote it, the commit and the library versions. `agree` checks
that what `propdex eval` reports is what a user gets: for `bm25`,
`tokens+bm25` and `tokens+bm25:hops=2` it writes a TREC run with `propdex
search --topics` on the eval's own `tokens` index, scores it with `propdex
eval run`, and records both figures side by side.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from propdex.encoders.hashing import METHODS
from propdex.indexer.settings import IndexSettings

from .bench_board import bench_tables
from .render import cell, cited, header, load, row

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "eval" / "results" / "scoreboard"
# The runs behind each table: one run, or the first run and later ones that
# added grains to it (same commit's search path, same index cache, same
# queries; each named with its command above the table).
RUNS = {
    "scifact": ("scifact.json", "scifact_grains.json", "scifact_ratio.json"),
    "hotpotqa": ("hotpotqa.json", "hotpotqa_grains.json", "hotpotqa_beside.json", "hotpotqa_ratio.json"),
    "hotpotqa_sentence": ("hotpotqa_sentence.json", "hotpotqa_sentence_grains.json"),
    "hotpotqa_unit": ("hotpotqa_unit.json",),
    "propsegment": ("propsegment.json",),
    "hotpotqa_binary": ("hotpotqa_binary.json",),
    "scifact_binary": ("scifact_binary.json",),
}
# The datasets, in the order the scoreboard shows them: (runs, heading, metric columns).
TABLES = (
    ("scifact", "SciFact (BEIR test, 300 claims, 5,183 abstracts)", ("nDCG@10", "Recall@100", "MRR@10")),
    ("hotpotqa", "HotpotQA-600, documents (600 dev distractor questions over their 5,900 paragraphs)",
     ("Recall@2", "Recall@10", "Recall@20", "AllGold@2", "AllGold@10", "AllGold@20")),
    ("hotpotqa_sentence", "HotpotQA-600, sentences (gold: the supporting facts)",
     ("Recall@2", "Recall@10", "Recall@20", "AllGold@2", "AllGold@10", "AllGold@20")),
    ("propsegment", "PropSegment (dev, atomic facts: propositions entailing the query)", ("P@1", "R@5", "R@10", "R@20")),
    ("hotpotqa_binary", "HotpotQA-600, binary codes (`nugget`, `store=binary`)", ("Recall@2", "Recall@10", "AllGold@10")),
    ("scifact_binary", "SciFact, binary codes (`tokens`, `store=binary`)", ("nDCG@10", "Recall@100")),
)
# Binary codes: (table, metric, the codes of the default store they are measured against).
BINARY = (("hotpotqa_binary", "Recall@10", "nugget"), ("scifact_binary", "nDCG@10", "tokens"))
# Beside the default codes, where a binary table's run has them: (spec suffix, what it is).
REFERENCES = ((":store=float16:exact=1", "exact float32 MaxSim"), (":code_bytes=50", "the default codes at 50 B"))
# The maps a binary table compares: the store's default first (a spec without `hashing=`), then the rest.
HASHINGS = (IndexSettings.hashing, *(m for m in METHODS if m != IndexSettings.hashing))
CONTEXTS = (("hotpotqa", "doc"), ("hotpotqa_sentence", "sentence"), ("hotpotqa_unit", "unit"))
BUDGETS = (50, 100, 200, 500)
AGREEMENT = ("agree_scifact.json", "agree_hotpotqa.json")
AGREED_SYSTEMS = {"bm25": ["--bm25"], "tokens+bm25": ["--hybrid"], "tokens+bm25:hops=2": ["--hybrid", "--hops", "2"]}
GRAINS = ("single", "tokens", "nugget", "proposition", "proposition:beside=1", "crossthought")
HEADLINE = ("bm25", "single", "tokens", "nugget", "proposition", "crossthought", "tokens+bm25", "tokens+bm25:hops=2")


def runs(key: str, folder: Path = RESULTS) -> dict[str, Any] | None:
    """The runs of RUNS[key] that exist, as one result: their systems in
    order (a later run does not replace a system an earlier one measured),
    and `parts`, (file, result) of each."""
    parts = [(name, r) for name in RUNS[key] if (r := load(name, folder)) is not None]
    if not parts:
        return None
    systems: dict[str, Any] = {}
    for _, r in parts:
        for system, figures in r["systems"].items():
            systems.setdefault(system, figures)
    return {"systems": systems, "parts": parts}


def provenance(result: dict[str, Any], name: str) -> list[str]:
    v = result["versions"]
    return cited(f"`eval/results/scoreboard/{name}`, commit {v.get('git')}, torch {v.get('torch')}, faiss "
                 f"{v.get('faiss-cpu', v.get('faiss-gpu'))}:", result["command"])


def table(result: dict[str, Any], metrics: Sequence[str]) -> list[str]:
    head = ["system", *metrics, "vec/doc", "B/vec all in", "encode s", "p50 ms"]
    lines = header(head)
    for name, s in result["systems"].items():
        encode = "–" if s.get("encode_s") is None else ("shared" if s.get("encode_shared") else cell(s["encode_s"], 0))
        lines.append(row([name, *(cell(s["metrics"].get(m), 2, 100) for m in metrics), cell(s.get("vectors_per_doc"), 1),
                           cell(s.get("all_in_bytes_per_vector"), 0), encode, cell(s["latency_ms_p50"], 1)]))
    return lines


def headline(folder: Path = RESULTS) -> list[str]:
    """One row a system: the figure each dataset is known by, and its cost on SciFact."""
    scifact, hotpot, sentence = (runs(n, folder) for n in ("scifact", "hotpotqa", "hotpotqa_sentence"))
    head = ["system", "SciFact nDCG@10", "HotpotQA R@10", "HotpotQA AllGold@10", "HotpotQA sentence R@10",
            "vec/doc (SciFact)", "B/vec all in", "p50 ms (SciFact)"]
    lines = header(head)

    def get(result: dict[str, Any] | None, system: str, key: str, metric: bool = True) -> float | None:
        s = (result or {}).get("systems", {}).get(system)
        if s is None:
            return None
        return s["metrics"].get(key) if metric else s.get(key)

    for system in HEADLINE:
        lines.append(row([f"`{system}`", cell(get(scifact, system, "nDCG@10"), 2, 100), cell(get(hotpot, system, "Recall@10"), 2, 100),
                           cell(get(hotpot, system, "AllGold@10"), 2, 100), cell(get(sentence, system, "Recall@10"), 2, 100),
                           cell(get(scifact, system, "vectors_per_doc", False), 1), cell(get(scifact, system, "all_in_bytes_per_vector", False), 0),
                           cell(get(scifact, system, "latency_ms_p50", False), 1)]))
    return lines


def grains(folder: Path = RESULTS) -> list[str]:
    """What each grain costs and buys, against `single` in the same runs."""
    scifact, hotpot, sentence = (runs(n, folder) for n in ("scifact", "hotpotqa", "hotpotqa_sentence"))
    if not (scifact and hotpot):
        return []
    lines = []
    at_sentence = sentence["systems"] if sentence else {}
    base = {"s": scifact["systems"]["single"], "h": hotpot["systems"]["single"], "t": at_sentence.get("single")}
    for grain in GRAINS:
        s, h, t = scifact["systems"].get(grain), hotpot["systems"].get(grain), at_sentence.get(grain)
        fs, fh = scifact["systems"].get(f"{grain}+bm25"), hotpot["systems"].get(f"{grain}+bm25:hops=2")
        if s is None and h is None:
            continue
        where, c = ("a SciFact abstract", s) if s is not None else ("a HotpotQA paragraph", h)
        per_doc = c["vectors_per_doc"] * c["all_in_bytes_per_vector"]
        cost = f"{c['vectors_per_doc']:.1f} vectors and {per_doc / 1024:.1f} KiB {where}, {c['latency_ms_p50']:.0f} ms p50 a query"
        sentences = "" if t is None or base["t"] is None else \
            f" and {100 * (t['metrics']['Recall@10'] - base['t']['metrics']['Recall@10']):+.2f} on its sentences"
        if grain == "single":
            sentences = "" if t is None else f" and {100 * t['metrics']['Recall@10']:.2f} on its sentences"
            buys = f"nDCG@10 {100 * s['metrics']['nDCG@10']:.2f} on SciFact" + (
                "" if h is None else f", Recall@10 {100 * h['metrics']['Recall@10']:.2f} on HotpotQA documents{sentences}")
        else:
            on_scifact = "not run on SciFact" if s is None else \
                f"nDCG@10 {100 * (s['metrics']['nDCG@10'] - base['s']['metrics']['nDCG@10']):+.2f} on SciFact"
            buys = f"against `single`, {on_scifact}" + (
                " (not yet run on HotpotQA)" if h is None else
                f", Recall@10 {100 * (h['metrics']['Recall@10'] - base['h']['metrics']['Recall@10']):+.2f} on HotpotQA documents{sentences}")
        fused = ""
        if fs or fh:
            fused = "; fused with BM25" + ("" if fs is None else f", {100 * fs['metrics']['nDCG@10']:.2f} nDCG@10 on SciFact") + (
                "" if fh is None else f", and with the second hop {100 * fh['metrics']['AllGold@10']:.2f} AllGold@10 on HotpotQA")
        lines.append(f"- `{grain}`: {cost}; {buys}{fused}.")
    return lines


def context_rows(folder: Path = RESULTS) -> list[tuple[str, str, dict[str, float]]]:
    """(system, level, context figures) of every HotpotQA run that packed contexts."""
    rows = []
    for key, level in CONTEXTS:
        result = runs(key, folder)
        for system, s in (result or {}).get("systems", {}).items():
            if "context" in s:
                rows.append((system, level, s["context"]))
    return rows


def contexts(folder: Path = RESULTS) -> list[str]:
    """HotpotQA-600's packed contexts: answer and supporting-fact recall at
    each budget, every system and level; the best row at 200 words chosen
    on the odd-numbered questions, and how it holds on the even ones."""
    rows = context_rows(folder)
    if not rows:
        return []
    files = ", ".join(f"`{name}`" for key, _ in CONTEXTS for name, r in (runs(key, folder) or {"parts": []})["parts"]
                      if any("context" in s for s in r["systems"].values()))
    head = ["system", "level", *(f"answer@{w}" for w in BUDGETS), *(f"support@{w}" for w in BUDGETS)]
    lines = [f"From {files} (the `--words 50,100,200,500` of their commands). answer@l: the gold answer, normalised as",
             "HotpotQA's script does, is in the first l words (yes/no questions left out); support@l: the share of supporting",
             "sentences held whole. The packing is `Index.context`'s.", "", *header(head)]
    for system, level, c in rows:
        lines.append(row([system, level, *(cell(c.get(f"answer@{w}"), 2, 100) for w in BUDGETS),
                           *(cell(c.get(f"support@{w}"), 2, 100) for w in BUDGETS)]))
    lines += ["", *context_findings(rows)]
    best = max(rows, key=lambda r: r[2].get("answer@200_odd", -1))
    lines += ["", f"Best at 200 words on the odd-numbered questions: `{best[0]}` at {best[1]} level, answer@200 "
                  f"{100 * best[2]['answer@200_odd']:.2f} there and {100 * best[2]['answer@200_even']:.2f} on the even ones."]
    return lines


def context_findings(rows: list[tuple[str, str, dict[str, float]]]) -> list[str]:
    """The two questions the context table answers: do finer grains give the
    same answers in half the words, and do propositions earn their place."""
    def get(system: str, level: str, key: str) -> float | None:
        return next((c.get(key) for s, lv, c in rows if s == system and lv == level), None)

    best100 = max(rows, key=lambda r: r[2].get("answer@100", -1))
    doc = [r for r in rows if r[1] == "doc"]
    lines = []
    if doc:
        best_doc = max(doc, key=lambda r: r[2].get("answer@200", -1))
        gap = 100 * (best100[2]["answer@100"] - best_doc[2]["answer@200"])
        lines.append(f"Half the words: the best answer@100, `{best100[0]}` at {best100[1]} level, {100 * best100[2]['answer@100']:.2f}; "
                     f"the best passage-level answer@200, `{best_doc[0]}`, {100 * best_doc[2]['answer@200']:.2f} "
                     f"({'met' if gap >= 0 else 'not met'}: {gap:+.2f}).")
    prop = {w: get("proposition", "unit", f"answer@{w}") for w in (50, 100)}
    if all(v is not None for v in prop.values()):
        against = []
        for other in ("single", "tokens"):
            figures = [(w, get(other, "sentence", f"answer@{w}")) for w in (50, 100)]
            if all(v is not None for _, v in figures):
                against.append(f"`{other}` sentences " + ", ".join(f"{100 * (prop[w] - v):+.2f} at {w}" for w, v in figures))
        lines.append(f"Propositions (unit level, alone): answer@50 {100 * prop[50]:.2f}, answer@100 {100 * prop[100]:.2f}; against "
                     + "; ".join(against) + " words (where the difference comes from: notebook/contexts.md).")
    return lines


def binary_findings(key: str, metric: str, default: str, folder: Path = RESULTS) -> list[str]:
    """Per code size: the default map's codes against the default codes and
    each other map at the same bits, in points of `metric`."""
    result = runs(key, folder)
    if result is None:
        return []
    systems = result["systems"]

    def value(name: str) -> float | None:
        s = systems.get(name)
        return None if s is None else 100 * s["metrics"][metric]

    def spec(base: str, bits: int, hashing: str) -> str:
        return f"{base}:store=binary:bits={bits}" + ("" if hashing == HASHINGS[0] else f":hashing={hashing}")

    base = default.split(":")[0]
    lines = []
    for bits in (128, 256):
        mine = value(spec(base, bits, HASHINGS[0]))
        if mine is None:
            continue
        parts = [f"{bits} bits ({bits // 8} B of code a vector): {HASHINGS[0]} (the default map) {mine:.2f} {metric}"]
        for suffix, what in REFERENCES:
            if (v := value(base + suffix)) is not None:
                parts.append(f"{mine - v:+.2f} against {what} ({v:.2f})")
        if (v := value(default)) is not None:
            parts.append(f"{mine - v:+.2f} against the default codes (`{default}`, {v:.2f})")
        for hashing in HASHINGS[1:]:
            if (v := value(spec(base, bits, hashing))) is not None:
                parts.append(f"{mine - v:+.2f} against {hashing}")
        lines.append("- " + "; ".join(parts) + ".")
    return lines


def agreement(folder: Path = RESULTS) -> list[str]:
    lines = []
    for name in AGREEMENT:
        result = load(name, folder)
        if result is None:
            continue
        lines += [f"`eval/results/scoreboard/{name}` ({result['task']}, commit {result['versions'].get('git')}):", ""]
        metrics = list(next(iter(result["systems"].values()))["eval"])
        head = ["system", *(f"{m} eval / run" for m in metrics)]
        lines += header(head)
        for system, s in result["systems"].items():
            lines.append(row([system, *(f"{100 * s['eval'][m]:.2f} / {100 * s['run'][m]:.2f}" for m in metrics)]))
        lines += ["", "```bash", *(s["search_command"] for s in result["systems"].values()), "```", ""]
    return lines


def readme_with_headline(readme: str, folder: Path = RESULTS) -> str:
    """The README with the scoreboard's headline table between its markers."""
    start, end = "<!-- headline:start -->\n", "<!-- headline:end -->"
    if start not in readme or end not in readme:
        raise ValueError("README.md has no headline markers")
    a, b = readme.index(start) + len(start), readme.index(end)
    return readme[:a] + "\n".join(headline(folder)) + "\n" + readme[b:]


# The scoreboard's opening paragraph, wrapped to the width of its tables' prose.
PREAMBLE = (
    'Every figure here comes from the JSON file named above its table, written by the command shown '
    'beside it, at the commit it records, at the defaults of that commit, on 2 CPU cores with no GPU '
    '(titles on, the default `codes` store, documents scored by their best passage-sized window). Each '
    'system runs through the shipped search: `A+bm25` is `propdex search --hybrid`, `:hops=2` is `--hops '
    "2`. `encode s` is the corpus's encoding time as the index's manifest recorded it when it was built: "
    'a system that shares the backbone pass of one built before it in that run (`tokens` and `nugget` '
    'after `single`) shows only its pooling. Latency is one query at a time, the query encoder included; '
    'these runs shared the two cores with each other, so p50 ranks systems only roughly and is no latency '
    'figure (`propdex bench` measures that alone). `python -m propdex.eval.scoreboard` rewrites this file '
    'from the JSON files. Lab history and older measurements (GPU, PLAID, scale) are in '
    '[notebook/](notebook/README.md).'
)


def render(folder: Path = RESULTS) -> str:
    out = [
        "# Scoreboard",
        "",
        *textwrap.wrap(PREAMBLE, 118),
        "",
        "## Headline",
        "",
        *headline(folder),
        "",
        "## What each grain costs and buys",
        "",
        *grains(folder),
        "",
    ]
    for key, heading, metrics in TABLES:
        result = runs(key, folder)
        if result is None:
            continue
        out += [f"## {heading}", "", *(line for name, r in result["parts"] for line in provenance(r, name)),
                *table(result, metrics), ""]
        for found in BINARY:
            if found[0] == key and (lines := binary_findings(*found, folder=folder)):
                out += [*lines, ""]
    if bench := bench_tables(folder):
        out += ["## Benchmarks (`propdex bench`, measured alone)", "", *bench]
    if context := contexts(folder):
        out += ["## Context for a prompt (HotpotQA-600)", "", *context, ""]
    if agree := agreement(folder):
        out += ["## Eval measures the search a user runs", "",
                "The same systems scored twice: by `propdex eval`, and from the TREC run `propdex search --topics` writes on",
                "the eval's own index, scored by `propdex eval run`.", "", *agree]
    return "\n".join(out).rstrip("\n") + "\n"


def agree(result_path: Path, topics: Path, qrels: Path, level: str, out: Path) -> dict[str, Any]:
    """Search runs for AGREED_SYSTEMS on the eval's `tokens` index, scored by `eval run`, beside eval's figures."""
    from propdex.cli import main

    from .provenance import run_versions

    result = json.loads(result_path.read_text())
    index = result["systems"]["tokens"]["index_dir"]
    systems = {}
    for system, flags in AGREED_SYSTEMS.items():
        run = out.parent / f"{out.stem}.{system.replace(':', '_').replace('+', '_')}.run"
        scored = run.with_suffix(".json")
        search = ["search", index, "--topics", str(topics), "--run", str(run), "-k", "100", "--level", level, *flags]
        if main(["-q", *search]) or main(["-q", "eval", "run", str(run), "--qrels", str(qrels), "--out", str(scored)]):
            raise SystemExit(f"agree: {system} failed")
        systems[system] = {"eval": result["systems"][system]["metrics"], "run": json.loads(scored.read_text())["metrics"],
                           "search_command": "propdex " + " ".join(map(shlex.quote, search))
                                             + f" && propdex eval run {shlex.quote(str(run))} --qrels {shlex.quote(str(qrels))}"}
        run.unlink()
        scored.unlink()
    record = {"task": result["task"], "level": level, "command": "python -m propdex.eval.scoreboard " + " ".join(map(shlex.quote, sys.argv[1:])),
              "versions": run_versions(), "eval_file": str(result_path), "systems": systems}
    out.write_text(json.dumps(record, indent=1))
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m propdex.eval.scoreboard", description=__doc__.split("\n\n")[0])
    p.add_argument("action", nargs="?", default="render", choices=("render", "agree"))
    p.add_argument("result", nargs="?", type=Path, help="agree: an eval JSON file whose systems include tokens")
    p.add_argument("--topics", type=Path)
    p.add_argument("--qrels", type=Path)
    p.add_argument("--level", default="doc", choices=("doc", "sentence"))
    p.add_argument("--out", type=Path, help="render: default eval/RESULTS.md; agree: the JSON written")
    args = p.parse_args(argv)
    if args.action == "agree":
        if not (args.result and args.topics and args.qrels and args.out):
            p.error("agree needs RESULT, --topics, --qrels and --out")
        agree(args.result, args.topics, args.qrels, args.level, args.out)
        return 0
    target = args.out or ROOT / "eval" / "RESULTS.md"
    target.write_text(render())
    print(f"{target}: {len(target.read_text().splitlines())} lines")
    if args.out is None:
        readme = ROOT / "README.md"
        readme.write_text(readme_with_headline(readme.read_text()))
        print(f"{readme}: headline table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
