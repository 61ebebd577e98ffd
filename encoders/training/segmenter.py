"""`propdex train segmenter`: the word-pair proposition segmenter.

Data: PropSegment *test* split segmentations (Wikipedia clusters, reference
responses); a few whole clusters are held out to pick the epoch and the
decision threshold. The dev split is never read: it is what the segmenter is
evaluated on (`propdex eval segmentation`).

The backbone is frozen, so its word states are computed once and only the
small pair head trains: minutes on a CPU.
"""
from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..backbone import Backbone
from ..provenance import command_line, data_record, hardware, library_versions
from ..segment import PairSegmenter, _pair_head, anchor_targets, clause_ids, segmentation_prf, word_states
from .data import SegmentedSentence, propsegment_sentences

log = logging.getLogger(__name__)


def split_clusters(sentences: list[SegmentedSentence], n_val: int, seed: int) -> tuple[list, list]:
    clusters = sorted({s.cluster for s in sentences})
    held = set(random.Random(seed).sample(clusters, n_val))
    return [s for s in sentences if s.cluster not in held], [s for s in sentences if s.cluster in held]


def train_segmenter(
    data: Path, out: Path, *, backbone: str | None = None, epochs: int = 60, lr: float = 1e-3,
    batch_size: int = 16, val_clusters: int = 3, seed: int = 0, device: str = "auto",
) -> dict[str, Any]:
    started = time.time()
    torch.manual_seed(seed)
    bb = Backbone.load(backbone, device=device) if backbone else Backbone.load(device=device)
    sentences = propsegment_sentences(data, "test")
    train, val = split_clusters(sentences, val_clusters, seed)
    log.info("segmenter: %d train / %d held-out sentences (test split)", len(train), len(val))

    config = PairSegmenter.default_config(bb.model.config.num_hidden_layers)

    def states_of(items: list[SegmentedSentence]) -> list[torch.Tensor]:
        out_states = []
        with torch.inference_mode():
            for i in tqdm(range(0, len(items), 32), desc="word states", leave=False):
                st, _ = word_states(bb, [s.text for s in items[i : i + 32]], PairSegmenter.MAX_WORDS, config["backbone_layers"])
                out_states.extend(x.cpu().clone() for x in st)
        return out_states

    train_x, val_x = states_of(train), states_of(val)
    # Long sentences are windows of MAX_WORDS at inference; train on the same.
    head = _pair_head(bb.dim * len(config["backbone_layers"]), config["hidden"], config["layers"], config["heads"], dropout=0.1).to(bb.device)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.01)
    # Every rater's segmentation is a training example (3 per sentence); the
    # reference one alone is the gold for held-out scoring.
    examples = [(i, props) for i, s in enumerate(train) for props in (s.propositions, *s.other_responses) if props]
    targets = [tuple(map(torch.from_numpy, anchor_targets(len(train[i].words), props))) for i, props in examples]
    train_clauses = [torch.from_numpy(clause_ids(s.text, s.words)) for s in train]
    total_steps = epochs * ((len(examples) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total_steps, pct_start=0.1)

    seg = PairSegmenter(bb, config, head)
    best: tuple[float, int, float, dict] = (-1.0, -1, 0.5, {})
    best_state = None
    rng = random.Random(seed)
    order = list(range(len(examples)))
    for epoch in tqdm(range(epochs), desc="train segmenter"):
        head.train()
        rng.shuffle(order)
        for b in range(0, len(order), batch_size):
            idx = [e for e in order[b : b + batch_size] if len(train[examples[e][0]].words)]
            n = min(max(len(train[examples[e][0]].words) for e in idx), PairSegmenter.MAX_WORDS)
            x = torch.zeros(len(idx), n, train_x[0].shape[-1])
            y_anchor = torch.zeros(len(idx), n)
            y_member = torch.zeros(len(idx), n, n)
            mask = torch.zeros(len(idx), n, dtype=torch.bool)
            clauses = torch.full((len(idx), n), -1, dtype=torch.long)
            for r, e in enumerate(idx):
                i = examples[e][0]
                m = min(len(train[i].words), n)
                x[r, :m], mask[r, :m], clauses[r, :m] = train_x[i][:m], True, train_clauses[i][:m]
                y_anchor[r, :m], y_member[r, :m, :m] = targets[e][0][:m], targets[e][1][:m, :m]
            x, y_anchor, y_member, mask, clauses = (t.to(bb.device) for t in (x, y_anchor, y_member, mask, clauses))
            anchor_logits, member_logits = head(x, mask, clauses)
            # Membership is learnt on the rows of gold anchors only.
            rows = (y_anchor > 0)[:, :, None] & mask[:, None, :]
            bce = torch.nn.functional.binary_cross_entropy_with_logits
            loss = bce(anchor_logits[mask], y_anchor[mask]) + bce(member_logits[rows], y_member[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        if (epoch + 1) % 5 == 0 or epoch + 1 == epochs:
            head.eval()
            for threshold in (0.3, 0.4, 0.5, 0.6, 0.7):
                seg.threshold = threshold
                with torch.inference_mode():
                    preds = [seg.decode(x.to(bb.device), s.text, s.words) for x, s in zip(val_x, val)]
                score = segmentation_prf(preds, [s.propositions for s in val], 0.8)
                if score["f1"] > best[0]:
                    best = (score["f1"], epoch + 1, threshold, score)
                    best_state = {k: v.detach().clone() for k, v in head.state_dict().items()}
            log.info("epoch %d loss %.4f; best held-out F1@0.8 %.4f (epoch %d, threshold %.1f)", epoch + 1, loss.item(), *best[:3])

    head.load_state_dict(best_state)
    seg = PairSegmenter(bb, {**config, "threshold": best[2]}, head)
    record = {
        "backbone": bb.name,
        "command": command_line(),
        "data": {
            "propsegment_test": {f: data_record(Path(data) / f) for f in ("document_clusters.test.json", "propositions.test.json")},
            "train_sentences": len(train),
            "heldout_clusters": sorted({s.cluster for s in val}),
            "heldout_sentences": len(val),
        },
        "training": {"epochs": epochs, "best_epoch": best[1], "lr": lr, "batch_size": batch_size, "seed": seed, "backbone": "frozen"},
        "heldout_f1_at_0.8": round(best[0], 4),
        "hardware": hardware(),
        "train_seconds": round(time.time() - started, 1),
        "versions": library_versions(),
    }
    seg.save(out, record)
    print(f"segmenter: held-out F1@0.8 {100 * best[0]:.2f} (epoch {best[1]}, threshold {best[2]}), "
          f"{record['train_seconds']:.0f} s on {record['hardware']} -> {out}")
    return record
