"""Does a PCA map fine-tuned for ranking on the corpus's own vectors beat PCA's signs? SciFact train claims.

The map stays what the binary store ships (one linear head a bit, a sign,
the query's head scores of unit length against the code's +-1), starting
from the corpus's PCA (`encoders.hashing.pca`, fitted on 65,536 random
stored vectors as the indexer fits it). It is then trained on stored vectors
alone, as an indexer could at index time (no query, no judgement): anchors
and a pool of candidates drawn from the corpus; the teacher is the softmax
of the float cosines of each anchor over the pool, the student the softmax
of the asymmetric code scores over the same pool (sign by a straight-through
estimate), and the loss their KL divergence.

Scored like hashing_levels.py: every document of SciFact by whole-document
MaxSim of the float query against the codes of all its token vectors (no
stage 1), so the figure is the map's own quality.
Usage: PYTHONPATH=eval/notebook python eval/notebook/hashing_tuned.py INDEX(store=float16) BITS OUT.json [STEPS,...] [TAU] [tokens|maxsim]
"""
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from propdex.encoders.hashing import pca
from scifact_codes import Claims

torch.set_num_threads(1)
index, bits, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
steps_list = [int(s) for s in (sys.argv[4] if len(sys.argv) > 4 else "0,300,1000").split(",")]
tau = float(sys.argv[5]) if len(sys.argv) > 5 else 0.05
claims = Claims(index)
x, sample, starts = claims.x, claims.sample, claims.starts


def unit(v):
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def ndcg(weight: np.ndarray, bias: np.ndarray) -> float:
    signs = np.concatenate([np.sign(b.astype(np.float32) @ weight.T + bias) for b in np.array_split(x, 64)]).astype(np.float32)
    return round(100 * claims.rank(signs, lambda qv: unit(qv @ weight.T + bias))["nDCG@10"], 2)


def step(opt, loss, i: int, scale) -> None:
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i % 50 == 0:
        print(f"step {i} loss {loss.item():.4f} scale {scale.item():.2f}", flush=True)


def tune(codec, steps: int, anchors: int = 256, pool: int = 8192, lr: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """The map after `steps` of listwise distillation from float cosines."""
    data = torch.from_numpy(sample)
    mean = data.mean(0)
    w = torch.nn.Parameter(torch.from_numpy(codec.weight.copy()))
    scale = torch.nn.Parameter(torch.tensor(1.0 / tau))
    opt = torch.optim.Adam([w, scale], lr=lr)
    g = torch.Generator().manual_seed(1)
    for i in range(steps):
        idx = torch.randint(len(data), (anchors + pool,), generator=g)
        a, p = data[idx[:anchors]], data[idx[anchors:]]
        teacher = torch.log_softmax(a @ p.T / tau, dim=1)
        sq = torch.nn.functional.normalize((a - mean) @ w.T, dim=1)
        sp = (p - mean) @ w.T
        code = sp + (torch.sign(sp) - sp).detach()  # straight-through sign
        student = torch.log_softmax(scale * (sq @ code.T) / np.sqrt(w.shape[0]), dim=1)
        step(opt, torch.nn.functional.kl_div(student, teacher, log_target=True, reduction="batchmean"), i, scale)
    weight = w.detach().numpy()
    return weight, (-weight @ mean.numpy()).astype(np.float32)


def tune_maxsim(codec, steps: int, queries_a_step: int = 32, docs_a_step: int = 64, span: int = 16,
                lr: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """The map after `steps` of document-level distillation: a pseudo-query is
    a span of `span` stored vectors cut out of a document (DocSplit's
    construction), its candidates the rest of that document and other
    documents; teacher and student are MaxSim over float vectors and over
    codes, softmaxed over the candidates."""
    mean = torch.from_numpy(sample.mean(0))
    w = torch.nn.Parameter(torch.from_numpy(codec.weight.copy()))
    scale = torch.nn.Parameter(torch.tensor(4.0))
    opt = torch.optim.Adam([w, scale], lr=lr)
    ends = np.r_[starts[1:], len(x)]
    long_docs = np.flatnonzero(ends - starts >= 3 * span)
    g = np.random.default_rng(2)
    for i in range(steps):
        chosen = g.choice(long_docs, docs_a_step, replace=False)
        qs, docs = [], []
        for j, d in enumerate(chosen):
            v = torch.from_numpy(x[starts[d]:ends[d]].astype(np.float32))
            if j < queries_a_step:
                a = int(g.integers(0, len(v) - span))
                qs.append(v[a:a + span])
                v = torch.cat([v[:a], v[a + span:]])
            docs.append(v)
        lengths = torch.tensor([len(v) for v in docs])
        padded = torch.nn.utils.rnn.pad_sequence(docs, batch_first=True)  # (D, L, dim)
        pad = torch.arange(padded.shape[1])[None, :] >= lengths[:, None]
        q = torch.stack(qs)  # (Q, span, dim)
        teacher = torch.einsum("qsd,bld->qbsl", q, padded).masked_fill(pad[None, :, None, :], -9).amax(-1).mean(-1)
        sq = torch.nn.functional.normalize((q - mean) @ w.T, dim=-1)
        sp = (padded - mean) @ w.T
        code = (sp + (torch.sign(sp) - sp).detach()) / np.sqrt(w.shape[0])
        student = torch.einsum("qsk,blk->qbsl", sq, code).masked_fill(pad[None, :, None, :], -9).amax(-1).mean(-1)
        step(opt, torch.nn.functional.kl_div(torch.log_softmax(scale * student * 10, 1), torch.log_softmax(teacher / tau, 1),
                                             log_target=True, reduction="batchmean"), i, scale)
    weight = w.detach().numpy()
    return weight, (-weight @ mean.numpy()).astype(np.float32)


method = tune_maxsim if len(sys.argv) > 6 and sys.argv[6] == "maxsim" else tune
start = pca(sample, bits)
results = {}
for steps in steps_list:
    t = time.time()
    weight, bias = (start.weight, start.bias) if steps == 0 else method(start, steps)
    train_s = time.time() - t
    results[f"steps={steps}"] = {"nDCG@10": ndcg(weight, bias), "train_s": round(train_s, 1)}
    print(results, flush=True)
out.write_text(json.dumps({"command": " ".join(sys.argv), "bits": bits, "tau": tau, "results": results}, indent=1))
