import numpy as np
import pytest

from propdex.retriever import scoring


def brute_group_maxsim(sim, groups, n):
    out = np.full(n, -np.inf)
    for g in range(n):
        cols = np.flatnonzero(groups == g)
        if len(cols):
            out[g] = sim[:, cols].max(axis=1).sum()
    return out


def test_maxsim_is_sum_of_row_maxima():
    sim = np.array([[0.1, 0.9, 0.3], [0.5, 0.2, 0.4]])
    assert scoring.maxsim(sim) == pytest.approx(0.9 + 0.5)
    assert scoring.maxsim(np.zeros((2, 0))) == float("-inf")


def test_group_maxsim_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(20):
        m, n, g = rng.integers(1, 5), rng.integers(1, 30), rng.integers(1, 8)
        sim = rng.normal(size=(m, n)).astype(np.float32)
        groups = rng.integers(0, g, size=n)
        np.testing.assert_allclose(scoring.group_maxsim(sim, groups, g), brute_group_maxsim(sim, groups, g), rtol=1e-5)


def test_sentence_scores_count_a_passage_for_every_sentence_it_covers():
    sim = np.array([[0.2, 0.7]])  # one query vector, two units
    unit_sentences = np.array([[0, 2], [3, 3]])  # unit 0 covers sentences 0..2
    np.testing.assert_allclose(scoring.sentence_scores(sim, unit_sentences, 5), [0.2, 0.2, 0.2, 0.7, -np.inf])


def test_top_k_orders_best_first_and_breaks_ties_by_index():
    scores = np.array([0.5, 0.9, 0.5, 0.1])
    assert scoring.top_k(scores, 3).tolist() == [1, 0, 2]
    assert scoring.top_k(scores, 10).tolist() == [1, 0, 2, 3]
    assert scoring.top_k(scores, 0).tolist() == []


def test_top_k_is_a_prefix_of_any_longer_top_k_among_many_ties():
    """Codes decode many units to one vector: their scores tie exactly, and
    a page must not change with k (argpartition picks ties at random)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        scores = rng.integers(0, 3, size=int(rng.integers(5, 60))).astype(np.float32)
        k = int(rng.integers(1, len(scores)))
        expected = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]
        assert scoring.top_k(scores, k).tolist() == expected


def test_approximate_scores_impute_the_floor_for_missed_query_vectors():
    # query vector 0 hit docs 7 and 8; query vector 1 hit doc 8 only
    hit_scores = np.array([0.9, 0.5, 0.6], dtype=np.float32)
    hit_docs = np.array([7, 8, 8])
    query_of_hit = np.array([0, 0, 1])
    floor = np.array([0.5, 0.6], dtype=np.float32)
    docs, approx = scoring.approximate_doc_scores(hit_scores, hit_docs, 2, query_of_hit, floor)
    assert docs.tolist() == [7, 8]
    np.testing.assert_allclose(approx, [0.9 + 0.6, 0.5 + 0.6])


def test_similarities_of_read_only_float16_parts_equal_one_float32_product_in_any_block_size():
    rng = np.random.default_rng(3)
    parts = [(rng.standard_normal((n, 16)) / 4).astype(np.float16) for n in (5, 0, 13, 1, 9)]
    for p in parts:
        p.flags.writeable = False  # as the memory-mapped store hands them out
    q = rng.standard_normal((3, 16)).astype(np.float32)
    expected = q @ np.concatenate(parts).astype(np.float32).T
    for block_rows in (1, 4, 13, 1000):
        got = scoring.similarities(q, parts, block_rows=block_rows)
        assert got.dtype == np.float32 and got.shape == (3, 28)
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    assert scoring.similarities(q, []).shape == (3, 0)


def test_decoded_similarities_equal_one_product_of_every_decoded_row_in_blocks_never_cut_short():
    rng = np.random.default_rng(4)
    table = rng.standard_normal((500, 16)).astype(np.float32)  # a decoder: vector id -> its row
    asked = []

    def decode(ids):
        asked.append(len(ids))
        return table[ids]

    q = rng.standard_normal((3, 16)).astype(np.float32)
    ids = rng.permutation(500)[:230]
    got = scoring.decoded_similarities(q, decode, ids, block_rows=64)
    assert got.dtype == np.float32 and got.shape == (3, 230)
    np.testing.assert_allclose(got, q @ table[ids].T, rtol=1e-6, atol=1e-6)
    assert asked == [64, 64, 64, 38]  # a tail of at least half a block is a block of its own
    asked.clear()
    scoring.decoded_similarities(q, decode, ids[:200], block_rows=64)
    assert asked == [64, 64, 72]  # 200 = 3 x 64 + 8: the short tail joins the block before it
    asked.clear()
    assert scoring.decoded_similarities(q, decode, ids[:0]).shape == (3, 0) and asked == []


def test_sentence_windows_pack_whole_sentences_in_order_and_never_split_one():
    from propdex.retriever.scoring import sentence_windows

    # Units per sentence: 3, 2, 4, 1, 6 (sentence 5 has none); windows of at most 5 units.
    first = np.repeat([0, 1, 2, 3, 4, 6], [3, 2, 4, 1, 6, 1])
    groups, n = sentence_windows(np.stack([first, first], axis=1), 5)
    assert n == 4
    assert groups.tolist() == [0] * 5 + [1] * 5 + [2] * 6 + [3]  # 3+2 | 4+1 | 6 alone (longer than a window) | 1
    assert sentence_windows(np.zeros((0, 2), np.int32), 5)[1] == 0
    # Units out of sentence order are grouped by sentence all the same.
    shuffled = np.random.default_rng(0).permutation(len(first))
    groups_shuffled, n_shuffled = sentence_windows(np.stack([first[shuffled]] * 2, axis=1), 5)
    assert n_shuffled == 4 and groups_shuffled.tolist() == groups[shuffled].tolist()


def test_window_maxsim_is_the_best_windows_maxsim_and_whole_maxsim_for_a_wide_window():
    from propdex.retriever.scoring import maxsim, window_maxsim

    rng = np.random.default_rng(0)
    first = np.repeat(np.arange(6), [4, 4, 4, 4, 4, 4])
    sentences = np.stack([first, first], axis=1)
    sim = rng.standard_normal((3, 24)).astype(np.float32)
    by_hand = max(maxsim(sim[:, a:a + 8]) for a in (0, 8, 16))  # windows of 8 units: two sentences each
    assert window_maxsim(sim, sentences, 8) == pytest.approx(by_hand)
    assert window_maxsim(sim, sentences, 24) == pytest.approx(maxsim(sim))
    # Each query vector takes its best of a window, not of the whole: a long document no longer wins by its length.
    assert window_maxsim(sim, sentences, 8) <= maxsim(sim)
    assert window_maxsim(sim[:, :0], sentences[:0], 8) == float("-inf")


def test_window_maxsims_of_documents_side_by_side_equal_each_scored_alone():
    from propdex.retriever.scoring import maxsim, window_maxsims

    rng = np.random.default_rng(1)
    # Three documents, the middle one without units; units start in sentences out of order in the last.
    docs = [np.repeat(np.arange(5), [3, 1, 4, 2, 3]), np.zeros(0, np.int64), np.array([2, 0, 1, 1, 0, 2, 3])]
    sentences = [np.stack([f, f], axis=1) for f in docs]
    sim = rng.standard_normal((4, sum(len(f) for f in docs))).astype(np.float32)
    bounds = np.cumsum([0] + [len(f) for f in docs])
    got = window_maxsims(sim, sentences, 4)
    alone = [window_maxsims(sim[:, a:b], [s], 4)[0] for a, b, s in zip(bounds[:-1], bounds[1:], sentences)]
    np.testing.assert_allclose(got, alone, rtol=1e-6)
    assert got[1] == float("-inf")
    # Windows of 4 units over the first document: sentences {0, 1} (4 units), {2} (4), {3, 4} (5 > 4: a window each).
    first = sim[:, :13]
    assert got[0] == pytest.approx(max(maxsim(first[:, 0:4]), maxsim(first[:, 4:8]), maxsim(first[:, 8:10]), maxsim(first[:, 10:13])))


def test_stage1_estimate_per_window_takes_a_documents_best_window():
    from propdex.retriever.scoring import approximate_doc_scores

    # Two query vectors. Document 7 matches each in a different window, document 9 both in one.
    scores = np.array([0.9, 0.9, 0.8, 0.8], np.float32)
    docs = np.array([7, 7, 9, 9])
    query_of = np.array([0, 1, 0, 1])
    floor = np.array([0.1, 0.1], np.float32)
    whole = dict(zip(*approximate_doc_scores(scores, docs, 2, query_of, floor)))
    assert whole[7] == pytest.approx(1.8) and whole[9] == pytest.approx(1.6)
    windowed = dict(zip(*approximate_doc_scores(scores, docs, 2, query_of, floor, np.array([0, 3, 2, 2]))))
    # Document 7's best window holds one match and the floor for the other: the spread-out document ranks second.
    assert windowed[7] == pytest.approx(1.0) and windowed[9] == pytest.approx(1.6)


def greedy_windows(unit_sentences, window):
    """The packing rule, one sentence at a time."""
    _, inverse, counts = np.unique(unit_sentences[:, 0], return_inverse=True, return_counts=True)
    of_sentence, w, used = [], 0, 0
    for c in counts.tolist():
        if used and used + c > window:
            w, used = w + 1, 0
        of_sentence.append(w)
        used += c
    return np.asarray(of_sentence, np.int64)[inverse.reshape(-1)], w + 1 if len(counts) else 0


def random_units(rng, sort):
    n = int(rng.integers(0, 80))
    first = rng.integers(0, 25, n)
    first = np.sort(first) if sort else first
    return np.stack([first, first + rng.integers(0, 2, n)], axis=1).astype(np.int32)


def test_sentence_windows_are_the_greedy_packing_of_sentences_in_order():
    from propdex.retriever.scoring import sentence_windows

    rng = np.random.default_rng(7)
    for trial in range(500):
        units, window = random_units(rng, trial % 2), int(rng.integers(1, 40))
        groups, count = sentence_windows(units, window)
        want_groups, want_count = greedy_windows(units, window)
        assert count == want_count and groups.tolist() == want_groups.tolist()


def test_sentence_windows_of_several_documents_are_each_documents_own():
    """Stage 2 packs all of a shard's candidates in one call: no window may
    run from one document into the next, and each document's windows are
    numbered from 0, whatever its neighbours (empty, unsorted, one sentence)."""
    from propdex.retriever.scoring import sentence_windows_of

    rng = np.random.default_rng(8)
    for trial in range(300):
        docs = [random_units(rng, rng.random() < 0.8) for _ in range(int(rng.integers(0, 7)))]
        window = int(rng.integers(1, 40))
        got = sentence_windows_of(docs, window)
        assert len(got) == len(docs)
        for units, (groups, count) in zip(docs, got):
            want_groups, want_count = greedy_windows(units, window)
            assert count == want_count and groups.tolist() == want_groups.tolist()


def test_run_starts_are_the_first_index_of_each_run_of_equal_values():
    assert scoring.run_starts(np.array([3, 3, 5, 5, 5, 7, 3])).tolist() == [0, 2, 5, 6]
    assert scoring.run_starts(np.array([4])).tolist() == [0]
    assert scoring.run_starts(np.zeros(0, np.int64)).tolist() == []


def _random_document(rng, max_sentences=12):
    """A document's units as the encoders emit them: in sentence order, most
    inside one sentence, some passages over several, title units (s, s - 1)
    first."""
    n = int(rng.integers(1, max_sentences))
    units = [(0, -1)] * int(rng.integers(0, 3))
    for s in range(n):
        for _ in range(int(rng.integers(0, 4))):
            units.append((s, min(n - 1, s + int(rng.integers(0, 3))) if rng.random() < 0.2 else s))
    return np.array(units, dtype=np.int32).reshape(-1, 2), n


def test_sentence_scores_side_by_side_and_of_a_range_equal_each_document_scored_alone():
    """Aggregation scores every candidate's sentences in one call and a hit's
    passage's sentences alone: both must be bit for bit the scores of each
    document's sentences computed whole (a sentence ranks by them)."""
    rng = np.random.default_rng(3)
    for _ in range(100):
        docs = [_random_document(rng) for _ in range(int(rng.integers(1, 6)))]
        m = int(rng.integers(1, 6))
        sims = [rng.normal(size=(m, len(us))).astype(np.float32) for us, _ in docs]
        counts = [int(us[:, 1].max()) + 1 if len(us) else 0 for us, _ in docs]
        alone = [scoring.sentence_scores(sim, us, c) for sim, (us, _), c in zip(sims, docs, counts)]
        joint = scoring.sentence_scores_of(sims, [us for us, _ in docs], counts)
        assert len(joint) == len(alone) and all(np.array_equal(a, b) for a, b in zip(joint, alone))
        for sim, (us, _), whole, c in zip(sims, docs, alone, counts):
            if c:
                first = int(rng.integers(0, c))
                last = int(rng.integers(first, c))
                assert np.array_equal(scoring.sentence_range_scores(sim, us, first, last), whole[first:last + 1])


def test_rows_rank_every_candidates_sentences_and_units_as_each_ranked_alone_then_merged():
    """`rows` ranks all candidates' rows in one sort; the rule, written per
    candidate: its k best (ties by position), merged by tier, score, shard,
    ordinal, position."""
    from propdex.retriever.rescoring import Candidate, rows

    rng = np.random.default_rng(4)
    for _ in range(60):
        cands = []
        for i in range(int(rng.integers(1, 8))):
            us, _ = _random_document(rng)
            # few distinct values, so that scores tie across candidates and inside one
            part = rng.integers(0, 3, size=(2, len(us))).astype(np.float32)
            cands.append(Candidate(int(rng.integers(0, 2)), int(rng.integers(0, 50)), part, us, 0.0, tier=int(rng.random() < 0.3)))
        k = int(rng.integers(1, 15))
        for level in ("sentence", "unit"):
            expected = []
            for ci, c in enumerate(cands):
                scores = c.sentence_scores() if level == "sentence" else c.unit_scores()
                expected += [(float(scores[j]), ci, int(j)) for j in scoring.top_k(scores, k) if np.isfinite(scores[j])]
            expected.sort(key=lambda r: (cands[r[1]].tier, -r[0], cands[r[1]].shard, cands[r[1]].ordinal, r[2]))
            assert rows(cands, k, level) == expected[:k]


def test_hit_windows_keep_every_unit_of_each_window_a_hit_fell_in():
    from propdex.retriever.rescoring import hit_windows
    from propdex.retriever.scoring import sentence_windows

    rng = np.random.default_rng(9)
    for _ in range(200):
        units = random_units(rng, True)
        windows = sentence_windows(units, int(rng.integers(1, 20)))
        hit = rng.integers(0, max(1, len(units)) + 2, int(rng.integers(0, 6)))  # some past the end: ignored
        got = hit_windows(windows, hit)
        groups = windows[0]
        want = np.flatnonzero(np.isin(groups, groups[hit[hit < len(groups)]]))
        if not len(hit) or len(want) == len(groups):
            assert got is None
        else:
            assert got.tolist() == want.tolist()
