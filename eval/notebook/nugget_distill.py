"""Probe: LoRA on the passage side of `nugget`, distilled from `tokens` MaxSim (issue 55).

The frozen probes (nugget_run_weights.py, nugget_salient.py) showed that a run's mean keeps about three quarters
of `tokens`' top 10 whatever weighs or cuts the run. This one lets the encoder itself change what a run's mean
holds: LoRA adapters on the upper layers of the passage tower only, the runs cut exactly as `nugget` cuts them,
queries kept as `tokens` encodes them (frozen), so an index of adapted nuggets is searched by today's query
vectors. Teacher: `tokens`' MaxSim (frozen states) of a batch's queries over its passages; student: MaxSim over
the adapted runs' means; KL between the two softmaxes over the batch's passages.

Data: SciFact train claims -> cited abstracts, and Wikipedia train-split section pairs (nugget_run_weights_data.py's
construction; never HotpotQA, never SciFact test). Dev: 15% of the passages, held out with their pairs.

    python eval/notebook/nugget_distill.py STEPS LR [R] [LAYER] [LOSS] [HARD]

LOSS: `kl` (the batch softmaxes of the MaxSim sums, temperature 1) or `max` (each query token's best cosine over a
passage's nuggets against its best over the passage's tokens, squared error over every query and passage of the
batch: a dense target that random negatives do not make easy). HARD: hard negatives a query (default 0): each
training query's batch also holds one of the HARD passages that today's frozen runs rank highest for it among
1,000 training passages drawn at random (its own passage excluded), so the softmax has near-misses to order.
"""
import random, sys, time

import torch

from propdex.encoders import load_encoder
from propdex.encoders.adapters import adapt, upper_layers

from nugget_run_weights_data import training_pairs  # eval/notebook/, beside this script

steps, lr = int(sys.argv[1]), float(sys.argv[2])
rank = int(sys.argv[3]) if len(sys.argv) > 3 else 8
first = int(sys.argv[4]) if len(sys.argv) > 4 else 3
objective = sys.argv[5] if len(sys.argv) > 5 else "kl"
hard_k = int(sys.argv[6]) if len(sys.argv) > 6 else 0
torch.manual_seed(0)
rng = random.Random(0)
torch.set_num_threads(2)
enc = load_encoder("nugget", device="cpu")
pairs = [(q, d) for _, q, d in training_pairs(rng)]
docs = list(dict.fromkeys(d.id for _, d in pairs))
by_id = {d.id: d for _, d in pairs}
rng.shuffle(docs)
dev_docs = set(docs[: len(docs) * 15 // 100])
# One window a document (its first), the runs `nugget` cuts, the frozen states `tokens` keeps (the teacher).
t0 = time.time()
P = {}
for a in range(0, len(docs), 32):
    batch = [enc.passages(by_id[d])[0] for d in docs[a:a + 32]]
    for did, p, tok in zip(docs[a:a + 32], batch, enc.forward(batch)):
        idx = enc.kept(p, tok, query=False)
        if len(idx):
            states = torch.nn.functional.normalize(tok.states.float(), dim=-1)[idx]
            P[did] = (p, enc.groups(idx, tok), idx, states)
print("passages", len(P), round(time.time() - t0), "s", flush=True)
Q = [torch.from_numpy(e.vectors) for e in enc.encode_queries([q for q, _ in pairs])]
train_pairs = [(i, d.id) for i, (_, d) in enumerate(pairs) if d.id in P and d.id not in dev_docs]
dev = [(i, d.id) for i, (_, d) in enumerate(pairs) if d.id in P and d.id in dev_docs]
print("train pairs", len(train_pairs), "dev pairs", len(dev), flush=True)

forward = type(enc).forward.__wrapped__  # the encoder's own forward pass, without inference mode


def runs_of(model, ids):
    """(passages, k, dim) run means and their mask, from `model`'s states."""
    enc.model = model
    states = forward(enc, [P[d][0] for d in ids])
    k = max(len(P[d][1]) for d in ids)
    V = torch.zeros(len(ids), k, 384)
    live = torch.zeros(len(ids), k, dtype=torch.bool)
    for j, (d, tok) in enumerate(zip(ids, states)):
        h = torch.nn.functional.normalize(tok.states.float(), dim=-1)
        for r, g in enumerate(P[d][1]):
            V[j, r] = h[g].mean(0)
        live[j, : len(P[d][1])] = True
    return torch.nn.functional.normalize(V, dim=-1), live


def padded(rows):
    """(n, longest, dim) rows of vectors stacked with zeros after each, and the mask of the real ones."""
    m = max(len(r) for r in rows)
    X = torch.zeros(len(rows), m, 384)
    live = torch.zeros(len(rows), m, dtype=torch.bool)
    for j, r in enumerate(rows):
        X[j, : len(r)] = r
        live[j, : len(r)] = True
    return X, live


def teacher_of(ids):
    return padded([P[d][3] for d in ids])


def queries_of(qs):
    return padded([Q[i] for i in qs])


def token_max(X, V, live):
    """(queries, passages, query tokens): each query token's best cosine in each passage."""
    return torch.einsum("qld,pkd->qplk", X, V).masked_fill(~live[None, :, None, :], -1e4).max(-1).values


def maxsim(X, M, V, live):
    return (token_max(X, V, live) * M[:, None, :]).sum(-1)


@torch.no_grad()
def evaluate(model):
    ps = sorted({d for _, d in dev})
    where = {d: j for j, d in enumerate(ps)}
    X, M = queries_of([q for q, _ in dev])
    Ss, Ts = [], []
    for a in range(0, len(ps), 64):
        V, live = runs_of(model, ps[a:a + 64])
        H, hl = teacher_of(ps[a:a + 64])
        Ss.append(maxsim(X, M, V, live))
        Ts.append(maxsim(X, M, H, hl))
    S, T = torch.cat(Ss, 1), torch.cat(Ts, 1)
    out = dict.fromkeys(["mrr_s", "mrr_t", "r10_s", "r10_t", "top10"], 0.0)
    for i, (_, d) in enumerate(dev):
        g = where[d]
        rs, rt = int((S[i] > S[i, g]).sum()) + 1, int((T[i] > T[i, g]).sum()) + 1
        out["mrr_s"] += 1 / rs
        out["mrr_t"] += 1 / rt
        out["r10_s"] += rs <= 10
        out["r10_t"] += rt <= 10
        out["top10"] += len(set(S[i].topk(10).indices.tolist()) & set(T[i].topk(10).indices.tolist())) / 10
    return {k: round(100 * v / len(dev), 2) for k, v in out.items()}


print("frozen runs (today's rule)", evaluate(None), flush=True)
allp = sorted({d for _, d in train_pairs})
hard = {}
if hard_k:
    def frozen_runs(d):
        sizes = [len(g) for g in P[d][1]]
        return torch.nn.functional.normalize(torch.stack([c.mean(0) for c in P[d][3].split(sizes)]), dim=-1)
    pool = rng.sample(allp, 1000)
    V, live = padded([frozen_runs(d) for d in pool])
    with torch.no_grad():
        for a in range(0, len(train_pairs), 256):
            chunk = train_pairs[a:a + 256]
            X, M = queries_of([q for q, _ in chunk])
            S = torch.cat([maxsim(X, M, V[b:b + 100], live[b:b + 100]) for b in range(0, len(pool), 100)], 1)
            for (q, gold), row in zip(chunk, S):
                hard[q] = [pool[i] for i in row.argsort(descending=True).tolist() if pool[i] != gold][:hard_k]
    print("hard negatives mined", len(hard), flush=True)
model = adapt(enc.backbone.model, rank, upper_layers(enc.backbone.model.config.num_hidden_layers, first)).eval()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
B, NEG, tau = 16, 16, 1.0
t0 = time.time()
for step in range(1, steps + 1):
    batch = rng.sample(train_pairs, B)
    hards = [rng.choice(hard[q]) for q, _ in batch] if hard else []
    ids = list(dict.fromkeys([d for _, d in batch] + hards + rng.sample(allp, NEG // 2 if hard else NEG)))
    X, M = queries_of([q for q, _ in batch])
    with torch.no_grad():
        H, hl = teacher_of(ids)
        T = token_max(X, H, hl)
    V, live = runs_of(model, ids)
    Sv = token_max(X, V, live)
    if objective == "max":
        loss = ((Sv - T) ** 2 * M[:, None, :]).sum() / (M.sum() * len(ids))
    else:
        T, Ssc = (T * M[:, None, :]).sum(-1), (Sv * M[:, None, :]).sum(-1)
        loss = torch.nn.functional.kl_div(torch.log_softmax(Ssc / tau, 1), torch.log_softmax(T / tau, 1), log_target=True, reduction="batchmean")
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 25 == 0:
        print("step", step, round(loss.item(), 4), round(time.time() - t0), "s", flush=True)
    if step % 100 == 0 or step == steps:
        print("step", step, evaluate(model), flush=True)
