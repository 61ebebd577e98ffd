"""`propdex train proposition`: the sub-sentence encoder's head and adapters.

The MLP (Linear, ReLU, Linear -> 64) trains with LoRA adapters on the
backbone's upper layers (`--lora R`, default 8; `--lora 0` freezes the
backbone, and then every input is pooled once up front), under supervised
contrastive loss (SupCon) in which the other propositions of the same
sentence are in the batch as negatives, plus the same loss against the
item's own sentence alone. Every rater's propositions are used with a frozen
backbone; the reference response's only with adapters (CPU time).

Training data (recorded in the weights' config):
  - PropSegment *test* split, Wikipedia clusters (never dev, whose relations
    are the evaluation). For every proposition of every rater's segmentation:
      * its own text, encoded alone, is a positive of the proposition pooled
        inside its sentence (self-supervision: the mask must come to mean what
        the proposition says, not what the whole sentence says);
      * propositions of other documents of the same cluster (versions of one
        article) that say the same thing are positives, mined with care:
        mutual nearest neighbours by the frozen backbone's similarity of
        their texts, cosine >= 0.8 and content-word Jaccard >= 0.4.
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

import torch
from tqdm.auto import tqdm

from ..backbone import Backbone
from ..base import hidden_states, span_pool
from ..adapters import adapt, lora_config, lora_state, upper_layers
from ..proposition import PropositionHead
from ..provenance import command_line, data_record, hardware, library_versions, save_weights
from ..segment import spans_text, word_spans
from .data import SegmentedSentence, propsegment_sentences, sick_pairs, stsb_pairs
from .segmenter import split_clusters

log = logging.getLogger(__name__)

# Alignment mining thresholds (cosine of the texts' frozen embeddings,
# content-word Jaccard): high enough that a mined pair says the same thing.
MINE_COS, MINE_JACCARD = 0.8, 0.4
_STOP = frozenset("a an the of in on at to for by with and or is was are were be been has have had as from that this its it his her their which who".split())


def pooled(
    bb: Backbone, texts: list[str], groups: list[list[list[tuple[int, int]]]], layers: tuple[int, ...],
    model: torch.nn.Module | None = None, batch: int = 64, progress: bool = False,
) -> list[torch.Tensor]:
    """Per text, the mean token state under each of its span groups, from
    `model` (default: the frozen backbone). Gradients flow unless the caller
    runs it under `torch.inference_mode()`."""
    out: list[torch.Tensor | None] = [None] * len(texts)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    for s in tqdm(range(0, len(order), batch), desc="pool", leave=False, disable=not progress):
        idx = order[s : s + batch]
        enc = bb.tokenizer([texts[i] for i in idx], padding=True, truncation=True, max_length=bb.max_length,
                           return_offsets_mapping=True, return_special_tokens_mask=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping").numpy()
        special = enc.pop("special_tokens_mask").numpy().astype(bool)
        real = ~special & (enc["attention_mask"].numpy() > 0)
        hidden = hidden_states(bb, enc, layers, model).float()
        for r, i in enumerate(idx):
            out[i] = span_pool(hidden[r], offsets[r], real[r], groups[i])
    return out  # type: ignore[return-value]


def whole(text: str) -> list[list[tuple[int, int]]]:
    return [[(0, len(text))]]


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[^\W_]+", text.lower()) if w not in _STOP}


@dataclass
class Examples:
    """What the head learns from: texts, the span groups to pool in them, and
    who is a positive of whom. Item keys: ("ctx", i, j) proposition j of
    sentence i pooled inside its sentence, ("alone", i, j) its text encoded
    alone, ("pair", p, side) a side of sentence pair p."""

    sentences: list[str]
    spans: list[list[tuple[tuple[int, int], ...]]]  # per sentence, per proposition
    texts: list[list[str]]  # per sentence, per proposition: its own text
    aligned: dict[tuple[int, int], list[tuple[int, int]]]  # (i, j) -> positives (i2, j2)
    pairs: list[tuple[str, str]]


def build_examples(bb: Backbone, sentences: list[SegmentedSentence], pairs: list[tuple[str, str]], all_responses: bool = True) -> Examples:
    """Every rater's propositions (all_responses) or the reference response's only."""
    props = [list(dict.fromkeys(list(s.propositions) + ([p for r in s.other_responses for p in r] if all_responses else []))) for s in sentences]
    spans = [[word_spans(s.text, s.words, p) for p in ps] for s, ps in zip(sentences, props)]
    texts = [[spans_text(s.text, g) for g in sp] for s, sp in zip(sentences, spans)]
    # Mining compares the propositions' texts by the frozen last layer (a sentence embedding).
    flat = [t for ts in texts for t in ts]
    with torch.inference_mode():
        alone_flat = [v.cpu() for v in pooled(bb, flat, [whole(t) for t in flat], (-1,), progress=True)]
    alone, k = [], 0
    for ts in texts:
        alone.append(torch.cat(alone_flat[k : k + len(ts)]) if ts else torch.zeros(0, bb.dim))
        k += len(ts)
    aligned = mine_alignments(sentences, props, texts, alone)
    return Examples([s.text for s in sentences], spans, texts, aligned, pairs)


class Features:
    """Pooled inputs of the head for item keys. Frozen backbone: computed once
    and cached. Adapted backbone (LoRA): computed per batch, with gradients."""

    def __init__(self, bb: Backbone, model: torch.nn.Module, ex: Examples, layers: tuple[int, ...], cache: bool) -> None:
        self.bb, self.model, self.ex, self.layers = bb, model, ex, layers
        self.cache: dict[tuple, torch.Tensor] | None = None
        if cache:
            with torch.inference_mode():
                self.cache = {}
                keys = [("ctx", i, j) for i, sp in enumerate(ex.spans) for j in range(len(sp))]
                keys += [("alone", i, j) for i, sp in enumerate(ex.spans) for j in range(len(sp))]
                keys += [("pair", p, side) for p in range(len(ex.pairs)) for side in (0, 1)]
                for b in tqdm(range(0, len(keys), 512), desc="pool", leave=False):
                    chunk = keys[b : b + 512]
                    self.cache.update(zip(chunk, self._compute(chunk).clone()))

    def __call__(self, keys: list[tuple]) -> torch.Tensor:
        if self.cache is not None:
            return torch.stack([self.cache[k] for k in keys]).to(self.bb.device)
        return self._compute(keys)

    def _compute(self, keys: list[tuple]) -> torch.Tensor:
        ex = self.ex
        jobs: dict[str, list[tuple[int, int]]] = {}  # text -> (row, group index)
        groups: dict[str, list[list[tuple[int, int]]]] = {}
        for row, key in enumerate(keys):
            kind, a, b = key
            if kind == "ctx":
                text, group = ex.sentences[a], list(ex.spans[a][b])
            elif kind == "alone":
                text = ex.texts[a][b]
                group = [(0, len(text))]
            else:
                text = ex.pairs[a][b]
                group = [(0, len(text))]
            groups.setdefault(text, []).append(group)
            jobs.setdefault(text, []).append((row, len(groups[text]) - 1))
        texts = list(groups)
        vecs = pooled(self.bb, texts, [groups[t] for t in texts], self.layers, self.model)
        out: list[torch.Tensor | None] = [None] * len(keys)
        for text, v in zip(texts, vecs):
            for row, g in jobs[text]:
                out[row] = v[g]
        return torch.stack(out)  # type: ignore[arg-type]


def mine_alignments(sentences, props, texts, alone, min_cos: float = MINE_COS, min_jaccard: float = MINE_JACCARD) -> dict:
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


def supcon(z: torch.Tensor, labels: torch.Tensor, tau: float, groups: torch.Tensor | None = None) -> torch.Tensor:
    """Supervised contrastive loss (Khosla et al.): each item's positives are
    the other items with its label; everything else in the batch, the other
    propositions of its own sentence included, is a negative. With `groups`,
    only items of the item's own group are negatives (the hard ones)."""
    logits = z @ z.T / tau
    self_mask = torch.eye(len(z), dtype=torch.bool, device=z.device)
    positive = (labels[:, None] == labels[None, :]) & ~self_mask
    excluded = self_mask
    if groups is not None:
        excluded = excluded | ((groups[:, None] != groups[None, :]) & ~positive)
    logits = logits.masked_fill(excluded, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    has = positive.any(1)
    per_item = -(log_prob.masked_fill(~positive, 0.0).sum(1)[has] / positive.sum(1)[has])
    return per_item.mean()


def heldout_p1(head: PropositionHead, feats: Features) -> float:
    """P@1: a proposition in context retrieves an aligned proposition, among
    all held-out propositions in context (its own sentence's included: they
    are the hard negatives)."""
    ex = feats.ex
    index = [(i, j) for i, sp in enumerate(ex.spans) for j in range(len(sp))]
    if not ex.aligned:
        return float("nan")
    with torch.no_grad():
        z = head(feats([("ctx", i, j) for i, j in index]))
    pos = {key: n for n, key in enumerate(index)}
    hits = 0
    for key, partners in ex.aligned.items():
        sims = z @ z[pos[key]]
        sims[pos[key]] = float("-inf")
        hits += index[int(sims.argmax())] in partners
    return hits / len(ex.aligned)


def batch_items(ex: Examples, sentences: list[int], pair_ids: list[int]) -> tuple[list[tuple], list[int], list[int]]:
    """Item keys, SupCon labels and sentence groups of one batch: every
    proposition of the batch's sentences in context and alone (one label),
    its aligned propositions in context (the same label), and sentence pairs
    (a group of their own)."""
    label_of: dict[tuple[int, int], int] = {}
    for i in sentences:
        for j in range(len(ex.spans[i])):
            lab = label_of.setdefault((i, j), len(label_of))
            for partner in ex.aligned.get((i, j), ()):
                label_of.setdefault(partner, lab)
    keys, labels, groups = [], [], []
    for (i, j), lab in label_of.items():
        keys.append(("ctx", i, j))
        labels.append(lab)
        groups.append(i)
        if i in sentences:
            keys.append(("alone", i, j))
            labels.append(lab)
            groups.append(i)
    for p in pair_ids:
        keys += [("pair", p, 0), ("pair", p, 1)]
        labels += [len(label_of) + p] * 2
        groups += [-1 - p] * 2
    return keys, labels, groups


def train_proposition(
    propsegment: Path, sick: Path | None, stsb: Path | None, out: Path, *, backbone: str | None = None,
    out_dim: int = 64, hidden: int = 768, tau: float = 0.05, layers: tuple[int, ...] = (0, 3, 6), lora: int = 0,
    epochs: int = 30, batch_sentences: int = 32, lr: float = 1e-3, lora_lr: float = 3e-4, pairs_per_epoch: int = 2000, sibling_weight: float = 1.0,
    val_clusters: int = 3, seed: int = 0, device: str = "auto",
) -> dict[str, Any]:
    started = time.time()
    random.seed(seed)
    torch.manual_seed(seed)
    bb = Backbone.load(backbone, device=device) if backbone else Backbone.load(device=device)
    n_layers = bb.model.config.num_hidden_layers
    if layers[-1] not in (-1, n_layers):
        raise ValueError(f"layers must end with the last layer ({n_layers}): the segmenter reads it")
    sentences = propsegment_sentences(propsegment, "test")
    train, val = split_clusters(sentences, val_clusters, seed)
    pairs = (sick_pairs(sick) if sick else []) + (stsb_pairs(stsb) if stsb else [])
    log.info("proposition head: %d train / %d held-out sentences, %d sentence pairs", len(train), len(val), len(pairs))
    # With adapters every step runs the backbone: the reference propositions
    # only, fewer sentence pairs, to keep a CPU epoch in minutes.
    tr, va = build_examples(bb, train, pairs, all_responses=not lora), build_examples(bb, val, [], all_responses=not lora)
    if lora:
        pairs_per_epoch = min(pairs_per_epoch, 500)
    n_aligned = sum(map(len, tr.aligned.values())) // 2
    log.info("mined %d aligned proposition pairs (train), %d (held out)", n_aligned, sum(map(len, va.aligned.values())) // 2)

    model = bb.model
    if lora:
        model = adapt(bb.model, lora, upper_layers(n_layers))
    head = PropositionHead(bb.dim * len(layers), hidden, out_dim).to(bb.device)
    params = [{"params": head.parameters(), "lr": lr}]
    if lora:
        params.append({"params": [p for p in model.parameters() if p.requires_grad], "lr": lora_lr})
    opt = torch.optim.AdamW(params, weight_decay=0.01)
    train_feats = Features(bb, model, tr, layers, cache=not lora)
    val_feats = Features(bb, model, va, layers, cache=not lora)

    order = [i for i, sp in enumerate(tr.spans) if sp]
    steps = (len(order) + batch_sentences - 1) // batch_sentences
    per_step = min(pairs_per_epoch, len(pairs)) // max(steps, 1)
    best: tuple[float, int, dict | None] = (-1.0, 0, None)
    for epoch in tqdm(range(epochs), desc="train proposition"):
        head.train()
        model.train(bool(lora))
        random.shuffle(order)
        pair_ids = random.sample(range(len(pairs)), min(pairs_per_epoch, len(pairs)))
        for step in tqdm(range(steps), desc=f"epoch {epoch + 1}", leave=False):
            keys, labels, groups = batch_items(tr, order[step * batch_sentences : (step + 1) * batch_sentences],
                                               pair_ids[step * per_step : (step + 1) * per_step])
            z = head(train_feats(keys))
            labels_t = torch.tensor(labels, device=bb.device)
            # The batch-wide loss, plus the same loss against the item's own
            # sentence only: sibling propositions share its context and are
            # what a query in context confuses itself with most.
            loss = supcon(z, labels_t, tau) + sibling_weight * supcon(z, labels_t, tau, torch.tensor(groups, device=bb.device))
            opt.zero_grad()
            loss.backward()
            opt.step()
        head.eval()
        model.eval()
        p1 = heldout_p1(head, val_feats)
        if p1 > best[0]:
            state = {f"head.{k}": v.detach().cpu().clone() for k, v in head.state_dict().items()}
            if lora:
                state.update({f"lora.{k}": v.clone() for k, v in lora_state(model).items()})
            best = (p1, epoch + 1, state)
        log.info("epoch %d loss %.4f held-out P@1 %.4f", epoch + 1, loss.item(), p1)

    data: dict[str, Any] = {
        "propsegment_test": {f: data_record(Path(propsegment) / f) for f in ("document_clusters.test.json", "propositions.test.json")},
        "train_sentences": len(train),
        "train_propositions": sum(map(len, tr.spans)),
        "aligned_pairs": n_aligned,
        "mining": {"mutual_nearest": True, "min_cosine": MINE_COS, "min_content_jaccard": MINE_JACCARD},
        "heldout_clusters": sorted({s.cluster for s in val}),
        "sentence_pairs": len(pairs),
    }
    if sick:
        data["sick"] = data_record(sick)
    if stsb:
        data["stsb"] = data_record(stsb)
    config = {
        "backbone": bb.name, "dim": bb.dim * len(layers), "layers": list(layers), "hidden": hidden, "out_dim": out_dim,
        "lora": lora_config(lora, upper_layers(n_layers)),
        "pooling": "mask mean of the concatenated layers",
        "command": command_line(), "data": data,
        "training": {"loss": "SupCon (batch) + sibling_weight * SupCon (own sentence)", "sibling_weight": sibling_weight, "tau": tau, "epochs": epochs, "best_epoch": best[1], "lr": lr, "lora_lr": lora_lr if lora else None,
                     "batch_sentences": batch_sentences, "pairs_per_epoch": pairs_per_epoch, "seed": seed},
        "heldout_p1": round(best[0], 4),
        "hardware": hardware(), "train_seconds": round(time.time() - started, 1), "versions": library_versions(),
    }
    save_weights(best[2], out, config)
    print(f"proposition head: held-out P@1 {100 * best[0]:.2f} (epoch {best[1]}), {config['train_seconds']:.0f} s on {config['hardware']} -> {out}")
    return config
