"""Proposition segmentation on PropSegment dev: Jaccard-matched P / R / F1.

A predicted proposition matches a gold one (the reference response) when
their word Jaccard is >= theta, one to one; scores are micro-averaged over
the dev split's Wikipedia sentences, at theta = 0.8 and 0.5 as in the paper.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from propdex.encoders import WEIGHTS
from propdex.encoders.segment import ClauseSplitter, PairSegmenter, Segmenter, segmentation_prf
from propdex.encoders.training.data import propsegment_sentences

from .render import header, row

THETAS = (0.8, 0.5)


def load_segmenter(spec: str, device: str = "auto") -> Segmenter:
    """`clause`, `pairs` (the packaged trained segmenter) or `pairs:PATH`."""
    name, _, path = spec.partition(":")
    if name == "clause":
        return ClauseSplitter()
    if name == "pairs":
        return PairSegmenter.load(path or WEIGHTS / "segmenter", device=device)
    raise ValueError(f"unknown segmenter {spec!r}; choose from clause, pairs, pairs:PATH")


def evaluate_segmentation(path: str | Path, systems: list[str], split: str = "dev", device: str = "auto") -> dict[str, Any]:
    sentences = propsegment_sentences(path, split)
    gold = [s.propositions for s in sentences]
    out: dict[str, Any] = {"n_sentences": len(sentences), "n_gold": sum(map(len, gold)), "systems": {}}
    for spec in systems:
        seg = load_segmenter(spec, device)
        started = time.time()
        pred = seg.segment([s.text for s in sentences])
        seconds = time.time() - started
        out["systems"][spec] = {
            "n_pred": sum(map(len, pred)),
            "seconds": round(seconds, 2),
            **{f"theta={t}": segmentation_prf(pred, gold, t) for t in THETAS},
        }
    return out


def markdown(result: dict[str, Any]) -> str:
    head = ["segmenter", "props", *(f"{m}@{t}" for t in THETAS for m in ("P", "R", "F1"))]
    lines = header(head)
    for name, s in result["systems"].items():
        cells = [name, str(s["n_pred"])]
        cells += [f"{100 * s[f'theta={t}'][m]:.2f}" for t in THETAS for m in ("precision", "recall", "f1")]
        lines.append(row(cells))
    return "\n".join(lines)
