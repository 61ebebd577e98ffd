"""Nuggets that keep a passage's salient tokens whole: a lab check of a learned choice of what each kept
vector stands for (issue: nuggets that hold on questions nobody tuned them on).

Today's rule pools k = ceil(n r) even runs of a passage's kept tokens. Here s = round(f k) of the k vectors
are single tokens, the s most salient ones, kept exactly as `tokens` stores them; the other tokens, in
order, are pooled into k - s even runs. Same vectors a passage. Salience:
- `idf`: the token id's inverse document frequency over the training passages;
- `learned`: a logistic head over the frozen state (and idf), trained to predict the tokens that full-token
  MaxSim (the teacher) picks for some query token of a positive pair, on the training pairs only.
Data: `python eval/notebook/nugget_run_weights_data.py` (SciFact train claims and Wikipedia train-split
section pairs; never HotpotQA, never SciFact test); the dev pairs are the same disjoint 15% of passages
`nugget_run_weights.py` holds out. Measure on dev: the share of tokens' top 10 kept, MRR and Recall@10 of
the positive among the dev passages.

Usage: python eval/notebook/nugget_salient.py [fractions, e.g. 0.25,0.5] [epochs] [lr]
"""
import sys

import numpy as np
import torch

# The pairs, their states and the disjoint dev split are the twin lab's (its rng is used on from where the split
# left it).
from nugget_run_weights import P, Q, dev, rng, train_pairs

train_docs = sorted({p for _, p in train_pairs})

df = np.zeros(1 << 16, np.float64)
for i in train_docs:
    df[np.unique(P[i][3])] += 1
IDF = np.log((len(train_docs) + 1) / (df + 1)).astype(np.float32)


def even_runs(positions, k):
    n = len(positions)
    k = min(k, n)
    cuts = [round(j * n / k) for j in range(k + 1)]
    return [positions[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]


def groups_of(i, salience, frac):
    """The kept tokens of passage i grouped into as many vectors as today's rule makes."""
    run = P[i][2].astype(np.int64)
    k, n = int(run.max()) + 1, len(run)
    if frac == 0 or salience is None:
        return [np.flatnonzero(run == r) for r in range(k)]
    s = min(round(frac * k), k - 1, n)
    top = np.sort(np.argsort(-salience)[:s])
    rest = np.setdiff1d(np.arange(n), top)
    return [np.array([t]) for t in top] + (even_runs(rest, k - s) if len(rest) else [])


def vectors(i, groups):
    H = P[i][1].astype(np.float32)
    V = np.stack([H[g].mean(0) for g in groups])
    return V / np.linalg.norm(V, axis=1, keepdims=True)


def evaluate(salience_fn, frac):
    ps = sorted({p for _, p in dev})
    where = {p: j for j, p in enumerate(ps)}
    Vs = [vectors(p, groups_of(p, salience_fn(p), frac)) for p in ps]
    Hs = [P[p][1].astype(np.float32) for p in ps]
    owner_v = np.concatenate([[j] * len(v) for j, v in enumerate(Vs)])
    owner_h = np.concatenate([[j] * len(h) for j, h in enumerate(Hs)])
    V, H = np.concatenate(Vs), np.concatenate(Hs)
    sv = np.r_[0, np.cumsum([len(v) for v in Vs])[:-1]]
    sh = np.r_[0, np.cumsum([len(h) for h in Hs])[:-1]]
    out = dict(top10=0.0, mrr=0.0, r10=0.0, vectors=len(V) / len(ps))
    for qi, p in dev:
        X = Q[qi].astype(np.float32)
        S = np.maximum.reduceat(X @ V.T, sv, axis=1).sum(0)
        T = np.maximum.reduceat(X @ H.T, sh, axis=1).sum(0)
        g = where[p]
        r = int((S > S[g]).sum()) + 1
        out["mrr"] += 1 / r
        out["r10"] += r <= 10
        out["top10"] += len(set(np.argsort(-S)[:10]) & set(np.argsort(-T)[:10])) / 10
    return {k: round(100 * v / len(dev), 2) if k != "vectors" else round(v, 1) for k, v in out.items()}


def teacher_hits(steps=None):
    """(features, label) over training passages: label 1 where the token is some query token's MaxSim
    argmax for a positive pair (full-token MaxSim, the teacher)."""
    hit = {i: np.zeros(len(P[i][2]), bool) for i in train_docs}
    for qi, p in train_pairs:
        X = Q[qi].astype(np.float32)
        hit[p][np.argmax(X @ P[p][1].astype(np.float32).T, axis=1)] = True
    return hit


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(385, 1)

    def forward(self, H, idf):
        return self.lin(torch.cat([H, idf[:, None]], 1)).squeeze(-1)


def train_head(hit, epochs=int(sys.argv[2]) if len(sys.argv) > 2 else 3, lr=float(sys.argv[3]) if len(sys.argv) > 3 else 1e-3):
    head = Head()
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=1e-4)
    ids = list(hit)
    for epoch in range(epochs):
        rng.shuffle(ids)
        total = 0.0
        for a in range(0, len(ids), 64):
            batch = ids[a:a + 64]
            H = torch.from_numpy(np.concatenate([P[i][1].astype(np.float32) for i in batch]))
            idf = torch.from_numpy(np.concatenate([IDF[P[i][3]] for i in batch]))
            y = torch.from_numpy(np.concatenate([hit[i] for i in batch]).astype(np.float32))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(head(H, idf), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(batch)
        print("head epoch", epoch, round(total / len(ids), 4), flush=True)
    return head


if __name__ == "__main__":
    fracs = [float(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "0.25,0.5,0.75").split(",")]
    print("even runs (today's rule)", evaluate(lambda p: None, 0), flush=True)
    idf = lambda p: IDF[P[p][3]]  # noqa: E731
    for f in fracs:
        print("idf", f, evaluate(idf, f), flush=True)
    hit = teacher_hits()
    print("teacher hit share", round(float(np.mean(np.concatenate(list(hit.values())))), 3), flush=True)
    head = train_head(hit)
    with torch.no_grad():
        learned = lambda p: head(torch.from_numpy(P[p][1].astype(np.float32)), torch.from_numpy(IDF[P[p][3]])).numpy()  # noqa: E731
        for f in fracs:
            print("learned", f, evaluate(learned, f), flush=True)
