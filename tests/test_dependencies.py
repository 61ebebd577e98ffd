"""What an install pulls in: the core opens, builds and searches an index without the optional libraries.

hnswlib (a backend), peft (training LoRA adapters) and rank_bm25 (eval's
reference BM25) are extras; indexing and searching with the defaults must not
import them, so a core install works where they are absent.
"""
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL = ("hnswlib", "peft", "rank_bm25")
LEGACY = ("bm25s",)  # read only for indexes from before BM25 segments


def test_indexing_and_searching_import_no_optional_library(tmp_path, tiny_dir):
    script = f"""
import json, sys
import propdex
index = propdex.Index.create({str(tmp_path / 'ix')!r}, "tokens", backbone={str(tiny_dir)!r}, device="cpu")
index.add([{{"id": "a", "title": "Rivers", "text": "The Rhine flows north. It reaches the sea."}},
           {{"id": "b", "title": "Bands", "text": "The band toured Europe. They played in Berlin."}}])
hits = index.search("river sea", k=2, level="sentence", hybrid=True, where={{"id": {{"!=": "zzz"}}}})
print(json.dumps({{"hits": [h.doc_id for h in hits], "loaded": sorted(m for m in {OPTIONAL + LEGACY!r} if m in sys.modules)}}))
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["hits"] and out["loaded"] == []


def test_optional_libraries_are_extras_not_requirements():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower().replace("-", "_")
    assert not [m for m in OPTIONAL if m in core]
    assert "faiss_cpu" in core  # a core install opens and builds an index
    extras = project["optional-dependencies"]
    assert any("hnswlib" in d for d in extras["hnsw"]) and any("peft" in d for d in extras["lora"])
    # The tests import them, so the test extra installs them.
    test = " ".join(extras["test"]).lower().replace("-", "_")
    assert all(m in test for m in OPTIONAL)


def test_a_missing_extra_is_a_one_line_error(monkeypatch):
    from propdex.indexer import hnsw

    monkeypatch.setitem(sys.modules, "hnswlib", None)  # import hnswlib now raises ImportError
    with pytest.raises(ValueError, match=r"pip install 'propdex\[hnsw\]'"):
        hnsw.HnswIndex(Path("nowhere"), 4, 1)


@pytest.mark.parametrize("given, want", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_importing_propdex_makes_idle_openmp_threads_sleep_unless_told_otherwise(given, want):
    """torch's and FAISS's OpenMP threads would otherwise spin for the cores the other needs."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | ({"OMP_WAIT_POLICY": given} if given else {})
    out = subprocess.run([sys.executable, "-c", "import os, propdex; print(os.environ['OMP_WAIT_POLICY'])"], env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == want
