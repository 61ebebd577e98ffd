"""Learned weights inside nugget runs, distilled from tokens MaxSim (eval/notebook/README.md): run
`python eval/notebook/nugget_run_weights_data.py` first, then
`python eval/notebook/nugget_run_weights.py lin,1000,0.01,1 idf,1000,0.01,1` from the repository root."""
import pickle, random, sys, time, math
import numpy as np, torch
torch.manual_seed(0); rng = random.Random(0)
torch.set_num_threads(1)
D = pickle.load(open("runs/lab/nugw.pkl", "rb"))
P, Q, pos, src = D["P"], D["Q"], D["pos"], D["src"]
by_doc = {di: i for i, (di, *_) in enumerate(P)}
pairs = [(qi, by_doc[d]) for qi, d in enumerate(pos) if d in by_doc]
docs = sorted({p for _, p in pairs}); rng.shuffle(docs)
dev_docs = set(docs[: len(docs) * 15 // 100])
train_pairs = [x for x in pairs if x[1] not in dev_docs]; dev = [x for x in pairs if x[1] in dev_docs]
print("train", len(train_pairs), "dev", len(dev), "dev docs", len(dev_docs))
idf = None
try:
    from safetensors.torch import load_file
    import glob
    f = glob.glob("encoders/weights/idf*/*.safetensors")
    idf = load_file(f[0])["idf"] if f else None
except Exception as e: print("no idf", e)

def pad_passages(ids):
    m = max(len(P[i][1]) for i in ids); k = max(int(P[i][2].max()) + 1 for i in ids)
    H = torch.zeros(len(ids), m, 384); R = torch.full((len(ids), m), -1, dtype=torch.long); T = torch.zeros(len(ids), m, dtype=torch.long)
    for j, i in enumerate(ids):
        n = len(P[i][1]); H[j, :n] = torch.from_numpy(P[i][1].astype(np.float32)); R[j, :n] = torch.from_numpy(P[i][2].astype(np.int64)); T[j, :n] = torch.from_numpy(P[i][3].astype(np.int64))
    return H, R, T, k

def pad_queries(qs):
    m = max(len(Q[i]) for i in qs)
    X = torch.zeros(len(qs), m, 384); M = torch.zeros(len(qs), m, dtype=torch.bool)
    for j, i in enumerate(qs):
        X[j, :len(Q[i])] = torch.from_numpy(Q[i].astype(np.float32)); M[j, :len(Q[i])] = True
    return X, M

class Scorer(torch.nn.Module):
    def __init__(self, kind):
        super().__init__(); self.kind = kind
        self.lin = torch.nn.Linear(384, 1); torch.nn.init.zeros_(self.lin.weight); torch.nn.init.zeros_(self.lin.bias)
        self.a = torch.nn.Parameter(torch.zeros(()))
        if kind == "mlp":
            self.mlp = torch.nn.Sequential(torch.nn.Linear(384, 128), torch.nn.GELU(), torch.nn.Linear(128, 1))
            torch.nn.init.zeros_(self.mlp[2].weight); torch.nn.init.zeros_(self.mlp[2].bias)
    def forward(self, H, T):
        s = self.lin(H).squeeze(-1)
        if self.kind in ("idf",) and idf is not None: s = s + self.a * idf[T]
        if self.kind == "mlp": s = s + self.mlp(H).squeeze(-1)
        return s

def nuggets(scorer, H, R, T, k):
    s = scorer(H, T) if scorer is not None else torch.zeros(H.shape[:2])
    valid = R >= 0
    s = s.masked_fill(~valid, -1e4)
    Rc = R.clamp(min=0)
    # softmax within runs: subtract the run max for stability
    mx = torch.full((H.shape[0], k), -1e4).scatter_reduce(1, Rc, s, "amax")
    e = torch.exp(s - mx.gather(1, Rc)) * valid
    den = torch.zeros(H.shape[0], k).scatter_add(1, Rc, e)
    w = e / den.gather(1, Rc).clamp(min=1e-12)
    V = torch.zeros(H.shape[0], k, 384).scatter_add(1, Rc[..., None].expand(-1, -1, 384), H * w[..., None])
    live = den > 0
    return torch.nn.functional.normalize(V, dim=-1), live

def maxsim(X, M, V, live):
    s = torch.einsum("qld,pkd->qplk", X, V).masked_fill(~live[None, :, None, :], -1e4)
    return (s.max(-1).values * M[:, None, :]).sum(-1)

def teacher(X, M, H, R):
    s = torch.einsum("qld,pmd->qplm", X, H).masked_fill((R < 0)[None, :, None, :], -1e4)
    return (s.max(-1).values * M[:, None, :]).sum(-1)

def evaluate(scorer, pool=None):
    ps = sorted({p for _, p in dev}); where = {p: j for j, p in enumerate(ps)}
    qs = [q for q, _ in dev]
    out = {"mrr_s": 0, "mrr_t": 0, "top10": 0, "r10_s": 0, "r10_t": 0}
    with torch.no_grad():
        Ss, Ts = [], []
        for a in range(0, len(ps), 128):
            H, R, T, k = pad_passages(ps[a:a+128]); V, live = nuggets(scorer, H, R, T, k)
            Sc, Tc = [], []
            for b in range(0, len(qs), 128):
                X, M = pad_queries(qs[b:b+128]); Sc.append(maxsim(X, M, V, live)); Tc.append(teacher(X, M, H, R))
            Ss.append(torch.cat(Sc)); Ts.append(torch.cat(Tc))
        S, Tt = torch.cat(Ss, 1), torch.cat(Ts, 1)
    for i, (_, p) in enumerate(dev):
        g = where[p]
        rs = int((S[i] > S[i, g]).sum()) + 1; rt = int((Tt[i] > Tt[i, g]).sum()) + 1
        out["mrr_s"] += 1 / rs; out["mrr_t"] += 1 / rt; out["r10_s"] += rs <= 10; out["r10_t"] += rt <= 10
        out["top10"] += len(set(S[i].topk(10).indices.tolist()) & set(Tt[i].topk(10).indices.tolist())) / 10
    return {k: round(100 * v / len(dev), 2) for k, v in out.items()}

def train(kind, steps, lr, tau, B=32, neg=32, wd=0.0):
    scorer = Scorer(kind); opt = torch.optim.AdamW(scorer.parameters(), lr=lr, weight_decay=wd)
    allp = sorted({p for _, p in train_pairs})
    t0 = time.time()
    for step in range(steps):
        batch = rng.sample(train_pairs, B)
        ps = list(dict.fromkeys([p for _, p in batch] + rng.sample(allp, neg)))
        H, R, T, k = pad_passages(ps); X, M = pad_queries([q for q, _ in batch])
        with torch.no_grad(): Tt = teacher(X, M, H, R)
        V, live = nuggets(scorer, H, R, T, k); S = maxsim(X, M, V, live)
        loss = torch.nn.functional.kl_div(torch.log_softmax(S / tau, 1), torch.log_softmax(Tt / tau, 1), log_target=True, reduction="batchmean")
        opt.zero_grad(); loss.backward(); opt.step()
        if step % 100 == 0: print(kind, step, round(loss.item(), 4), round(time.time() - t0), flush=True)
    return scorer

if __name__ == "__main__":
    print("uniform (today's rule)", evaluate(None), flush=True)
    for kind, steps, lr, tau in [(a, int(b), float(c), float(d)) for a, b, c, d in (x.split(",") for x in sys.argv[1:])]:
        s = train(kind, steps, lr, tau)
        print(kind, steps, lr, tau, evaluate(s), flush=True)
        torch.save(s.state_dict(), f"runs/lab/scorer_{kind}_{steps}_{lr}_{tau}.pt")
