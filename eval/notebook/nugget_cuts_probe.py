"""Other cuts of the same nugget runs on the dev of eval/notebook/nugget_run_weights.py (run its data script first):
`python eval/notebook/nugget_cuts_probe.py` from the repository root."""
import pickle, random, sys, numpy as np, torch
sys.argv = [sys.argv[0]]
exec(open("eval/notebook/nugget_run_weights.py").read().split('if __name__ == "__main__":')[0])
from transformers import AutoTokenizer
from propdex.encoders.backbone import resolve_backbone
tok = AutoTokenizer.from_pretrained(str(resolve_backbone("sentence-transformers/all-MiniLM-L6-v2")))
cont = np.array([t.startswith("##") for t in tok.convert_ids_to_tokens(list(range(len(tok))))])
orig = [p[2].copy() for p in P]
def recut(mode):
    for i, (di, st, run, ids) in enumerate(P):
        k = int(orig[i].max()) + 1; n = len(st)
        if mode == "even": r = orig[i]
        else:
            h = st.astype(np.float32)
            starts = ~cont[ids]; starts[0] = True
            if mode == "sim":
                sim = (h[1:] * h[:-1]).sum(1)  # cut before t where sim(t-1,t) is low
                cand = np.flatnonzero(starts[1:]) + 1
                order = cand[np.argsort(sim[cand - 1], kind="stable")]
                cuts = np.sort(order[: k - 1])
            elif mode == "words":  # runs of whole words, near-equal by words
                w = np.flatnonzero(starts); kk = min(k, len(w))
                cuts = np.array([w[round(j * len(w) / kk)] for j in range(1, kk)], dtype=int)
            r = np.zeros(n, dtype=np.int16); r[cuts] = 1; r = np.cumsum(r).astype(np.int16)
        P[i] = (di, st, r, ids)
for mode in ["even", "sim", "words"]:
    recut(mode); print(mode, evaluate(None), flush=True)
