"""`propdex serve` on 127.0.0.1 driven by a real HTTP client, and the
LangChain and LlamaIndex adapters on a real index."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from paths import DATA

import propdex
from propdex.cli import main
from propdex.encoders import load_encoder
from propdex.eval.loadtest import _bm25_differences, load_test
from propdex.indexer.readers import read_corpus

HOTPOT = DATA / "hotpotqa" / "hotpot_dev_distractor_600.json"
TOKEN = "s3cret"


def _docs(n: int) -> list[dict]:
    return [{"id": d.id, "title": d.title, "text": d.text, "batch": i % 2}
            for i, d in zip(range(n), read_corpus([HOTPOT]))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVER_LOGS: dict[str, Path] = {}  # url -> the server's stderr, read back when a test fails


def _start(directory: Path, *args: str):
    """`propdex serve` on a free loopback port; (process, url) once /healthz answers."""
    port = _free_port()
    env = {**os.environ, "PROPDEX_TOKEN": TOKEN}
    url = f"http://127.0.0.1:{port}"
    SERVER_LOGS[url] = directory.parent / f"serve-{port}.log"
    with open(SERVER_LOGS[url], "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "propdex", "serve", str(directory), "--port", str(port), "--device", "cpu",
                                 *args], env=env, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return proc, url
        except httpx.TransportError:
            if proc.poll() is not None:
                raise RuntimeError(_server_log(url))
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not answer /healthz within 120 s")


def _server_log(url: str) -> str:
    return SERVER_LOGS[url].read_text(errors="replace")[-6000:]


def _served_index(directory: Path, tiny_dir: Path, n: int) -> Path:
    index = propdex.Index.create(directory, load_encoder("tokens", backbone=str(tiny_dir), device="cpu"), shard_docs=20)
    index.add(_docs(n))
    index.close()
    return directory


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_dir):
    proc, url = _start(_served_index(tmp_path_factory.mktemp("served") / "idx", tiny_dir, 60))
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_serve_runtime_onnx_encodes_queries_there_and_ranks_as_torch(tmp_path, tiny_dir, monkeypatch):
    pytest.importorskip("onnxruntime")
    monkeypatch.setenv("PROPDEX_CACHE", str(tmp_path / "cache"))  # the server's ONNX export goes here, not to ~/.cache
    directory = _served_index(tmp_path / "idx", tiny_dir, 20)
    with propdex.Index.open(directory, device="cpu") as index:
        want = [h.doc_id for h in index.search("American film director", k=5)]
    proc, url = _start(directory, "--runtime", "onnx")
    try:
        assert httpx.get(f"{url}/v1/info").json()["query_runtime"] == "onnx"
        got = httpx.get(f"{url}/v1/search", params={"q": "American film director", "k": 5}).json()
        assert [h["doc_id"] for h in got["results"]] == want
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_every_route(server):
    health = httpx.get(f"{server}/healthz").json()
    assert health["status"] == "ok" and health["documents"] == 60
    info = httpx.get(f"{server}/v1/info").json()
    assert info["documents"] == 60 and info["problems"] == [] and info["encoder"]["name"] == "tokens" and info["query_runtime"] == "torch"

    one = httpx.get(f"{server}/v1/search", params={"q": "American film director", "k": 3}).json()
    assert one["query"] == "American film director" and len(one["results"]) == 3
    # window=0 scores whole documents, as does a window wider than any of them.
    whole, wide = (httpx.get(f"{server}/v1/search", params={"q": "American film director", "k": 3, "window": w}).json() for w in (0, 100_000))
    assert [h["doc_id"] for h in wide["results"]] == [h["doc_id"] for h in whole["results"]]
    hit = one["results"][0]
    assert {"rank", "doc_id", "title", "score", "text", "passage", "metadata", "sentence", "spans"} <= set(hit) and "batch" in hit["metadata"]
    doc = httpx.get(f"{server}/v1/docs/{hit['doc_id']}").json()
    # A document-level hit shows its winning passage: characters start..end of the stored document.
    assert doc["id"] == hit["doc_id"] and doc["metadata"] == hit["metadata"]
    assert doc["text"][hit["passage"]["start"]:hit["passage"]["end"]] == hit["text"] and hit["sentence"]["text"] in hit["text"]

    context = httpx.post(f"{server}/v1/context", json={"query": "American film director", "words": 60, "hybrid": True}).json()
    assert 0 < context["words"] <= 60 and context["budget"] == 60 and context["citations"]
    for c in context["citations"]:
        cited = httpx.get(f"{server}/v1/docs/{c['doc_id']}").json()["text"][c["start"]:c["end"]].strip()
        assert context["text"][c["at"]:c["at"] + len(cited)] == cited
    assert httpx.post(f"{server}/v1/context", json={"query": " "}).json() == {"error": "empty query"}

    many = httpx.post(f"{server}/v1/search", json={"queries": ["a river", "a band"], "k": 4, "where": {"batch": 1}, "hybrid": True}).json()
    assert [r["query"] for r in many["results"]] == ["a river", "a band"]
    assert all(len(r["results"]) == 4 and all(h["metadata"]["batch"] == 1 for h in r["results"]) for r in many["results"])
    # One query by POST is answered as GET answers it, its filter given as JSON.
    single = httpx.post(f"{server}/v1/search", json={"query": "a river", "k": 4, "where": {"batch": 1}, "hybrid": True}).json()
    assert single == {"query": "a river", "results": many["results"][0]["results"]}
    # A GET takes every search option; its filter is the command line's clauses.
    got = httpx.get(f"{server}/v1/search", params={"q": "a river", "k": 4, "hybrid": True, "where": "batch=1"}).json()
    assert [h["doc_id"] for h in got["results"]] == [h["doc_id"] for h in many["results"][0]["results"]]
    narrow = httpx.get(f"{server}/v1/search", params=[("q", "a band"), ("where", "batch>=1"), ("where", "batch!=0"), ("rerank", 2),
                                                       ("candidates", 8)]).json()
    assert narrow["results"] and all(h["metadata"]["batch"] == 1 for h in narrow["results"])

    new = {"id": "zz-new", "title": "Quokka", "text": "The quokka is a small marsupial of Rottnest Island."}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.post(f"{server}/v1/docs", json={"documents": [new]}).status_code == 401
    assert httpx.post(f"{server}/v1/docs", json={"documents": [new]}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.post(f"{server}/v1/docs", json={"documents": [new]}, headers=headers).json()["added"] == 1
    again = httpx.post(f"{server}/v1/docs", json={"documents": [new]}, headers=headers)
    assert again.status_code == 400 and "update" in again.json()["error"]
    fixed = dict(new, text="The quokka is a small wallaby of Rottnest Island.")
    assert httpx.post(f"{server}/v1/docs", json={"documents": [fixed], "update": True}, headers=headers).json()["replaced"] == 1
    assert httpx.get(f"{server}/v1/docs/zz-new").json()["text"] == fixed["text"]
    assert httpx.get(f"{server}/v1/search", params={"q": "quokka wallaby Rottnest", "bm25": True}).json()["results"][0]["doc_id"] == "zz-new"
    assert httpx.delete(f"{server}/v1/docs/zz-new").status_code == 401
    assert httpx.delete(f"{server}/v1/docs/zz-new", headers=headers).json()["deleted"] == 1
    assert httpx.get(f"{server}/v1/docs/zz-new").status_code == 404
    assert httpx.delete(f"{server}/v1/docs/zz-new", headers=headers).status_code == 404
    assert httpx.get(f"{server}/openapi.json").json()["info"]["title"] == "propdex"
    assert httpx.get(f"{server}/docs").status_code == 200


@pytest.mark.parametrize("request_args, status, message", [
    (("GET", "/v1/search", {"params": {"q": "  "}}), 400, "empty query"),
    (("GET", "/v1/search", {"params": {}}), 400, "q"),
    (("GET", "/v1/search", {"params": {"q": "x", "k": 0}}), 400, "k"),
    (("GET", "/v1/search", {"params": {"q": "x", "k": 100000}}), 400, "k"),
    (("GET", "/v1/search", {"params": {"q": "x", "level": "page"}}), 400, "unknown level"),
    (("GET", "/v1/search", {"params": {"q": "x", "hybrid": True, "bm25": True}}), 400, "not both"),
    (("GET", "/v1/search", {"params": {"q": "x", "window": -1}}), 400, "window must be 0 (the whole document) or a number of units"),
    (("GET", "/v1/search", {"params": {"q": "x", "where": "batch"}}), 400, "where: expected FIELD=VALUE"),
    (("GET", "/v1/search", {"params": {"q": "x", "rerank": 0}}), 400, "rerank must be at least 1"),
    (("POST", "/v1/search", {"json": {"queries": []}}), 400, "queries"),
    (("POST", "/v1/search", {"json": {"k": 3}}), 400, "give one query"),
    (("POST", "/v1/search", {"json": {"query": "x", "queries": ["y"]}}), 400, "not both"),
    (("POST", "/v1/search", {"json": {"query": " "}}), 400, "empty query"),
    (("POST", "/v1/search", {"json": {"queries": ["x"], "where": {"batch": {"a": 1}}}}), 400, "where"),
    (("POST", "/v1/search", {"content": b"{not json", "headers": {"content-type": "application/json"}}), 400, ""),
    (("POST", "/v1/search", {"content": b"x" * (17 << 20), "headers": {"content-type": "application/json"}}), 413, "body"),
    (("POST", "/v1/docs", {"json": {"documents": [{"id": "q", "text": "t"}]}}), 401, "Bearer"),
    (("GET", "/v1/nothing", {}), 404, ""),
])
def test_bad_requests_get_a_4xx_with_one_line(server, request_args, status, message):
    method, path, kw = request_args
    r = httpx.request(method, f"{server}{path}", **kw)
    assert r.status_code == status
    error = r.json()["error"]
    assert isinstance(error, str) and "\n" not in error and "Traceback" not in error and message in error


def test_an_unexpected_error_is_a_500_and_the_connection_serves_on(tmp_path, tiny_dir, monkeypatch):
    """A crash inside a route answers 500 with one line and leaves the
    keep-alive connection open: a client's next request on it (here
    pipelined behind the failing one) is answered, not reset."""
    import threading

    import uvicorn

    from propdex import serve

    def crash(*_, **__):
        raise RuntimeError("a bug")

    monkeypatch.setattr(serve, "_search", crash)
    index = propdex.Index.open(_served_index(tmp_path / "idx", tiny_dir, 4), device="cpu")
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(serve.create_app(index), host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(b"GET /v1/search?q=x HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            seen = b""
            while seen.count(b"HTTP/1.1 ") < 2 and (chunk := s.recv(65536)):
                seen += chunk
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        index.close()
    statuses = [part.split()[0] for part in seen.split(b"HTTP/1.1 ")[1:]]
    assert statuses == [b"500", b"200"], seen[:500]
    assert b'"internal error (RuntimeError); the server log has the details"' in seen


def test_a_commit_that_cannot_be_opened_is_a_503_until_a_good_one_lands(tmp_path, tiny_dir):
    """A damaged manifest renamed into place is the server's fault: /healthz
    and the routes answer 503 in one line (a balancer takes the server out)
    and search again once a good commit is back."""
    directory = _served_index(tmp_path / "idx", tiny_dir, 8)
    proc, url = _start(directory)
    try:
        good = (directory / "manifest.json").read_bytes()
        for manifest in (b"{not json", good):
            (directory / "manifest.tmp").write_bytes(manifest)
            (directory / "manifest.tmp").rename(directory / "manifest.json")  # as a commit replaces it
            health, found = httpx.get(f"{url}/healthz"), httpx.get(f"{url}/v1/search", params={"q": "film"})
            if manifest == good:
                assert health.status_code == 200 and found.status_code == 200 and found.json()["results"]
            else:
                assert health.status_code == found.status_code == 503
                assert "latest commit cannot be opened" in found.json()["error"] and "\n" not in found.json()["error"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_no_search_lost_or_wrong_while_documents_are_added(server):
    report = load_test(server, clients=6, requests=60, adds=6, token=TOKEN)
    assert report["n_errors"] == 0 and report["lost"] == [], (report, _server_log(server))
    assert report["p50_ms"] > 0 and report["p95_ms"] >= report["p50_ms"]
    assert httpx.get(f"{server}/healthz").json()["documents"] == 66


def test_loadtest_adds_a_corpus_documents_one_at_a_time_and_compares_a_bulk_build(tmp_path, tiny_dir):
    """`propdex loadtest --docs --baseline`: a real corpus's documents, each its own add, each found after; small adds
    merge; at rest the grown index answers BM25 as a bulk build of the same documents does, and a difference is caught."""
    corpus = tmp_path / "corpus.jsonl"
    scifact = (DATA / "beir" / "scifact" / "corpus.jsonl").read_text().splitlines()
    corpus.write_text("\n".join(scifact[-12:]) + "\n")  # abstracts the served HotpotQA index does not hold
    added = [{"id": d.id, "title": d.title, "text": d.text} for d in read_corpus([corpus])]
    bulk = propdex.Index.create(tmp_path / "bulk", load_encoder("tokens", backbone=str(tiny_dir), device="cpu"), shard_docs=20)
    bulk.add(_docs(20) + added)
    bulk.close()
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(f"q{i}\t{d['text'][:80]}\n" for i, d in enumerate(added[:6])) + "q6\tamerican film director\n")
    proc, server = _start(_served_index(tmp_path / "idx", tiny_dir, 20))
    base_proc, baseline = _start(tmp_path / "bulk")
    out = tmp_path / "report.json"
    try:
        assert main(["loadtest", server, "--clients", "2", "--requests", "10", "--adds", "12", "--docs", str(corpus),
                     "--queries", str(topics), "--baseline", baseline, "--token", TOKEN, "--out", str(out)]) == 0
        report = json.loads(out.read_text())
        # One document gone from the grown index: its text's BM25 answers change, and the comparison says so.
        assert httpx.delete(f"{server}/v1/docs/{added[0]['id']}", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        with httpx.Client(timeout=60) as http:
            assert _bm25_differences(http, server, baseline, [added[0]["text"][:80]]) == [added[0]["text"][:80]]
    finally:
        for p in (proc, base_proc):
            p.terminate()
            p.wait(timeout=30)
    assert report["adds"] == 12 and report["lost"] == [] and report["n_errors"] == 0
    assert "--docs" in report["command"] and report["shards"] < 3 + 12  # 12 one-document adds did not leave 12 shards
    assert report["bm25_queries"] == 7 and report["bm25_differences"] == []
    rest = report["at_rest"]
    assert rest["grown"]["p95_ms"] > 0 and rest["baseline"]["p95_ms"] > 0 and rest["p95_ratio"] > 0


def test_workers_share_one_index_and_see_each_others_commits(tmp_path, tiny_dir):
    proc, url = _start(_served_index(tmp_path / "idx", tiny_dir, 20), "--workers", "2")
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        docs = [{"id": f"w{i}", "text": f"Worker test document number {i} about zebras."} for i in range(8)]
        with ThreadPoolExecutor(4) as pool:  # the writes land on both workers and wait for each other's lock
            answers = list(pool.map(lambda d: httpx.post(f"{url}/v1/docs", json={"documents": [d]}, headers=headers, timeout=120), docs))
        assert [a.status_code for a in answers] == [200] * 8
        # Whichever worker answers, it serves the last commit.
        assert {httpx.get(f"{url}/healthz").json()["documents"] for _ in range(10)} == {28}
        assert all(httpx.get(f"{url}/v1/docs/w{i}").status_code == 200 for i in range(8))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def index(tmp_path_factory, minilm):
    directory = tmp_path_factory.mktemp("adapters") / "idx"
    idx = propdex.Index.create(directory, load_encoder("tokens", backbone=minilm))
    idx.add(_docs(60))
    yield idx
    idx.close()


@pytest.mark.slow
def test_langchain_retriever_returns_documents_with_the_hit_text(index):
    from langchain_core.documents import Document
    from propdex.integrations.langchain import PropdexRetriever

    retriever = PropdexRetriever(index=index, k=3, where={"batch": 0})
    docs = retriever.invoke("Which American director was born in 1966?")
    hits = index.search("Which American director was born in 1966?", k=3, where={"batch": 0})
    assert all(isinstance(d, Document) for d in docs) and len(docs) == 3
    assert [d.page_content for d in docs] == [h.text for h in hits]
    assert [d.metadata["id"] for d in docs] == [h.doc_id for h in hits] and all(d.metadata["batch"] == 0 for d in docs)
    assert docs[0].metadata["score"] == pytest.approx(hits[0].score) and "sentence" in docs[0].metadata
    sentences = PropdexRetriever(index=index, k=2, search_options={"level": "sentence"}).invoke("born in 1966")
    assert all(d.page_content == d.metadata["sentence"] for d in sentences)
    # words=: one Document, the packed context Index.context returns.
    packed = PropdexRetriever(index=index, words=80, hybrid=True).invoke("Which American director was born in 1966?")
    context = index.context("Which American director was born in 1966?", 80, hybrid=True)
    assert [d.page_content for d in packed] == [context.text] and packed[0].metadata["words"] == context.words <= 80
    assert packed[0].metadata["citations"] == [c.to_json() for c in context.citations]


@pytest.mark.slow
def test_llamaindex_retriever_returns_nodes_with_scores(index):
    from llama_index.core.schema import NodeWithScore, TextNode
    from propdex.integrations.llamaindex import PropdexRetriever

    nodes = PropdexRetriever(index=index, k=4, hybrid=True).retrieve("Which American director was born in 1966?")
    hits = index.search("Which American director was born in 1966?", k=4, hybrid=True)
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
    assert [n.node.get_content() for n in nodes] == [h.text for h in hits]
    assert [n.node.node_id for n in nodes] == [h.doc_id for h in hits]
    assert [n.score for n in nodes] == pytest.approx([h.score for h in hits])
    assert nodes[0].node.metadata["title"] == hits[0].title
    packed = PropdexRetriever(index=index, words=50, level="doc").retrieve("Which American director was born in 1966?")
    context = index.context("Which American director was born in 1966?", 50, level="doc")
    assert [n.node.get_content() for n in packed] == [context.text] and context.words <= 50


@pytest.mark.slow
def test_langchain_vector_store_adds_upserts_filters_deletes_and_retrieves(tmp_path, minilm):
    from langchain_core.documents import Document
    from propdex.integrations.langchain import PropdexVectorStore

    docs = [Document(page_content="The quokka is a small marsupial of Rottnest Island.", metadata={"title": "Quokka", "zone": "au"}, id="q"),
            Document(page_content="The okapi is a giraffid of the Congo rainforest.", metadata={"zone": "af"}, id="o"),
            Document(page_content="Lions live in prides on the African savanna.", metadata={"zone": "af"})]
    encoder = load_encoder("tokens", backbone=minilm)
    with pytest.raises(ValueError, match="own encoder"):  # an Embeddings would be silently unused: refused
        PropdexVectorStore.from_documents(docs, object(), path=str(tmp_path / "x"), encoder=encoder)
    store = PropdexVectorStore.from_documents(docs, path=str(tmp_path / "vs"), encoder=encoder)
    assert len(store.index) == 3 and "q" in store.index and "o" in store.index
    (best, score), *_ = store.similarity_search_with_score("Which marsupial lives on an island?", k=3)
    assert best.id == "q" and best.page_content == docs[0].page_content and best.metadata["title"] == "Quokka"
    assert score == pytest.approx(store.index.search("Which marsupial lives on an island?", k=1)[0].score)
    african = store.similarity_search("an animal", k=3, filter={"zone": "af"})
    assert len(african) == 2 and all(d.metadata["zone"] == "af" for d in african)
    # Adding a known id replaces it (an upsert); get_by_ids reads the stored documents back.
    assert store.add_documents([Document(page_content="The okapi is a forest giraffe of the Congo.", metadata={"zone": "af"}, id="o")]) == ["o"]
    assert len(store.index) == 3 and store.get_by_ids(["o", "missing"])[0].page_content.startswith("The okapi is a forest")
    assert store.as_retriever(search_kwargs={"k": 1}).invoke("Which marsupial lives on an island?")[0].id == "q"
    assert store.delete(["q"]) is True and store.delete(["q"]) is False and "q" not in store.index
    store.index.close()
