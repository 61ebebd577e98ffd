"""The default MiniLM path encodes byte for byte as before: vectors, units and encoder config of tokens,
single and nugget over 60 HotpotQA paragraphs, hashed. Run it under two installs (two commits) and compare."""
import hashlib, itertools, sys, numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "tests"))
from paths import DATA
from propdex.encoders import load_encoder
from propdex.indexer.readers import read_corpus
docs = list(itertools.islice(read_corpus([DATA / "hotpotqa/hotpot_dev_distractor_600.json"]), 60))
for name in ["tokens", "single", "nugget"]:
    enc = load_encoder(name, device="cpu")
    h = hashlib.sha256()
    for d in docs:
        for e in enc.encode(enc.passages(d)):
            h.update(e.vectors.tobytes()); h.update(repr(e.units).encode())
    h.update(repr(enc.config()).encode())
    print(name, h.hexdigest()[:16])
