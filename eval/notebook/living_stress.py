"""A living index under concurrent change: one writer thread adds, updates,
deletes and compacts (compacts re-train the codes once they outgrow Flat)
while three reader threads search (some with BM25), fetch documents and pack
context, for a fixed time. Prints what ran, every failure (first five in
full) and whether the index ends holding exactly what the writer was told;
stops early if the process passes --max-rss-mb.

    python eval/notebook/living_stress.py OUT_DIR --seconds 150 [--encoder tokens]
        [--backbone PATH] [--store codes|float16|binary] [--bits 128]
"""
from __future__ import annotations

import argparse
import random
import sys
import threading
import traceback
from pathlib import Path

import propdex
from propdex.encoders import load_encoder
from propdex.indexer.readers import read_corpus

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "beir" / "scifact" / "corpus.jsonl"
QUERIES = ["cancer risk", "vitamin D", "cell membrane", "brain development", "protein folding"]


def rss_mb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--seconds", type=float, default=150)
    p.add_argument("--encoder", default="tokens")
    p.add_argument("--backbone", help="default: the encoder's")
    p.add_argument("--store", default="codes")
    p.add_argument("--bits", type=int, default=128)
    p.add_argument("--max-rss-mb", type=int, default=6000)
    args = p.parse_args()
    docs = [{"id": d.id, "title": d.title, "text": d.text} for _, d in zip(range(400), read_corpus([SCIFACT]))]
    encoder = load_encoder(args.encoder, **({"backbone": args.backbone} if args.backbone else {}), device="cpu")
    options = {"store": args.store, **({"bits": args.bits, "hashing": "lsh"} if args.store == "binary" else {})}
    index = propdex.Index.create(args.out / "index", encoder, shard_docs=8, **options)
    index.add(docs[:40])
    live = {d["id"]: d["text"] for d in docs[:40]}
    lock, stop, errors = threading.Lock(), threading.Event(), []
    counts = {"search": 0, "get": 0, "context": 0, "writes": 0, "peak_rss_mb": 0}

    def writer() -> None:
        rng, nxt = random.Random(0), 40
        while not stop.is_set():
            counts["peak_rss_mb"] = max(counts["peak_rss_mb"], rss_mb())
            if counts["peak_rss_mb"] > args.max_rss_mb:
                errors.append(f"RSS passed {args.max_rss_mb} MB at write {counts['writes']}")
                stop.set()
                return
            try:
                r = rng.random()
                if r < 0.5 and nxt < len(docs):
                    batch = docs[nxt : nxt + rng.randint(1, 3)]
                    nxt += len(batch)
                    index.add(batch)
                    with lock:
                        live.update({d["id"]: d["text"] for d in batch})
                elif r < 0.7:
                    with lock:
                        doc_id = rng.choice(sorted(live))
                    doc = next(d for d in docs if d["id"] == doc_id)
                    text = f"Revised {counts['writes']}. " + doc["text"]
                    index.update([dict(doc, text=text)])
                    with lock:
                        live[doc_id] = text
                elif r < 0.9:
                    with lock:
                        doc_id = rng.choice(sorted(live))
                        del live[doc_id]
                    index.delete([doc_id])
                else:
                    index.compact()
                counts["writes"] += 1
            except Exception:  # noqa: BLE001 - every failure is the finding
                errors.append("write " + traceback.format_exc()[-2500:])

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            try:
                r, q = rng.random(), rng.choice(QUERIES)
                if r < 0.6:
                    assert all(h.text for h in index.search(q, k=10, bm25=rng.random() < 0.3))
                    counts["search"] += 1
                elif r < 0.8:
                    with lock:
                        doc_id = rng.choice(sorted(live))
                    index.get(doc_id)
                    counts["get"] += 1
                else:
                    index.context(q, words=100)
                    counts["context"] += 1
            except Exception:  # noqa: BLE001
                errors.append(f"read {seed} " + traceback.format_exc()[-2500:])

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    stop.wait(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    wrong = [d for d, text in live.items() if (got := index.get(d)) is None or got.text != text]
    extra = len(index) - len(live)
    print({**counts, "errors": len(errors), "wrong_or_missing": len(wrong), "extra": extra,
           "factory": index.manifest["index"]["factory"], "shards": len(index.manifest["shards"])})
    for e in errors[:5]:
        print(e, "\n-----", file=sys.stderr)
    index.close()
    return 1 if errors or wrong or extra else 0


if __name__ == "__main__":
    sys.exit(main())
