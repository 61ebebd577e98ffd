"""Token pooling and IDF pruning (the baselines nuggets are measured against), on real MiniLM."""
import math

import numpy as np
import pytest

from propdex.encoders import Document, load_encoder
from propdex.encoders.tokens import pool_groups

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def doc(hotpot_docs):
    return max(hotpot_docs[:30], key=lambda d: len(d.text))


def test_pooling_keeps_every_token_in_exactly_one_of_ceil_n_over_f_vectors(minilm, doc):
    full = load_encoder("tokens", backbone=minilm)
    pooled = load_encoder("tokens", backbone=minilm, pool=4)
    for p in full.passages(doc):
        a, b = full.encode([p])[0], pooled.encode([p])[0]
        assert len(b.vectors) == math.ceil(len(a.vectors) / 4)
        np.testing.assert_allclose(np.linalg.norm(b.vectors, axis=1), 1, atol=1e-5)
        spans = sorted(s for u in b.units for s in _doc_spans(doc, u))
        assert spans == sorted(s for u in a.units for s in _doc_spans(doc, u))  # each token in one cluster
    q = pooled.encode_queries(["Who directed the film?"])[0]
    assert len(q.vectors) == len(full.encode_queries(["Who directed the film?"])[0].vectors)  # queries are not pooled


def test_pool_groups_clusters_near_duplicates_together():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 16))
    vectors = np.repeat(centres, 4, axis=0) + 0.01 * rng.normal(size=(12, 16))
    groups = pool_groups(vectors, 4)
    assert sorted(groups) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_idf_pruning_keeps_the_rarest_quarter(minilm, doc):
    full = load_encoder("tokens", backbone=minilm)
    pruned = load_encoder("tokens", backbone=minilm, keep="idf", ratio=0.25)
    enc = minilm.tokenizer(doc.text, add_special_tokens=False, return_offsets_mapping=True)
    id_at = {tuple(o): i for o, i in zip(enc["offset_mapping"], enc["input_ids"])}
    for p in full.passages(doc):
        a, b = full.encode([p])[0], pruned.encode([p])[0]
        assert len(b.vectors) == math.ceil(len(a.vectors) * 0.25)
        kept = {tuple(_doc_spans(doc, u)) for u in b.units}
        every = {tuple(_doc_spans(doc, u)) for u in a.units}
        assert kept <= every
        # Every kept token's IDF is at least every dropped one's.
        idf = {s: pruned.idf[id_at[s[0]]] for s in every}
        assert min(idf[s] for s in kept) >= max(v for s, v in idf.items() if s not in kept) - 1e-6
    assert pruned.config()["keep"] == "idf" and len(pruned.config()["idf_sha256"]) == 64


def test_state_cache_gives_the_same_vectors(minilm, doc):
    from propdex.encoders import Backbone

    fresh = load_encoder("tokens", backbone=minilm).encode(load_encoder("tokens", backbone=minilm).passages(doc))
    shared = Backbone(minilm.name, minilm.model, minilm.tokenizer, minilm.device, minilm.max_length, minilm.source, state_cache={})
    enc = load_encoder("tokens", backbone=shared)
    first = enc.encode(enc.passages(doc))
    again = enc.encode(enc.passages(doc))
    assert shared.state_cache_hits == len(enc.passages(doc))
    for x, y, z in zip(fresh, first, again):
        np.testing.assert_array_equal(x.vectors, y.vectors)
        np.testing.assert_array_equal(y.vectors, z.vectors)


def _doc_spans(doc: Document, unit) -> list[tuple[int, int]]:
    base = doc.sentences[unit.sentence][0] if doc.sentences else 0
    return [(a + base, b + base) for a, b in unit.spans]
