"""colbert-ai's own vectors, made by colbert-ai in its own environment
(tests/test_interop.py runs this with that environment's interpreter; it
imports nothing of propdex).

    python colbert_ai_reference.py make BACKBONE CHECKPOINT
        a colbert-ai checkpoint from BACKBONE (a 128-d projection, seeded),
        saved as colbert-ai saves one
    python colbert_ai_reference.py encode CHECKPOINT TEXTS.json OUT.npz
        TEXTS.json: {"queries": [...], "documents": [...]}; OUT.npz: the
        queries' vectors (n, query_maxlen, dim), and the documents' as
        colbert-ai's indexer makes them (flattened, with doclens)
"""
import json
import sys

import numpy as np
import torch
from colbert.infra import ColBERTConfig
from colbert.modeling.checkpoint import Checkpoint
from colbert.modeling.colbert import ColBERT

# The segmented-MaxSim C++ extension scores, it does not encode: not compiled here.
ColBERT.loaded_extensions = True


def make(backbone: str, out: str) -> None:
    torch.manual_seed(0)
    config = ColBERTConfig(checkpoint=backbone, dim=128, query_maxlen=32, doc_maxlen=300, attend_to_mask_tokens=False)
    Checkpoint(backbone, colbert_config=config, verbose=0).save(out)


def encode(checkpoint: str, texts: str, out: str) -> None:
    model = Checkpoint(checkpoint, colbert_config=ColBERTConfig(checkpoint=checkpoint), verbose=0)
    given = json.loads(open(texts, encoding="utf-8").read())
    arrays = {}
    if given.get("queries"):
        arrays["queries"] = model.queryFromText(given["queries"], bsize=64, to_cpu=True).float().numpy()
    if given.get("documents"):
        flat, doclens = model.docFromText(given["documents"], bsize=64, keep_dims="flatten")
        arrays["documents"], arrays["doclens"] = flat.float().numpy(), np.asarray(doclens)
    np.savez(out, **arrays)


if __name__ == "__main__":
    {"make": make, "encode": encode}[sys.argv[1]](*sys.argv[2:])
