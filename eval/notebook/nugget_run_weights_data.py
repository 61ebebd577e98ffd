"""Prototype: frozen states of training passages/queries for learned within-run nugget weights.
Data: SciFact train (claims -> cited abstracts) + Wikipedia extract train split (a sentence of one section ->
another section of the same article). Never HotpotQA, never SciFact test."""
import json, random, time, itertools
import numpy as np, torch

from propdex.encoders import load_encoder, Document
from propdex.indexer.readers import read_corpus
from propdex.encoders.training.data import wiki_articles, wiki_files
from propdex.encoders.text import split_sentences


def training_pairs(rng):
    """(source, query text, Document): SciFact train claims with each cited abstract, then 3,000 Wikipedia
    train-split pairs (a sentence of one section, another section of the same article, its first 220 words)."""
    S = "../shared/data/beir/scifact"
    corpus = {d.id: d for d in read_corpus([f"{S}/corpus.jsonl"])}
    queries = {json.loads(l)["_id"]: json.loads(l)["text"] for l in open(f"{S}/queries.jsonl")}
    pairs = []
    for line in itertools.islice(open(f"{S}/qrels/train.tsv"), 1, None):
        q, d, _ = line.split("\t")
        if d in corpus:
            pairs.append(("scifact", queries[q], corpus[d]))
    files = wiki_files("../shared/data/wikipedia/extracted", "train")
    rng.shuffle(files)
    wiki = []
    for path in files:
        for art in wiki_articles(path, "train"):
            secs = [t for _, t in art.sections if len(t.split()) >= 40]
            if len(secs) < 2: continue
            a, b = rng.sample(range(len(secs)), 2)
            sents = [secs[a][x:y] for x, y in split_sentences(secs[a]) if 8 <= len(secs[a][x:y].split()) <= 40]
            if not sents: continue
            text = " ".join(secs[b].split()[:220])
            wiki.append(("wiki", rng.choice(sents), Document(f"{art.id}-{b}", text, title=art.title)))
        if len(wiki) >= 3000: break
    return pairs + wiki[:3000]


if __name__ == "__main__":
    torch.set_num_threads(1)
    rng = random.Random(0)
    enc = load_encoder("nugget", device="cpu")
    pairs = training_pairs(rng)
    n_sci = sum(s == "scifact" for s, _, _ in pairs)
    print("pairs", n_sci, len(pairs) - n_sci, flush=True)
    # unique documents
    docs = {}
    for _, _, d in pairs: docs.setdefault(d.id, d)
    doc_ids = list(docs)
    t0 = time.time()
    P = []  # per passage: (doc index, states f16 (m,384) normalised of kept tokens, run id per kept token, token ids)
    for di, did in enumerate(doc_ids):
        d = docs[did]
        passages = enc.passages(d)[:1]  # the first window
        for p, tok in zip(passages, enc.forward(passages)):
            idx = enc.kept(p, tok, query=False)
            if len(idx) == 0: continue
            groups = enc.groups(idx, tok)
            run = np.concatenate([[r] * len(g) for r, g in enumerate(groups)])
            st = torch.nn.functional.normalize(tok.states.float(), dim=-1)[np.concatenate(groups)]
            P.append((di, st.half().numpy(), run.astype(np.int16), tok.ids[np.concatenate(groups)].astype(np.int32)))
        if di % 500 == 0: print(di, len(doc_ids), round(time.time() - t0), flush=True)
    Q = [e.vectors.astype(np.float16) for e in enc.encode_queries([q for _, q, _ in pairs])]
    pos = [doc_ids.index(d.id) for _, _, d in pairs]
    import pickle, pathlib; pathlib.Path("runs/lab").mkdir(parents=True, exist_ok=True)
    pickle.dump({"P": P, "Q": Q, "pos": pos, "src": [s for s, _, _ in pairs], "doc_ids": doc_ids}, open("runs/lab/nugw.pkl", "wb"))
    print("done", round(time.time() - t0))
