"""`propdex train proposition`: the student head, distilled from the frozen backbone.

Nothing of the backbone trains, so the similarity geometry it was trained
for is what the head learns to reproduce:

- **Teacher**: the backbone's mean vector of a proposition's own text,
  after its title (what `single` would index for it), mixed with its
  sentence's mean in context (`--sentence-weight`), through the head's
  query map: the centred principal components of the teacher vectors,
  256 of them by default (`--train-query` lets the map move, held to the
  full teacher's similarities by a relational term).
- **Student**: the head over the proposition's in-context features (its
  mean states inside the sentence, and the sentence's), a residual on the
  same mix of in-context means through the query map; it sees the sentence
  once, in the pass the segmenter reads too.
- **Loss**: 1 - cos(student, its teacher), since a query scores a
  proposition by its cosine to the teacher's side, plus `--nce-weight`
  times InfoNCE to its own teacher among the batch's (a batch is whole
  sentences, so siblings - same context, other meaning - are negatives);
  both again on the leading `--prefix` dimensions (Matryoshka, for
  `proposition:dims=64`).

Data: sentences of the Wikipedia training split (WikiExtractor files
wiki_00..69), each after its article's title, segmented by the shipped
segmenter; the held-out split (wiki_70..99) picks the epoch by the mean
cosine of student to teacher. Features are computed once and cached
(`--cache`), so an epoch costs seconds on a CPU.

`--context passage` trains the head for `proposition:context=passage`:
whole sections are read as `single` packs them, and each sentence's
propositions are pooled from that pass, so the student learns from the
states it will see at indexing time (a sentence read inside its passage
carries its neighbours; read alone, as the default head was trained, it
does not).
"""
from __future__ import annotations

import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..backbone import Backbone
from ..proposition import PropositionEncoder, PropositionHead, feature_dim, leading, mean_vectors, sentence_pieces
from ..provenance import command_line, hardware, library_versions, save_weights, sha256_file
from ..segment import spans_text
from ..text import split_sentences
from ..units import Document
from .data import wiki_articles, wiki_files

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------
# data


def wiki_sentences(folder: str | Path, split: str, n: int, seed: int = 0, min_words: int = 5) -> tuple[list[Document], list[Path]]:
    """Up to `n` sentences of the split, each a Document with its article's
    title (files in a seeded order, read until there are enough, then a
    seeded sample), and the files read."""
    rng = random.Random(seed)
    files = wiki_files(folder, split)
    rng.shuffle(files)
    pool: list[Document] = []
    read: list[Path] = []
    for path in files:
        read.append(path)
        for article in wiki_articles(path, split):
            for s, (_, text) in enumerate(article.sections):
                for a, b in split_sentences(text):
                    if len(text[a:b].split()) >= min_words:
                        pool.append(Document(f"{article.id}:{s}:{a}", text[a:b], article.title, ((0, b - a),)))
        if len(pool) >= 3 * n:
            break
    return rng.sample(pool, min(n, len(pool))), read


def wiki_sections(folder: str | Path, split: str, n: int, seed: int = 0) -> tuple[list[Document], list[Path]]:
    """Whole sections of the split holding about `n` sentences in all, each a
    Document with its article's title and its sentences (files in a seeded
    order, read until the pool has 3n sentences, then a seeded sample of
    sections): what `context="passage"` reads."""
    rng = random.Random(seed)
    files = wiki_files(folder, split)
    rng.shuffle(files)
    pool: list[Document] = []
    read: list[Path] = []
    total = 0
    for path in files:
        read.append(path)
        for article in wiki_articles(path, split):
            for s, (_, text) in enumerate(article.sections):
                if sentences := tuple(split_sentences(text)):
                    pool.append(Document(f"{article.id}:{s}", text, article.title, sentences))
                    total += len(sentences)
        if total >= 3 * n:
            break
    rng.shuffle(pool)
    docs, count = [], 0
    for doc in pool:
        if count >= n:
            break
        docs.append(doc)
        count += len(doc.sentences)
    return docs, read


@dataclass
class FeatureSet:
    """Per proposition: the student's input, the teacher's 384-d vector and
    the sentence it came from; `meta` says what made them (a cache is used
    only when its meta matches)."""

    features: np.ndarray  # (n, F) float16
    teacher: np.ndarray  # (n, dim) float16, not normalised
    sentence: np.ndarray  # (n,) int64
    meta: dict[str, Any] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, features=self.features, teacher=self.teacher, sentence=self.sentence, meta=json.dumps(self.meta, sort_keys=True))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "FeatureSet":
        with np.load(path) as z:
            return cls(z["features"], z["teacher"], z["sentence"], json.loads(str(z["meta"])))


def featurize(encoder: PropositionEncoder, docs: list[Document], progress: bool = True) -> FeatureSet:
    """One frozen pass per encoder passage (a sentence, or with
    `context="passage"` a packed passage cut into its sentences), giving
    the segmenter's propositions and the student's features, then the
    teacher: each proposition's own text, after the title."""
    feats, texts, titles, sentence = [], [], [], []
    passages = [p for d in docs for p in encoder.passages(d)]
    bs = encoder.batch_size
    order = sorted(range(len(passages)), key=lambda i: len(passages[i].text))
    n_sentences = 0
    for s in tqdm(range(0, len(order), bs), desc="features", unit="batch", disable=not progress):
        batch = [passages[i] for i in order[s : s + bs]]
        pieces = [piece for p, tokens in zip(batch, encoder.forward(batch))
                  for piece in (sentence_pieces(p, tokens) if encoder.context == "passage" else [(p, tokens)])]
        found = encoder.features_batch([(p, tokens, False) for p, tokens in pieces])
        for (p, _), (groups, f) in zip(pieces, found):
            for g, row in zip(groups, f):
                feats.append(row.numpy().astype(np.float16))
                texts.append(spans_text(p.text, g))
                titles.append(encoder.title_of(p.doc))
                sentence.append(n_sentences)
            n_sentences += 1
    teacher = mean_vectors(encoder.backbone, texts, titles, 2 * bs, progress)
    return FeatureSet(np.stack(feats), teacher.numpy().astype(np.float16), np.array(sentence, dtype=np.int64))


def cached_features(encoder: PropositionEncoder, docs: list[Document], cache: Path | None, meta: dict[str, Any]) -> FeatureSet:
    """`featurize`, read from / written to `cache` when given (keyed by `meta`)."""
    if cache is not None and cache.is_file():
        fs = FeatureSet.load(cache)
        if fs.meta == meta:
            log.info("features from %s (%d propositions)", cache, len(fs.sentence))
            return fs
        log.info("cache %s was made for other inputs; recomputing", cache)
    fs = featurize(encoder, docs)
    fs.meta = meta
    if cache is not None:
        fs.save(cache)
    return fs


# --------------------------------------------------------------------------
# losses


def info_nce(student: torch.Tensor, teacher: torch.Tensor, tau: float, both: bool = False) -> torch.Tensor:
    """Each student row must pick its own teacher row among the batch's;
    with `both`, each teacher row (a query's side) must also pick its own
    student, which pushes a sibling's student away from the query it is not."""
    logits = student @ teacher.T / tau
    labels = torch.arange(len(student), device=student.device)
    loss = torch.nn.functional.cross_entropy(logits, labels)
    return 0.5 * (loss + torch.nn.functional.cross_entropy(logits.T, labels)) if both else loss


def distillation(student: torch.Tensor, teacher: torch.Tensor, tau: float, nce_weight: float, both: bool = False) -> torch.Tensor:
    """1 - cos(student, own teacher): a query scores the student by its
    cosine to the teacher's side, so the student must sit where the teacher
    is, not merely be told apart from the batch; plus `nce_weight` times
    InfoNCE, which pushes siblings apart where the teacher does."""
    loss = (1 - (student * teacher).sum(-1)).mean()
    return loss + nce_weight * info_nce(student, teacher, tau, both) if nce_weight else loss


def relational(projected: torch.Tensor, full: torch.Tensor, tau: float) -> torch.Tensor:
    """KL from the full teacher's similarity distribution over the batch to
    the projected teacher's (both L2-normalised, the diagonal left out)."""
    eye = torch.eye(len(full), dtype=torch.bool, device=full.device)
    target = torch.softmax((full @ full.T / tau).masked_fill(eye, -1e4), dim=-1)
    logp = torch.log_softmax((projected @ projected.T / tau).masked_fill(eye, -1e4), dim=-1)
    return torch.nn.functional.kl_div(logp, target, reduction="batchmean")


def target(fs: FeatureSet, dim: int, sentence_weight: float) -> torch.Tensor:
    """The teacher vectors the student learns to produce: the proposition's
    own text alone, plus `sentence_weight` times its sentence's mean (the
    last `dim` features: the sentence's text in context), normalised. The
    sentence term is what a document-level search needs beside the fact:
    which passage says it."""
    own = torch.nn.functional.normalize(torch.from_numpy(fs.teacher.astype(np.float32)), dim=-1)
    if not sentence_weight:
        return own
    sentence = torch.nn.functional.normalize(torch.from_numpy(fs.features[:, -dim:].astype(np.float32)), dim=-1)
    return torch.nn.functional.normalize(own + sentence_weight * sentence, dim=-1)


def pca_map(teacher: np.ndarray, out_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight (out_dim, dim), bias (out_dim,)) projecting normalised teacher
    vectors onto their top principal components, centred."""
    x = torch.nn.functional.normalize(torch.from_numpy(teacher.astype(np.float32)), dim=-1)
    mean = x.mean(0)
    _, _, v = torch.linalg.svd(x - mean, full_matrices=False)
    weight = v[:out_dim].contiguous()
    return weight, -(weight @ mean)


# --------------------------------------------------------------------------
# training


def batches(fs: FeatureSet, size: int, rng: random.Random) -> list[np.ndarray]:
    """Row indices in batches of about `size`, whole sentences each."""
    starts = np.flatnonzero(np.r_[True, fs.sentence[1:] != fs.sentence[:-1]])
    bounds = list(zip(starts, np.r_[starts[1:], len(fs.sentence)]))
    rng.shuffle(bounds)
    out, current, n = [], [], 0
    for a, b in bounds:
        current.append(np.arange(a, b))
        n += b - a
        if n >= size:
            out.append(np.concatenate(current))
            current, n = [], 0
    if current:
        out.append(np.concatenate(current))
    return out


@torch.inference_mode()
def heldout_cosine(head: PropositionHead, fs: FeatureSet, device: torch.device) -> float:
    """Mean cosine of held-out student vectors to their own teachers: what a
    query's score of a proposition inherits from the teacher."""
    s = head(torch.from_numpy(fs.features.astype(np.float32)).to(device))
    t = head.embed(torch.from_numpy(fs.teacher.astype(np.float32)).to(device))
    return float((s * t).sum(-1).mean())


@torch.inference_mode()
def heldout_p1(head: PropositionHead, fs: FeatureSet, device: torch.device, prefix: int) -> float:
    """Held-out P@1 of each teacher (a query's side) among all held-out
    students at the leading `prefix` dims: its own student must beat its
    siblings', which share its context (PropSegment's commonest miss)."""
    s = leading(head(torch.from_numpy(fs.features.astype(np.float32)).to(device)), prefix)
    t = leading(head.embed(torch.from_numpy(fs.teacher.astype(np.float32)).to(device)), prefix)
    return float(((t @ s.T).argmax(1).cpu() == torch.arange(len(s))).float().mean())


def train_proposition(
    wiki: Path, out: Path, *, sentences: int = 40000, heldout: int = 2000, backbone: str | None = None,
    out_dim: int = 256, prefix: int = 64, hidden: int = 1024, layers: tuple[int, ...] = (2, 4, 6), tau: float = 0.05,
    sentence_weight: float = 0.5, nce_weight: float = 0.1, nce_both: bool = False, select: str = "cosine", relational_weight: float = 1.0, train_query: bool = False, epochs: int = 20, batch: int = 512, lr: float = 1e-3,
    cache: Path | None = None, seed: int = 0, device: str = "auto", context: str = "sentence",
) -> dict[str, Any]:
    if select not in ("cosine", "p1"):
        raise ValueError(f"select picks the epoch by 'cosine' or 'p1', got {select!r}")
    started = time.time()
    random.seed(seed)
    torch.manual_seed(seed)
    bb = Backbone.load(backbone, device=device) if backbone else Backbone.load(device=device)
    dim_in = feature_dim(bb.dim, len(layers))
    # The encoder itself computes the features: an untrained head of the final shape.
    head = PropositionHead(dim_in, hidden, out_dim, query_dim=bb.dim, sentence_weight=sentence_weight)
    init = out.with_name(out.name + ".init")
    config = {"backbone": bb.name, "dim": dim_in, "layers": list(layers), "hidden": hidden, "out_dim": out_dim, "query_dim": bb.dim,
              "sentence_weight": sentence_weight, "context": context}
    save_weights({f"head.{k}": v for k, v in head.state_dict().items()}, init, config)
    encoder = PropositionEncoder(bb, batch_size=64, head=str(init), context=context)

    segmenter_sha = sha256_file(encoder.segmenter_path / "model.safetensors")
    meta = lambda split, n: {"backbone": bb.name, "layers": list(layers), "segmenter": segmenter_sha, "split": split, "sentences": n, "seed": seed,  # noqa: E731
                             **({"context": context} if context != "sentence" else {})}
    read = wiki_sections if context == "passage" else wiki_sentences
    train_docs, train_files = read(wiki, "train", sentences, seed)
    val_docs, val_files = read(wiki, "heldout", heldout, seed)
    tr = cached_features(encoder, train_docs, cache / f"train{'-' + context if context != 'sentence' else ''}.npz" if cache else None, meta("train", len(train_docs)))
    va = cached_features(encoder, val_docs, cache / f"heldout{'-' + context if context != 'sentence' else ''}.npz" if cache else None, meta("heldout", len(val_docs)))
    log.info("proposition head: %d train / %d held-out propositions", len(tr.sentence), len(va.sentence))

    weight, bias = pca_map(target(tr, bb.dim, sentence_weight).numpy(), out_dim)
    head = PropositionHead(dim_in, hidden, out_dim, query_dim=bb.dim, sentence_weight=sentence_weight)
    with torch.no_grad():
        head.query.weight.copy_(weight)
        head.query.bias.copy_(bias)
        head.mlp[-1].weight.zero_()  # start as the in-context mix seen through the teacher's map
        head.mlp[-1].bias.zero_()
    head.to(bb.device)
    if not train_query:
        head.query.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    # On a GPU the whole set fits beside the head (500k propositions: 5.4 GB), so a batch is a gather there.
    features = torch.from_numpy(tr.features.astype(np.float32)).to(bb.device)
    teacher = target(tr, bb.dim, sentence_weight).to(bb.device)
    va.teacher = target(va, bb.dim, sentence_weight).numpy()
    rng = random.Random(seed)
    name, metric = (("heldout_p1", lambda: heldout_p1(head.eval(), va, bb.device, prefix)) if select == "p1"
                    else ("heldout_cosine", lambda: heldout_cosine(head.eval(), va, bb.device)))
    best = (metric(), 0, {k: v.detach().cpu().clone() for k, v in head.state_dict().items()})
    log.info("epoch 0 (untrained: mask pooling through the PCA map) %s %.4f", name, best[0])
    history = [{"epoch": 0, name: round(best[0], 4)}]
    for epoch in tqdm(range(1, epochs + 1), desc="train proposition"):
        head.train()
        total = 0.0
        parts = batches(tr, batch, rng)
        for idx in parts:
            idx = torch.from_numpy(idx).to(bb.device)
            x, full = features[idx], teacher[idx]
            t = head.embed(full)
            z = head(x)
            loss = distillation(z, t, tau, nce_weight, nce_both)
            if prefix and prefix < out_dim:
                # Matryoshka: the leading `prefix` dimensions retrieve on their own (`dims=64`).
                loss = loss + distillation(leading(z, prefix), leading(t, prefix), tau, nce_weight, nce_both)
            if train_query and relational_weight:
                loss = loss + relational_weight * relational(t, full, tau)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        p1 = metric()
        history.append({"epoch": epoch, "loss": round(total / len(parts), 4), name: round(p1, 4)})
        log.info("epoch %d loss %.4f %s %.4f", epoch, total / len(parts), name, p1)
        if p1 > best[0]:
            best = (p1, epoch, {k: v.detach().cpu().clone() for k, v in head.state_dict().items()})

    import shutil

    shutil.rmtree(init, ignore_errors=True)
    config |= {
        "pooling": "student: MLP over [last-layer mean under the proposition, every layer's mean under it, every layer's mean over the sentence], "
                   "a residual on the query map of the first; query: the backbone's mean vector through the query map",
        "segmenter": {"sha256": segmenter_sha},
        "command": command_line(),
        "data": {
            "wikipedia": {"path": str(wiki), "read": "whole sections, packed as `single` reads them" if context == "passage" else "one sentence at a time",
                          "train_sentences": int(len(np.unique(tr.sentence))), "heldout_sentences": int(len(np.unique(va.sentence))),
                          "train_files": {p.name: sha256_file(p) for p in train_files},
                          "heldout_files": {p.name: sha256_file(p) for p in val_files}},
            "train_propositions": int(len(tr.sentence)), "heldout_propositions": int(len(va.sentence)),
        },
        "training": {"loss": "1 - cos(student, projected teacher) + nce_weight * InfoNCE (whole sentences per batch), at all and at the leading `prefix` dims"
                             " + relational_weight * KL(teacher sims || projected sims)",
                     "teacher": "normalise(own text after the title + sentence_weight * the sentence's mean in context)",
                     "tau": tau, "nce_weight": nce_weight, "nce_both": nce_both, "select": select, "prefix": prefix, "sentence_weight": sentence_weight, "relational_weight": relational_weight, "train_query": train_query, "epochs": epochs,
                     "best_epoch": best[1], "batch": batch, "lr": lr, "seed": seed, "history": history},
        name: round(best[0], 4),
        "hardware": hardware(), "train_seconds": round(time.time() - started, 1), "versions": library_versions(),
    }
    save_weights({f"head.{k}": v for k, v in best[2].items()}, out, config)
    print(f"proposition head: {name} {best[0]:.4f} (epoch {best[1]}), {config['train_seconds']:.0f} s on {config['hardware']} -> {out}")
    return config
