"""`propdex train idf`: the word-piece IDF table static pruning reads
(`tokens:keep=idf`), counted over Wikipedia's training split.

A section is one document. idf = ln(1 + (N - df + 0.5) / (df + 0.5)), the
Lucene form BM25 uses: positive for every entry, highest for the rarest;
a word-piece never seen gets the highest value (df = 0).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..provenance import command_line, hardware, library_versions, save_weights
from .data import wiki_articles, wiki_files


def document_frequencies(tokenizer: Any, sections: list[str], vocab: int) -> np.ndarray:
    df = np.zeros(vocab, dtype=np.int64)
    for ids in tokenizer(sections, add_special_tokens=False, verbose=False)["input_ids"]:
        df[np.unique(np.asarray(ids, dtype=np.int64))] += 1
    return df


def train_idf(wiki: Path, out: Path, backbone_name: str | None = None) -> dict[str, Any]:
    import torch

    from .. import DEFAULT_BACKBONE
    from ..backbone import Backbone

    started = time.time()
    backbone = Backbone.load(backbone_name or DEFAULT_BACKBONE, device="cpu")
    vocab = len(backbone.tokenizer)
    df = np.zeros(vocab, dtype=np.int64)
    n = 0
    files = wiki_files(wiki, "train")
    for path in tqdm(files, desc="idf", unit="file"):
        sections = [text for article in wiki_articles(path, "train") for _, text in article.sections]
        df += document_frequencies(backbone.tokenizer, sections, vocab)
        n += len(sections)
    idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
    config = {
        "backbone": backbone.name, "vocab": vocab, "documents": n, "unit": "Wikipedia section",
        "formula": "ln(1 + (N - df + 0.5) / (df + 0.5))",
        "data": {"wiki": str(wiki), "files": [f.name for f in files]},
        "command": command_line(), "hardware": hardware(), "versions": library_versions(),
        "seconds": round(time.time() - started, 1),
    }
    save_weights({"idf": torch.from_numpy(idf)}, out, config)
    return config
