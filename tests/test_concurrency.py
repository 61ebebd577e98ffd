"""One propdex.Index shared by threads: a writer runs every kind of change
(add, update, delete, compact, a compact that re-trains the codes) while
readers search, fetch and pack context. No reader may fail, and the index
the writer leaves holds exactly what it was told."""
from __future__ import annotations

import random
import threading

import pytest
from paths import DATA

import propdex
from propdex.cli import main
from propdex.encoders import load_encoder
from propdex.indexer import factory
from propdex.indexer.readers import read_corpus

SCIFACT = DATA / "beir" / "scifact" / "corpus.jsonl"
QUERIES = ["cancer risk in children", "vitamin D deficiency", "cell membrane proteins", "brain development"]


def _writes(rng: random.Random, docs: list[dict], live: dict[str, str]) -> list[tuple[str, object]]:
    """A fixed, seeded sequence of changes; `live` ends as the id -> text the index must hold."""
    ops, nxt = [], 8
    for step in range(36):
        if step in (17, 35):
            ops.append(("compact", None))
        elif rng.random() < 0.5 and nxt < len(docs):
            batch = docs[nxt : nxt + rng.randint(1, 2)]
            nxt += len(batch)
            live.update({d["id"]: d["text"] for d in batch})
            ops.append(("add", batch))
        elif rng.random() < 0.6:
            doc_id = rng.choice(sorted(live))
            doc = next(d for d in docs if d["id"] == doc_id)
            live[doc_id] = f"Revised at step {step}. " + doc["text"]
            ops.append(("update", [dict(doc, text=live[doc_id])]))
        else:
            doc_id = rng.choice(sorted(live))
            del live[doc_id]
            ops.append(("delete", [doc_id]))
    return ops


@pytest.mark.parametrize("store", [{}, {"store": "binary", "bits": 64, "hashing": "lsh"}], ids=["codes", "binary"])
def test_readers_never_fail_while_a_writer_changes_compacts_and_retrains(tmp_path, tiny, monkeypatch, store):
    monkeypatch.setattr(factory, "FLAT_BELOW", 3_000)  # the codes outgrow Flat mid-run: a compact re-trains them
    docs = [{"id": d.id, "title": d.title, "text": d.text} for _, d in zip(range(40), read_corpus([SCIFACT]))]
    index = propdex.Index.create(tmp_path / "i", load_encoder("tokens", backbone=tiny), shard_docs=4, **store)
    index.add(docs[:8])
    live = {d["id"]: d["text"] for d in docs[:8]}
    ops = _writes(random.Random(7), docs, live)
    done, errors, reads = threading.Event(), [], [0]

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not done.is_set():
            try:
                q = rng.choice(QUERIES)
                hits = index.search(q, k=5, bm25=rng.random() < 0.3)
                assert all(h.text for h in hits)
                index.get(rng.choice(docs)["id"])
                index.context(q, words=60)
                reads[0] += 1
            except Exception as e:  # noqa: BLE001 - every failure is the finding
                errors.append(repr(e))

    readers = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for t in readers:
        t.start()
    try:
        for op, arg in ops:
            getattr(index, op)(arg) if arg is not None else index.compact()
    finally:
        done.set()
        for t in readers:
            t.join()
    assert errors == [] and reads[0] > 0
    if not store:  # a binary index keeps its codes: it is compacted by copying them, never re-trained
        assert "retrained" in index.manifest["index"] and index.manifest["index"]["factory"] != "Flat"
    assert len(index) == len(live) and all(index.get(doc_id).text == text for doc_id, text in live.items())
    assert not any(d["id"] in index for d in docs if d["id"] not in live)
    index.close()
    assert main(["verify", str(tmp_path / "i")]) == 0
