"""`propdex train proposition`: the sub-sentence encoder's head.

The backbone stays frozen, so every input is pooled once up front and only
the MLP (Linear, ReLU, Linear -> 64) trains, with supervised contrastive loss
(SupCon) in which the other propositions of the same sentence are in the
batch as negatives.

Training data (recorded in the weights' config):
  - PropSegment *test* split, Wikipedia clusters (never dev, whose relations
    are the evaluation). For every proposition of every rater's segmentation:
      * its own text, encoded alone, is a positive of the proposition pooled
        inside its sentence (self-supervision: the mask must come to mean what
        the proposition says, not what the whole sentence says);
      * propositions of other documents of the same cluster (versions of one
        article) that say the same thing are positives, mined with care:
        mutual nearest neighbours by the frozen backbone's similarity of
        their texts, cosine >= 0.85 and content-word Jaccard >= 0.5.
  - SICK pairs with entailment both ways; STS-B train pairs scored >= 4.
A few test clusters are held out: their mined alignments pick the epoch
(P@1 of a proposition in context retrieving its aligned proposition).
"""
from __future__ import annotations

import logging
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..backbone import Backbone
from ..base import span_pool
from ..proposition import PropositionHead, save_head
from ..provenance import command_line, data_record, hardware, library_versions
from ..segment import word_spans
from .data import SegmentedSentence, propsegment_sentences, sick_pairs, stsb_pairs
from .segmenter import split_clusters

log = logging.getLogger(__name__)

_STOP = frozenset("a an the of in on at to for by with and or is was are were be been has have had as from that this its it his her their which who".split())


@torch.inference_mode()
def pooled(bb: Backbone, texts: list[str], groups: list[list[list[tuple[int, int]]]], batch: int = 64) -> list[torch.Tensor]:
    """Per text, the mean token state under each of its span groups (frozen backbone)."""
    out: list[torch.Tensor | None] = [None] * len(texts)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    for s in tqdm(range(0, len(order), batch), desc="pool", leave=False):
        idx = order[s : s + batch]
        enc = bb.tokenizer([texts[i] for i in idx], padding=True, truncation=True, max_length=bb.max_length,
                           return_offsets_mapping=True, return_special_tokens_mask=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping").numpy()
        special = enc.pop("special_tokens_mask").numpy().astype(bool)
        real = ~special & (enc["attention_mask"].numpy() > 0)
        hidden = bb.model(**{k: v.to(bb.device) for k, v in enc.items()}).last_hidden_state.float()
        for r, i in enumerate(idx):
            out[i] = span_pool(hidden[r], offsets[r], real[r], groups[i]).cpu()
    return out  # type: ignore[return-value]


def whole(text: str) -> list[list[tuple[int, int]]]:
    return [[(0, len(text))]]


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[^\W_]+", text.lower()) if w not in _STOP}


@dataclass
class Examples:
    """Pooled 384-d inputs and who is a positive of whom."""

    context: list[torch.Tensor]  # per sentence: (props, dim) pooled in context
    alone: list[torch.Tensor]  # per sentence: (props, dim) the props' own text
    prop_keys: list[list[tuple]]  # per sentence: a key per prop
    aligned: dict[tuple, list[tuple[int, int]]]  # prop key -> (sentence, prop) positives
    pairs: torch.Tensor  # (n, 2, dim) sentence pairs (SICK, STS-B)


def build_examples(bb: Backbone, sentences: list[SegmentedSentence], pairs: list[tuple[str, str]], mine: bool) -> Examples:
    props = []
    for s in sentences:
        seen = dict.fromkeys(list(s.propositions) + [p for r in s.other_responses for p in r])
        props.append(list(seen))
    spans = [[word_spans(s.text, s.words, p) for p in ps] for s, ps in zip(sentences, props)]
    context = pooled(bb, [s.text for s in sentences], [[list(g) for g in sp] for sp in spans])
    texts = [[" ".join(s.text[a:b] for a, b in g) for g in sp] for s, sp in zip(sentences, spans)]
    flat = [t for ts in texts for t in ts]
    alone_flat = pooled(bb, flat, [whole(t) for t in flat])
    alone, k = [], 0
    for ts in texts:
        alone.append(torch.cat(alone_flat[k : k + len(ts)]) if ts else torch.zeros(0, bb.dim))
        k += len(ts)
    keys = [[(i, j) for j in range(len(ps))] for i, ps in enumerate(props)]
    aligned = mine_alignments(sentences, props, texts, alone) if mine else {}
    pair_vecs = pooled(bb, [t for p in pairs for t in p], [whole(t) for p in pairs for t in p])
    pair_tensor = torch.cat(pair_vecs).view(len(pairs), 2, -1) if pairs else torch.zeros(0, 2, bb.dim)
    return Examples(context, alone, keys, aligned, pair_tensor)


def mine_alignments(sentences, props, texts, alone, min_cos: float = 0.85, min_jaccard: float = 0.5) -> dict:
    """Reference propositions of different documents of one cluster that say
    the same thing: mutual nearest neighbours, cosine and word overlap high."""
    by_doc: dict[str, list[tuple[int, int]]] = {}
    cluster_of: dict[str, str] = {}
    for i, s in enumerate(sentences):
        cluster_of[s.doc] = s.cluster
        n_ref = len(s.propositions)
        by_doc.setdefault(s.doc, []).extend((i, j) for j in range(n_ref))
    aligned: dict[tuple, list[tuple[int, int]]] = {}
    docs = sorted(by_doc)
    for a in docs:
        for b in docs:
            if a >= b or cluster_of[a] != cluster_of[b] or not by_doc[a] or not by_doc[b]:
                continue
            va = torch.nn.functional.normalize(torch.stack([alone[i][j] for i, j in by_doc[a]]), dim=-1)
            vb = torch.nn.functional.normalize(torch.stack([alone[i][j] for i, j in by_doc[b]]), dim=-1)
            sim = va @ vb.T
            best_b, best_a = sim.argmax(1), sim.argmax(0)
            for x, y in enumerate(best_b.tolist()):
                if best_a[y] != x or sim[x, y] < min_cos:
                    continue
                (i, j), (i2, j2) = by_doc[a][x], by_doc[b][y]
                wa, wb = content_words(texts[i][j]), content_words(texts[i2][j2])
                if not wa or not wb or len(wa & wb) < min_jaccard * len(wa | wb):
                    continue
                aligned.setdefault((i, j), []).append((i2, j2))
                aligned.setdefault((i2, j2), []).append((i, j))
    return aligned


def supcon(z: torch.Tensor, labels: torch.Tensor, tau: float) -> torch.Tensor:
    """Supervised contrastive loss (Khosla et al.): each item's positives are
    the other items with its label; everything else in the batch, the other
    propositions of its own sentence included, is a negative."""
    logits = z @ z.T / tau
    self_mask = torch.eye(len(z), dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_mask, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    positive = (labels[:, None] == labels[None, :]) & ~self_mask
    has = positive.any(1)
    per_item = -(log_prob.masked_fill(~positive, 0.0).sum(1)[has] / positive.sum(1)[has])
    return per_item.mean()


def heldout_p1(head: PropositionHead, ex: Examples) -> float:
    """P@1: a proposition in context retrieves an aligned proposition, among
    all held-out propositions in context."""
    index = [(i, j) for i, c in enumerate(ex.context) for j in range(len(c))]
    if not ex.aligned:
        return float("nan")
    with torch.no_grad():
        z = head(torch.cat([c for c in ex.context if len(c)]))
    pos = {key: n for n, key in enumerate(index)}
    hits = total = 0
    for key, partners in ex.aligned.items():
        q = pos[key]
        sims = z @ z[q]
        sims[q] = float("-inf")
        # other propositions of the same sentence stay in: they are the hard negatives
        hits += index[int(sims.argmax())] in partners
        total += 1
    return hits / total


def train_proposition(
    propsegment: Path, sick: Path | None, stsb: Path | None, out: Path, *, backbone: str | None = None,
    out_dim: int = 64, hidden: int = 768, tau: float = 0.05, epochs: int = 30, batch_sentences: int = 64,
    lr: float = 1e-3, val_clusters: int = 3, seed: int = 0, device: str = "auto",
) -> dict[str, Any]:
    started = time.time()
    random.seed(seed)
    torch.manual_seed(seed)
    bb = Backbone.load(backbone, device=device) if backbone else Backbone.load(device=device)
    sentences = propsegment_sentences(propsegment, "test")
    train, val = split_clusters(sentences, val_clusters, seed)
    pairs = (sick_pairs(sick) if sick else []) + (stsb_pairs(stsb) if stsb else [])
    log.info("proposition head: %d train / %d held-out sentences, %d sentence pairs", len(train), len(val), len(pairs))
    tr = build_examples(bb, train, pairs, mine=True)
    va = build_examples(bb, val, [], mine=True)
    n_aligned = sum(map(len, tr.aligned.values())) // 2
    log.info("mined %d aligned proposition pairs (train), %d (held out)", n_aligned, sum(map(len, va.aligned.values())) // 2)

    head = PropositionHead(bb.dim, hidden, out_dim).to(bb.device)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.01)
    order = [i for i, c in enumerate(tr.context) if len(c)]
    pair_order = list(range(len(tr.pairs)))
    steps_per_epoch = (len(order) + batch_sentences - 1) // batch_sentences
    pairs_per_step = (len(pair_order) + steps_per_epoch - 1) // max(steps_per_epoch, 1)
    best = (-1.0, 0, None)
    for epoch in tqdm(range(epochs), desc="train proposition head"):
        head.train()
        random.shuffle(order)
        random.shuffle(pair_order)
        for step in range(steps_per_epoch):
            batch = order[step * batch_sentences : (step + 1) * batch_sentences]
            vecs, labels = [], []
            label_of: dict[tuple, int] = {}
            for i in batch:
                for j in range(len(tr.context[i])):
                    lab = label_of.setdefault((i, j), len(label_of))
                    for p in tr.aligned.get((i, j), ()):
                        label_of.setdefault(p, lab)
            for i in batch:
                for j in range(len(tr.context[i])):
                    lab = label_of[(i, j)]
                    vecs += [tr.context[i][j], tr.alone[i][j]]
                    labels += [lab, lab]
            # aligned partners from sentences outside the batch come along as positives
            for key, lab in list(label_of.items()):
                if key[0] not in batch:
                    vecs.append(tr.context[key[0]][key[1]])
                    labels.append(lab)
            for p in pair_order[step * pairs_per_step : (step + 1) * pairs_per_step]:
                lab = len(label_of) + p + 1
                vecs += [tr.pairs[p, 0], tr.pairs[p, 1]]
                labels += [lab, lab]
            z = head(torch.stack(vecs).to(bb.device))
            loss = supcon(z, torch.tensor(labels, device=bb.device), tau)
            opt.zero_grad()
            loss.backward()
            opt.step()
        head.eval()
        p1 = heldout_p1(head, va)
        if p1 > best[0]:
            best = (p1, epoch + 1, {k: v.detach().clone() for k, v in head.state_dict().items()})
        log.info("epoch %d loss %.4f held-out P@1 %.4f", epoch + 1, loss.item(), p1)
    head.load_state_dict(best[2])

    data: dict[str, Any] = {
        "propsegment_test": {f: data_record(Path(propsegment) / f) for f in ("document_clusters.test.json", "propositions.test.json")},
        "train_sentences": len(train),
        "train_propositions": sum(len(c) for c in tr.context),
        "aligned_pairs": n_aligned,
        "heldout_clusters": sorted({s.cluster for s in val}),
        "sentence_pairs": len(pairs),
    }
    if sick:
        data["sick"] = data_record(sick)
    if stsb:
        data["stsb"] = data_record(stsb)
    config = {
        "backbone": bb.name, "dim": bb.dim, "hidden": hidden, "out_dim": out_dim, "pooling": "mask mean, frozen backbone",
        "command": command_line(), "data": data,
        "training": {"loss": "SupCon", "tau": tau, "epochs": epochs, "best_epoch": best[1], "lr": lr,
                     "batch_sentences": batch_sentences, "seed": seed, "backbone": "frozen"},
        "heldout_p1": round(best[0], 4),
        "hardware": hardware(), "train_seconds": round(time.time() - started, 1), "versions": library_versions(),
    }
    save_head(head, out, config)
    print(f"proposition head: held-out P@1 {100 * best[0]:.2f} (epoch {best[1]}), {config['train_seconds']:.0f} s on {config['hardware']} -> {out}")
    return config
