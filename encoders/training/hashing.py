"""`propdex train hashing`: B hashing heads over a frozen encoder's vectors.

The contrastive-hashing recipe, over Wikipedia sections (train files only):
every section is encoded three times by the frozen encoder, once as it
indexes and twice as two views (dropout on, and a random share of the
word pieces replaced by [MASK] before the backbone). A unit's vectors in
the three encodings are aligned by what they stand for (passage, kind,
sentence, spans).

- L_max (the paper's loss): a unit's head scores in one view against the
  binarised codes of the other view's units, s(i, j) = cos(z_i, sign z_j)/tau;
  each unit is pulled to its closest positive (its own other view, or a unit
  whose indexed vectors are near-duplicates of its own) and pushed from the
  rest. Both directions.
- The ranking term (`--rank-weight`, 0 for none): the asymmetric score
  stage 2 uses, cos(scores of the query vector, code of the document vector),
  distilled listwise from the float inner products it replaces, over the
  indexed vectors of a batch (each a query for all the others) made of
  groups of near neighbours (`nearest`). The code side passes its gradient
  straight through the sign.

Held-out sections (files 70-99) measure how well each method's codes keep
the float ranking: for anchor vectors, the share of their 10 nearest float
neighbours among the held-out vectors that the asymmetric score also puts
in its top 10. The training record keeps that figure for the learned heads
and for the untrained heads, random hyperplanes, PCA and ITQ at the same bits.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from .. import DEFAULT_BACKBONE, Document, load_encoder
from ..backbone import Backbone
from ..hashing import HashCodec, initial, lsh, pca, signs
from ..provenance import command_line, hardware, library_versions, save_weights
from .data import WIKI_EXTRACTED, packed_sentences, wiki_sample
from .optim import adamw_with_warmup, smoothed, update

log = logging.getLogger(__name__)

SECTION_WORDS = 120  # words a training document holds: a few sentences, about a passage


def wiki_documents(folder: str | Path, split: str, n: int, seed: int = 0) -> list[Document]:
    """`n` documents of a few sentences each, cut from the split's sections, each with its article's title."""
    chunks = wiki_sample(folder, split, n, lambda text, title: [(title, c) for c in packed_sentences(text, SECTION_WORDS)
                                                              if len(c.split()) >= 8], seed)
    return [Document(f"{split}-{i}", text, title) for i, (title, text) in enumerate(chunks)]


@contextlib.contextmanager
def noisy(backbone: Backbone, mask_rate: float, generator: torch.Generator) -> Iterator[None]:
    """The backbone as a view sees it: dropout on, and each word piece that
    is not a special token replaced by [MASK] with probability `mask_rate`."""
    model, tokenizer = backbone.model, backbone.tokenizer
    specials = torch.tensor(sorted(set(tokenizer.all_special_ids)))

    def mask(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        ids = kwargs["input_ids"]
        drop = torch.rand(ids.shape, generator=generator) < mask_rate
        drop &= ~torch.isin(ids.cpu(), specials)
        kwargs["input_ids"] = torch.where(drop.to(ids.device), tokenizer.mask_token_id, ids)
        return args, kwargs

    hook = model.register_forward_pre_hook(mask, with_kwargs=True)
    model.train()
    try:
        yield
    finally:
        hook.remove()
        model.eval()


def encoded_units(encoder: Any, docs: list[Document]) -> dict[tuple, np.ndarray]:
    """Every vector the encoder indexes for `docs`, keyed by what it stands for."""
    passages = [p for d in docs for p in encoder.passages(d)]
    out: dict[tuple, np.ndarray] = {}
    for i, enc in enumerate(encoder.encode(passages, progress=True)):
        for v, u in zip(enc.vectors, enc.units):
            out[(i, int(u.kind), u.sentence, u.spans)] = v
    return out


def aligned_views(encoder: Any, docs: list[Document], mask_rate: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indexed, view 1, view 2): float32 (n, dim) rows of the same n units."""
    clean = encoded_units(encoder, docs)
    generator = torch.Generator().manual_seed(seed)
    views = []
    for _ in range(2):
        with noisy(encoder.backbone, mask_rate, generator):
            views.append(encoded_units(encoder, docs))
    keys = [k for k in clean if k in views[0] and k in views[1]]
    if len(keys) < len(clean):
        log.info("%d of %d units kept in both views (the rest were chosen differently under noise)", len(keys), len(clean))
    return tuple(np.stack([part[k] for k in keys]).astype(np.float32) for part in (clean, *views))  # type: ignore[return-value]


def _features(encoder: Any, docs: list[Document], held: list[Document], mask_rate: float, seed: int,
              cache: Path | None) -> tuple[np.ndarray, ...]:
    """(indexed, view 1, view 2, held-out indexed) vectors, from `cache` where a run on the same inputs left them."""
    import hashlib
    import json

    key = hashlib.sha256(json.dumps([encoder.config(), encoder.backbone.weights_hash, mask_rate, seed,
                                     [(d.title, d.text) for d in docs + held]]).encode()).hexdigest()[:16]
    path = None if cache is None else Path(cache) / f"hashing-{key}.npz"
    if path is not None and path.is_file():
        with np.load(path) as f:
            log.info("encoded views read from %s", path)
            return f["x0"], f["x1"], f["x2"], f["h0"]
    log.info("encoding %d training documents three times (indexed, two noisy views) and %d held-out", len(docs), len(held))
    x0, x1, x2 = aligned_views(encoder, docs, mask_rate, seed)
    h0 = np.stack(list(encoded_units(encoder, held).values())).astype(np.float32)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, x0=x0, x1=x1, x2=x2, h0=h0)
        tmp.rename(path)
    return x0, x1, x2, h0


# -- the losses ---------------------------------------------------------------------------
def straight_through_sign(z: torch.Tensor) -> torch.Tensor:
    """sign(z) forward, tanh's gradient backward."""
    soft = torch.tanh(z)
    return soft + (torch.where(z > 0, 1.0, -1.0) - soft).detach()


def l_max(scores: torch.Tensor, codes: torch.Tensor, positives: torch.Tensor, tau: float) -> torch.Tensor:
    """The paper's L_max: each row's closest positive against every negative.
    `scores` (n, B) are one view's head scores, `codes` (n, B) the other
    view's signs (no gradient), `positives` (n, n) bool with a true diagonal."""
    sim = torch.nn.functional.normalize(scores, dim=1) @ codes.T / (codes.shape[1] ** 0.5 * tau)
    best = sim.masked_fill(~positives, float("-inf")).max(dim=1).values
    negatives = torch.logsumexp(sim.masked_fill(positives, float("-inf")), dim=1)
    return (torch.logaddexp(best, negatives) - best).mean()


def nearest(x: torch.Tensor, anchors: int, k: int, seed: int, chunk: int = 1024) -> np.ndarray:
    """(anchors, k) rows of `x`: random anchors, each followed by its k - 1
    nearest neighbours by inner product. The ranking term's batches are made
    of these groups: the order it must keep is among near neighbours, which a
    uniform batch of a large corpus hardly holds."""
    chosen = torch.from_numpy(np.random.default_rng(seed).choice(len(x), size=anchors, replace=False)).to(x.device)
    out = []
    for start in range(0, anchors, chunk):
        a = chosen[start : start + chunk]
        out.append(torch.topk(x[a] @ x.T, k, dim=1).indices.cpu())  # the anchor itself comes first
    return torch.cat(out).numpy()


def rank_loss(x: torch.Tensor, scores: torch.Tensor, scale: torch.Tensor, tau: float) -> torch.Tensor:
    """KL from the float inner products' softmax (each row a query over the
    other rows) to the asymmetric scores': what stage 2 ranks by."""
    n = len(x)
    eye = torch.eye(n, dtype=torch.bool, device=x.device)
    teacher = (x @ x.T / tau).masked_fill(eye, float("-inf"))
    codes = straight_through_sign(scores) / scores.shape[1] ** 0.5
    student = (torch.nn.functional.normalize(scores, dim=1) @ codes.T * scale).masked_fill(eye, float("-inf"))
    p = torch.softmax(teacher, dim=1)
    return (p * (torch.log_softmax(teacher, dim=1).masked_fill(eye, 0) - torch.log_softmax(student, dim=1).masked_fill(eye, 0))).sum(1).mean()


# -- the held-out measure -------------------------------------------------------------------
def neighbour_recall(codec: HashCodec, vectors: np.ndarray, anchors: int = 1000, k: int = 10, seed: int = 0) -> float:
    """Share of each anchor's k nearest float neighbours (itself excluded)
    that the asymmetric score of query and code also ranks in its top k."""
    rng = np.random.default_rng(seed)
    a = rng.choice(len(vectors), size=min(anchors, len(vectors)), replace=False)
    exact = vectors[a] @ vectors.T
    approx = codec.query(vectors[a]) @ signs(codec.encode(vectors), codec.bits).T
    exact[np.arange(len(a)), a] = approx[np.arange(len(a)), a] = -np.inf
    top_exact = np.argpartition(-exact, k, axis=1)[:, :k]
    top_approx = np.argpartition(-approx, k, axis=1)[:, :k]
    return float(np.mean([len(set(e) & set(p)) / k for e, p in zip(top_exact.tolist(), top_approx.tolist())]))


def baselines(bits: int, train: np.ndarray, heldout: np.ndarray) -> dict[str, float]:
    """neighbour_recall of the untrained heads, LSH, PCA and ITQ at `bits` (PCA, ITQ fitted on `train`)."""
    from propdex.indexer.binary import fit_itq  # FAISS's ITQ; training sits above the indexer

    sample = train[np.random.default_rng(0).choice(len(train), size=min(len(train), 65_536), replace=False)]
    dim = train.shape[1]
    codecs = {"untrained": initial(dim, bits), "lsh": lsh(dim, bits)}
    if bits <= dim:
        codecs |= {"pca": pca(sample, bits), "itq": fit_itq(sample, bits)}
    return {name: round(neighbour_recall(c, heldout), 4) for name, c in codecs.items()}


def _start(init: str, dim: int, bits: int, train: np.ndarray, seed: int) -> HashCodec:
    """The heads training starts from: ITQ's map over a sample of the
    training vectors (the strongest linear baseline, which training then
    moves toward the ranking it must keep), or random orthogonal heads."""
    if init == "random" or bits > dim:
        return initial(dim, bits, seed)
    if init != "itq":
        raise ValueError(f"init must be itq or random, got {init!r}")
    from propdex.indexer.binary import fit_itq

    sample = train[np.random.default_rng(seed).choice(len(train), size=min(len(train), 65_536), replace=False)]
    return fit_itq(sample, bits)


# -- training -------------------------------------------------------------------------------
def train_hashing(encoder_name: str, bits: int, out: Path, *, wiki: str | Path = WIKI_EXTRACTED, backbone: str | None = None,
                  documents: int = 2000, heldout: int = 200, steps: int = 600, batch: int = 2048, lr: float = 1e-4,
                  tau: float = 0.1, lmax_weight: float = 0.1, rank_weight: float = 1.0, rank_tau: float = 0.05, positive: float = 0.9,
                  mask_rate: float = 0.15, init: str = "itq", seed: int = 0, device: str = "auto", cache: Path | None = None) -> dict[str, Any]:
    """Train the heads and write them to `out` (safetensors and config with
    the training record). Returns the record. `cache`: a folder where the
    encoded views are kept and reused by a run on the same inputs."""
    started = time.time()
    torch.manual_seed(seed)
    bb = Backbone.load(backbone or DEFAULT_BACKBONE, device=device)
    encoder = load_encoder(encoder_name, backbone=bb)
    docs = wiki_documents(wiki, "train", documents, seed)
    held = wiki_documents(wiki, "heldout", heldout, seed)
    x0, x1, x2, h0 = _features(encoder, docs, held, mask_rate, seed, cache)
    encode_s = time.time() - started

    dev = bb.device
    start = _start(init, encoder.dim, bits, x0, seed)
    head = torch.nn.Linear(encoder.dim, bits).to(dev)
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(start.weight))
        head.bias.copy_(torch.from_numpy(start.bias))
    log_scale = torch.nn.Parameter(torch.tensor(np.log(1.0 / rank_tau), dtype=torch.float32, device=dev))
    params = [*head.parameters(), log_scale]
    opt, sched, _ = adamw_with_warmup(params, lr, steps)
    t0, t1, t2 = (torch.from_numpy(x).to(dev) for x in (x0, x1, x2))
    neighbours = nearest(t0, anchors=min(len(x0), 20_000), k=16, seed=seed) if rank_weight else None
    rng = np.random.default_rng(seed)
    running = None
    bar = tqdm(range(steps), desc="train hashing", unit="step", dynamic_ncols=True)
    for _ in bar:
        idx = torch.from_numpy(rng.choice(len(x0), size=min(batch, len(x0)), replace=False)).to(dev)
        clean = t0[idx]
        positives = (clean @ clean.T) >= positive
        positives.fill_diagonal_(True)
        z1, z2 = head(t1[idx]), head(t2[idx])
        loss = torch.zeros((), device=dev)
        if lmax_weight:
            loss = loss + lmax_weight * 0.5 * (l_max(z1, torch.sign(z2).detach(), positives, tau)
                                               + l_max(z2, torch.sign(z1).detach(), positives, tau))
        if rank_weight:
            rows = torch.from_numpy(neighbours[rng.choice(len(neighbours), size=max(1, batch // neighbours.shape[1]),
                                                          replace=False)].ravel()).to(dev)
            loss = loss + rank_weight * rank_loss(t0[rows], head(t0[rows]), log_scale.exp(), rank_tau)
        running = smoothed(running, update(loss, params, opt, sched))
        bar.set_postfix(loss=f"{running:.4f}")
    bar.close()

    learned = HashCodec(head.weight.detach().float().cpu().numpy(), head.bias.detach().float().cpu().numpy(), "learned")
    heldout_recall = {"learned": round(neighbour_recall(learned, h0), 4), **baselines(bits, x0, h0)}
    record = {
        "kind": "hashing",
        "encoder": encoder.config(),
        "bits": bits,
        "backbone_sha256": bb.weights_hash,
        "recipe": {"loss": " + ".join(t for t, w in (("L_max over two views", lmax_weight), ("listwise ranking distillation", rank_weight)) if w),
                   "init": init, "tau": tau, "lmax_weight": lmax_weight, "rank_weight": rank_weight, "rank_tau": rank_tau, "positive_cosine": positive,
                   "mask_rate": mask_rate, "dropout": "the backbone's own"},
        "training": {"steps": steps, "batch": batch, "lr": lr, "seed": seed, "documents": len(docs),
                     "vectors": len(x0), "vectors_seen": steps * min(batch, len(x0)), "final_loss": round(float(running or 0), 5),
                     "encode_s": round(encode_s, 1), "train_s": round(time.time() - started - encode_s, 1)},
        "data": {"wiki": str(wiki), "train": "wiki_00..69 sections", "heldout": "wiki_70..99 sections",
                 "heldout_documents": len(held), "heldout_vectors": len(h0)},
        "heldout_neighbour_recall@10": heldout_recall,
        "command": command_line(),
        "hardware": hardware(),
        "versions": library_versions(),
    }
    save_weights({"weight": head.weight.detach().float().cpu(), "bias": head.bias.detach().float().cpu()}, out, record)
    log.info("hashing heads written to %s; held-out neighbour recall@10: %s", out, heldout_recall)
    return record
