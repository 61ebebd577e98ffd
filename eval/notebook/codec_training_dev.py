"""SciFact `nugget` under a codec-training variant, for the dev comparison in eval/notebook/codec_training.md.

    python eval/notebook/codec_training_dev.py VARIANT OUT
        Q: the size rule's quick training as shipped (a sample of 40 vectors an IVF list, 8 OPQ refinements);
        B: quick refinements on full training's sample (at least 65,536 vectors).
    then: propdex search OUT --topics TRAIN_TOPICS --run OUT.run -k 100
          propdex eval run OUT.run --qrels ../shared/data/beir/scifact/qrels/train.tsv
"""
import sys

import propdex.indexer.ann as ann
from propdex.cli import main

variant, out = sys.argv[1], sys.argv[2]
shipped = ann.training_size
if variant == "B":
    ann.training_size = lambda factory, n, effort="full": shipped(factory, n, "full")
elif variant != "Q":
    raise SystemExit(f"unknown variant {variant!r}: Q or B")
sys.exit(main(["-q", "index", "../shared/data/beir/scifact/corpus.jsonl", "--encoder", "nugget", "--out", out,
               "--shard-docs", "10000", "--training", "quick"]))
