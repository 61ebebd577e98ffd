"""eval/RESULTS.md and README's headline are what the scoreboard's JSON files say."""
import re
from pathlib import Path

import pytest

from propdex.eval import bench_board, scoreboard

ROOT = Path(__file__).resolve().parents[1]


def test_the_scoreboard_is_rendered_from_the_json_files_it_cites():
    results = (ROOT / "eval" / "RESULTS.md").read_text()
    assert results == scoreboard.render(), "eval/RESULTS.md is stale: run python -m propdex.eval.scoreboard"
    assert len(results.splitlines()) <= 380  # short: tables and their commands, no lab notes (eval/notebook/)
    for name in re.findall(r"eval/results/scoreboard/([\w.]+\.json)", results):
        assert (scoreboard.RESULTS / name).is_file(), name
    for table, _, _ in scoreboard.TABLES:
        assert f"eval/results/scoreboard/{table}" in results


def test_readmes_headline_is_the_scoreboards_within_its_first_screen():
    readme = (ROOT / "README.md").read_text()
    assert readme == scoreboard.readme_with_headline(readme), "README's headline is stale: run python -m propdex.eval.scoreboard"
    lines = readme.splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("<!-- headline:end"))
    assert end < 80 and "| `tokens+bm25:hops=2` |" in "\n".join(lines[:end])
    assert "session" not in readme.lower()


def test_binary_findings_read_the_default_map_from_the_spec_without_hashing(tmp_path):
    """A binary table's summary compares the spec without `hashing=` (the
    store's default map) against the default codes and every other map."""
    import json

    figures = {"nugget": 0.80, "nugget:store=binary:bits=128": 0.75, "nugget:store=binary:bits=128:hashing=learned": 0.70,
               "nugget:store=binary:bits=128:hashing=lsh": 0.72}
    (tmp_path / "hotpotqa_binary.json").write_text(json.dumps({"systems": {s: {"metrics": {"Recall@10": v}} for s, v in figures.items()}}))
    [line] = scoreboard.binary_findings("hotpotqa_binary", "Recall@10", "nugget", folder=tmp_path)
    default = scoreboard.HASHINGS[0]
    assert line.startswith(f"- 128 bits (16 B of code a vector): {default} (the default map) 75.00 Recall@10")
    assert "-5.00 against the default codes" in line and "+5.00 against learned" in line and "+3.00 against lsh" in line


def test_a_scale_curve_of_two_systems_compares_each_with_its_own_smallest_point(tmp_path):
    """Two stores measured in one scale run share a table, and each system's
    growth is read against its own points, never across systems."""
    import json

    def point(system, docs, p50):
        docs = {10: 10, 100: 6_510}[docs]
        return {"encoder": system, "documents": docs, "vectors": docs * 10, "factory": "F", "bytes_per_vector": 9.0,
                "p50_ms": p50, "p95_ms": p50 * 2, "stages_ms": {}, "text_bytes": docs * 1000}

    curve = {"queries": 5, "threads": 1, "points": [point("tokens", 10, 100.0), point("tokens", 100, 80.0),
                                                    point("tokens:store=binary", 10, 20.0), point("tokens:store=binary", 100, 40.0)]}
    (tmp_path / "bench_scale_x.json").write_text(json.dumps({"command": "propdex bench", "versions": {"git": "abc"}, "scale": curve}))
    lines = bench_board.bench_tables(folder=tmp_path)
    assert "### Scale at one thread (`tokens`, `tokens:store=binary`, Wikipedia extract)" in lines
    assert "- `tokens`: p50 at 6,510 documents 0.80x the p50 at 10; goal at most 60 ms and 1.5x: not met (+20.0 ms)." in lines
    assert "- `tokens:store=binary`: p50 at 6,510 documents 2.00x the p50 at 10; goal at most 60 ms and 1.5x: not met (2.00x)." in lines
    assert sum(line.startswith("| `tokens") for line in lines) == 4


def test_a_side_by_side_run_on_a_gpu_is_titled_by_its_device_and_names_a_failed_peer(tmp_path):
    """A --peers run whose propdex systems ran on a GPU says so in its title
    (the CPU runs are 'stores at one thread'), and a peer that failed is
    named with its error rather than left out silently."""
    import json

    def system(device, store="float16", window=254):
        return {"device": device, "store": store, "window": window, "factory": "F", "nDCG@10": 0.7, "bytes_per_vector": 100.0,
                "p50_ms": 10.0, "p95_ms": 20.0}

    run = {"command": "propdex bench --device cuda", "versions": {"git": "abc"}, "threads": 1,
           "systems": {"propdex": system("NVIDIA H200 (CUDA 13.0)"), "propdex:window=0": system("NVIDIA H200 (CUDA 13.0)", window=0)},
           "failed": {"fast-plaid": "bench: fast-plaid failed under python3 (exit 1): ImportError: undefined symbol"}}
    (tmp_path / "bench_gpu.json").write_text(json.dumps(run))
    lines = bench_board.bench_tables(folder=tmp_path)
    assert "### SciFact `tokens`, on NVIDIA H200 (CUDA 13.0) beside its peers" in lines
    assert "- `fast-plaid` failed: bench: fast-plaid failed under python3 (exit 1): ImportError: undefined symbol" in lines
    assert sum(line.startswith("| propdex") for line in lines) == 1  # the whole-document variant stays in the JSON
    run["systems"] = {"propdex": system("cpu")}
    del run["failed"]
    (tmp_path / "bench_gpu.json").write_text(json.dumps(run))
    lines = bench_board.bench_tables(folder=tmp_path)
    assert "### SciFact `tokens`, stores at one thread" in lines and not any("failed" in line for line in lines)
    # What a killed run left on disk is not a scoreboard figure.
    (tmp_path / "bench_gpu.json").write_text(json.dumps(run | {"unfinished": True}))
    with pytest.raises(ValueError, match="unfinished bench run"):
        bench_board.bench_tables(folder=tmp_path)


def test_a_scale_point_measured_again_is_shown_from_the_later_run_only(tmp_path, monkeypatch):
    """A point a later run measured again (its path changed) leaves the earlier
    table, which says where it went; the earlier run's growth goal is then
    read on time alone, and a later file without the point is refused."""
    import json

    def point(system, docs, p50):
        return {"encoder": system, "documents": docs, "vectors": docs * 10, "factory": "F", "bytes_per_vector": 9.0,
                "p50_ms": p50, "p95_ms": p50 * 2, "stages_ms": {}, "text_bytes": docs * 1000}

    def write(name, points):
        curve = {"queries": 5, "threads": 1, "points": points}
        (tmp_path / name).write_text(json.dumps({"command": "propdex bench", "versions": {"git": "abc"}, "scale": curve}))

    write("bench_scale_a.json", [point("bin", 100, 20.0), point("bin", 1_000, 40.0), point("bin", 6_510, 50.0)])
    write("bench_scale_b.json", [point("bin", 100, 10.0)])
    monkeypatch.setattr(bench_board, "SUPERSEDED", {("bench_scale_a.json", "bin", 100): ("bench_scale_b.json", "a change")})
    lines = bench_board.bench_tables(folder=tmp_path)
    assert sum(line.startswith("| `bin` | 100 |") for line in lines) == 1  # from b alone
    assert any(line.endswith("; `bin` at 100 documents was measured again after a change, in `bench_scale_b.json`.") for line in lines)
    assert "- `bin`: p50 at 6,510 documents 1.25x the p50 at 1,000; goal at most 60 ms: met." in lines
    write("bench_scale_b.json", [point("bin", 1_000, 10.0)])
    with pytest.raises(ValueError, match="no such point"):
        bench_board.bench_tables(folder=tmp_path)
