"""TREC runs: topics in, runs out, runs scored; eval measures what search ships."""
import json
import subprocess
import sys

import pytest

from conftest import HOTPOT
from propdex.cli import main
from propdex.retriever import trec


def test_topics_come_as_tsv_beir_jsonl_or_hotpotqa_json_and_a_bad_line_is_named(tmp_path):
    tsv = tmp_path / "topics.tsv"
    tsv.write_text("q1\tWho founded it?\n\nq 2\tWhen?\r\n")
    assert trec.read_topics(tsv) == [("q1", "Who founded it?"), ("q 2", "When?")]
    jsonl = tmp_path / "queries.jsonl"
    jsonl.write_text('{"_id": 7, "text": "a claim", "metadata": {}}\n{"_id": "8", "text": "another"}\n')
    assert trec.read_topics(jsonl) == [("7", "a claim"), ("8", "another")]
    hotpot = tmp_path / "hotpot.json"
    hotpot.write_text(json.dumps([{"_id": "x", "question": "Which?", "context": []}]))
    assert trec.read_topics(hotpot) == [("x", "Which?")]
    tsv.write_text("q1\tfine\nq2 no tab here\n")
    with pytest.raises(ValueError, match=r"topics.tsv:2: expected 'qid<TAB>text'"):
        trec.read_topics(tsv)
    jsonl.write_text('{"_id": 1, "text": "ok"}\n{"_id": 2}\n')
    with pytest.raises(ValueError, match=r"queries.jsonl:2: line 2 is not a JSON object with '_id' and 'text'"):
        trec.read_topics(jsonl)
    tsv.write_text("q1\ta\nq1\tb\n")
    with pytest.raises(ValueError, match="'q1' appears twice"):
        trec.read_topics(tsv)


def test_a_run_round_trips_and_ir_measures_scores_it_as_computed_by_hand(tmp_path, capsys):
    run = tmp_path / "run.txt"
    with open(run, "w") as f:
        trec.write_run(f, "q1", [("a", None, 3.0), ("b c", None, 2.0), ("d#1", None, 1.0)], "t")
        # Interleaved places (a second hop) score on two scales: the run keeps the order by rank scores.
        trec.write_run(f, "q2", [("y", None, 0.2), ("x", None, 9.0)], "t")
    lines = run.read_text().splitlines()
    assert lines[1] == "q1 Q0 b%20c 2 2 t" and lines[2] == "q1 Q0 d%231 3 1 t"
    assert trec.read_run(run) == {"q1": ["a", "b c", "d#1"], "q2": ["y", "x"]}
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 b%20c 1\nq1 0 d%231 2\nq2 0 x 1\n")
    out = tmp_path / "scored.json"
    assert main(["-q", "eval", "run", str(run), "--qrels", str(qrels), "--out", str(out)]) == 0
    m = json.loads(out.read_text())["metrics"]
    # q1: gains 1 at rank 2, 2 at rank 3; ideal 2 then 1. q2: its one relevant document at rank 2.
    ndcg_q1 = (1 / 1.5849625 + 2 / 2) / (2 + 1 / 1.5849625)
    ndcg_q2 = (1 / 1.5849625) / 1
    assert m["nDCG@10"] == pytest.approx((ndcg_q1 + ndcg_q2) / 2, abs=1e-6)
    assert m["MRR@10"] == pytest.approx(0.5) and m["Recall@100"] == pytest.approx(1.0)
    assert "| run.txt |" in capsys.readouterr().out
    run.write_text("q1 Q0 a one 2.0 t\n")
    with pytest.raises(ValueError, match=r"run.txt:1: rank must be an integer"):
        trec.read_run(run)


def test_help_loads_no_eval_module():
    code = ("import sys\nfrom propdex.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('propdex.eval')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]"), out


@pytest.mark.slow
@pytest.mark.parametrize("level", ["doc", "sentence"])
def test_eval_figures_equal_search_runs_scored_by_eval_run(tmp_path, level):
    """`propdex eval` runs the shipped search: the figures it prints for
    bm25, a fusion and a two-hop fusion are those of `propdex search
    --topics` runs on the same index, scored by `propdex eval run`."""
    questions = json.loads(HOTPOT.read_text())[:12]
    data = tmp_path / "hotpot12.json"
    data.write_text(json.dumps(questions))
    out = tmp_path / "eval.json"
    systems = ["tokens", "tokens+bm25", "tokens+bm25:hops=2"] + (["bm25", "bm25:hops=2"] if level == "doc" else [])
    assert main(["-q", "eval", "hotpotqa", str(data), "--systems", ",".join(systems), "--level", level,
                 "--work", str(tmp_path / "work"), "--out", str(out), "--device", "cpu"]) == 0
    result = json.loads(out.read_text())["systems"]
    index = result["tokens"]["index_dir"]
    flags = {"tokens": [], "tokens+bm25": ["--hybrid"], "tokens+bm25:hops=2": ["--hybrid", "--hops", "2"],
             "bm25": ["--bm25"], "bm25:hops=2": ["--bm25", "--hops", "2"]}
    for spec in systems:
        run = tmp_path / f"{spec}.run"
        assert main(["-q", "search", index, "--topics", str(data), "--run", str(run), "-k", "100", "--level", level,
                     "--batch-size", "5", "--device", "cpu", *flags[spec]]) == 0
        scored = tmp_path / f"{spec}.json"
        assert main(["-q", "eval", "run", str(run), "--qrels", str(data), "--out", str(scored)]) == 0
        figures = json.loads(scored.read_text())["metrics"]
        assert {m: round(100 * v, 2) for m, v in figures.items()} == {m: round(100 * v, 2) for m, v in result[spec]["metrics"].items()}, spec
    # The fusions and the hop change the ranking: the comparison above is not of one run with itself.
    assert result["tokens"]["metrics"] != result["tokens+bm25"]["metrics"] != result["tokens+bm25:hops=2"]["metrics"]


def test_a_results_file_names_its_commit_and_says_when_the_code_differs_from_it(tmp_path):
    """A figure is traced to its commit: run from a checkout whose code was
    changed after it, the record must say so, and changes outside the code
    (notes, results) must not."""
    import subprocess

    from propdex.eval.provenance import _git_head

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "retriever").mkdir()
    (tmp_path / "eval" / "notebook").mkdir(parents=True)
    (tmp_path / "retriever" / "hits.py").write_text("x = 1\n")
    (tmp_path / "eval" / "notebook" / "notes.md").write_text("notes\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert _git_head((tmp_path,)) == head
    (tmp_path / "eval" / "notebook" / "notes.md").write_text("more notes\n")
    assert _git_head((tmp_path,)) == head
    (tmp_path / "retriever" / "hits.py").write_text("x = 2\n")
    assert _git_head((tmp_path,)) == f"{head}-modified"
