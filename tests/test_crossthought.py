"""Cross-Thought on a tiny random backbone: cutting, slots, the cross layer, masked-LM training, attention scoring."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from propdex.encoders import Document, Kind, load_encoder
from propdex.encoders.base import tokenize
from propdex.encoders.crossthought import (
    CrossLayer, CrossThoughtModel, crossthought_weights, cut_sequences, load_crossthought, mask_words, sequence_passages,
)
from propdex.encoders.provenance import save_weights
from propdex.encoders.training.crossthought import Objective, distillation, maxsim, samples, section_runs, spans, tensors
from propdex.indexer.build import IndexWriter
from propdex.retriever import Searcher, scoring

TEXT = (
    "Photosynthesis converts light energy into chemical energy stored in glucose. Chlorophyll absorbs mostly blue and "
    "red light, which is why leaves look green. The Calvin cycle fixes carbon dioxide using ATP and NADPH made by the "
    "light-dependent reactions. Cyanobacteria were the first organisms to photosynthesise, oxygenating Earth's atmosphere "
    "some 2.4 billion years ago, an episode called the Great Oxidation Event. Unbelievably, antidisestablishmentarianism "
    "is unrelated."
)


@pytest.mark.parametrize("length", [1, 3, 8, 64])
def test_cut_sequences_keeps_every_token_once_in_order_and_cuts_before_words(length):
    rng = np.random.default_rng(length)
    for n in (0, 1, 5, 37, 300):
        starts = rng.random(n) < 0.6
        if n:
            starts[0] = True
        ranges = cut_sequences(starts, length)
        covered = [i for a, b in ranges for i in range(a, b)]
        assert covered == list(range(n))
        assert all(0 < b - a <= length for a, b in ranges)
        for a, b in ranges[:-1]:
            # A cut inside a word only where the word alone overflows the sequence.
            assert starts[b] or not starts[a + 1 : b + 1].any()


def test_sequences_of_a_document_tokenize_back_to_its_tokens(tiny):
    doc = Document("d", TEXT, sentences=((0, 76), (77, len(TEXT))))
    passages = sequence_passages(doc, tiny, length=8)
    whole = tiny.tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    pieces = [t for p in passages for t in tiny.tokenizer(p.text, add_special_tokens=False)["input_ids"]]
    assert pieces == whole and len(passages) > 5
    assert all(len(tiny.tokenizer(p.text, add_special_tokens=False)["input_ids"]) <= 8 for p in passages)
    # Only whitespace falls between consecutive sequences.
    assert all(not TEXT[a.end : b.start].strip() for a, b in zip(passages, passages[1:]))
    assert [p.first_sentence for p in passages][0] == 0 and passages[-1].first_sentence == 1
    focused = Document("d", TEXT, sentences=doc.sentences, focus=((80, 120),))
    assert 1 <= len(sequence_passages(focused, tiny, length=8)) < len(passages)


def test_cross_layer_mixes_slot_n_only_with_slot_n_of_other_sequences():
    torch.manual_seed(0)
    layer = CrossLayer(16, heads=2, ffn=16).eval()
    with torch.no_grad():
        layer.q.weight.normal_()
        layer.k.weight.normal_()
        slots = torch.randn(5, 3, 16)
        out = layer(slots)
        changed = slots.clone()
        changed[2, 1] += torch.randn(16)
        again = layer(changed)
        alpha = layer.attention(slots)
    # Slots 0 and 2 of every sequence never see slot 1 ...
    assert torch.equal(again[:, [0, 2]], out[:, [0, 2]])
    # ... while slot 1 of every other sequence reads sequence 2's slot 1.
    assert all(not torch.allclose(again[m, 1], out[m, 1]) for m in (0, 1, 3, 4))
    assert alpha.shape == (3, 2, 5, 5)
    assert torch.all(alpha.diagonal(dim1=-2, dim2=-1) == 0)  # never itself
    assert torch.allclose(alpha.sum(-1), torch.ones(3, 2, 5))


def test_retrieval_score_is_the_cross_layers_attention_averaged_over_heads_and_slots():
    torch.manual_seed(1)
    layer = CrossLayer(16, heads=4, ffn=16).eval()
    with torch.no_grad():
        layer.q.weight.normal_()
        layer.q.bias.normal_()
        layer.k.weight.normal_()
        slots = torch.randn(7, 3, 16)  # sequence 0 is the query, 1..6 the candidates
        alpha = layer.attention(slots)[:, :, 0, 1:].mean(dim=(0, 1)).numpy()
        query = layer.queries(slots[:1]).flatten(1).numpy()
        keys = layer.keys(slots[1:]).flatten(1).numpy()
    logits = scoring.block_logits(query, keys, blocks=3 * 4)
    assert np.allclose(scoring.attention(logits), alpha, atol=1e-6)
    # Stage 1's inner product is the sum of the block logits.
    assert np.allclose(query @ keys.T, logits.sum(0), atol=1e-4)


def test_masking_picks_about_15_percent_of_words_and_never_a_special():
    ids = torch.randint(1000, 2000, (64, 66))
    maskable = torch.ones_like(ids, dtype=torch.bool)
    maskable[:, [0, -1]] = False
    inputs, labels = mask_words(ids, maskable, mask_id=103, vocab=3000, generator=torch.Generator().manual_seed(0))
    target = labels != -100
    assert 0.12 < target.float()[maskable].mean() < 0.18 and not target[~maskable].any()
    assert torch.equal(labels[target], ids[target]) and torch.equal(inputs[~target], ids[~target])
    assert 0.7 < (inputs[target] == 103).float().mean() < 0.9


@pytest.mark.parametrize("control", [False, True])
def test_training_lowers_the_objective_and_leaves_the_backbone_bit_identical(tiny, control):
    torch.manual_seed(0)
    frozen = {k: v.clone() for k, v in tiny.model.state_dict().items()}
    model = CrossThoughtModel(tiny.model, slots=2, cross=not control, init_token=tiny.tokenizer.cls_token_id, rank=4)
    assert (model.cross is None) == control
    # Nothing of the backbone is a parameter of the model: it cannot be trained, saved or moved from here.
    assert not any(p is q for p in model.parameters() for q in tiny.model.parameters())
    tiny.model.requires_grad_(False)
    runs = section_runs(tiny.tokenizer, TEXT * 3, length=16, run=4, title="Photosynthesis")
    sample = next(samples(runs, 12))
    objective = Objective(model, tiny.tokenizer, rate=0.15, distill=0.0 if control else 1.0, device=torch.device("cpu"))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=3e-2)
    model.train()
    losses = []
    for _ in range(30):
        loss, parts = objective(sample, torch.Generator().manual_seed(0))
        assert ("kd" in parts) != control
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < np.mean(losses[:3]) - 1.0  # nats
    after = tiny.model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in frozen.items())


def test_slot_path_adapters_start_as_no_change_and_never_touch_the_words(tiny):
    enc = tiny.tokenizer(["a short sequence", "another one, longer than that"], padding=True, return_tensors="pt")
    plain = CrossThoughtModel(tiny.model, slots=3, init_token=tiny.tokenizer.cls_token_id)
    adapted = CrossThoughtModel(tiny.model, slots=3, init_token=tiny.tokenizer.cls_token_id, rank=4)
    with torch.no_grad():
        start, words = plain.states(enc["input_ids"], enc["attention_mask"])
        assert torch.allclose(adapted.states(enc["input_ids"], enc["attention_mask"])[0], start, atol=1e-6)
        for lowrank in adapted.adapters.modules():
            if hasattr(lowrank, "b"):
                lowrank.b.weight.normal_()
        moved, same_words = adapted.states(enc["input_ids"], enc["attention_mask"])
    assert not torch.allclose(moved, start, atol=1e-3)
    assert torch.equal(same_words, words)


def test_distillation_is_zero_exactly_when_the_student_ranks_like_the_teacher():
    torch.manual_seed(0)
    vectors = torch.nn.functional.normalize(torch.randn(6, 8), dim=-1)
    teacher = vectors @ vectors.T
    same = teacher / 0.05
    itself = torch.eye(6, dtype=torch.bool)
    for exclude in (None, itself):
        assert distillation(same, teacher, exclude=exclude).item() == pytest.approx(0, abs=1e-5)
        assert distillation(same + 3.0, teacher, exclude=exclude).item() == pytest.approx(0, abs=1e-5)  # a shift changes no ranking
        assert distillation(-same, teacher, exclude=exclude).item() > 1.0
        assert distillation(torch.zeros(6, 6), teacher, exclude=exclude).item() > 0.1
    # Excluded pairs weigh nothing, whatever the student says about them.
    assert distillation(same.masked_fill(itself, 99.0), teacher, exclude=itself).item() == pytest.approx(0, abs=1e-5)


def test_maxsim_teacher_is_late_interaction_over_content_tokens():
    torch.manual_seed(0)
    q, c = torch.randn(2, 4, 8), torch.randn(3, 5, 8)
    qc = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    cc = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 0, 0]], dtype=torch.bool)
    got = maxsim(q, qc, c, cc)
    unit = lambda x: torch.nn.functional.normalize(x, dim=-1)  # noqa: E731
    for a in range(2):
        for b in range(3):
            want = np.mean([max(float(unit(q[a, i]) @ unit(c[b, j])) for j in range(5) if cc[b, j]) for i in range(4) if qc[a, i]])
            assert got[a, b].item() == pytest.approx(want, abs=1e-5)


def test_runs_are_consecutive_sequences_and_samples_never_split_a_run(tiny):
    runs = section_runs(tiny.tokenizer, TEXT, length=8, run=4, title="Photosynthesis")
    flat = [t for r in runs for _, s in r for t in s]
    assert flat == tiny.tokenizer(TEXT, add_special_tokens=False)["input_ids"][: len(flat)]
    assert all(2 <= len(r) <= 4 for r in runs)
    assert {tuple(t) for r in runs for t, _ in r} == {tuple(tiny.tokenizer("Photosynthesis", add_special_tokens=False)["input_ids"])}
    stream = samples(runs, 6)
    for _ in range(5):
        sample = next(stream)
        assert 2 <= sum(map(len, sample)) <= 6 and all(r in runs for r in sample)


def test_training_tensors_are_what_the_encoder_feeds_the_backbone(tiny):
    """A training sequence is tokenized exactly as the index tokenizes it
    (title pair, specials), and only the sequence's own tokens are maskable."""
    runs = section_runs(tiny.tokenizer, TEXT, length=8, run=3, title="Photosynthesis")
    sample = runs[:2]
    ids, attention, maskable, content, run = tensors(tiny.tokenizer, sample)
    assert run.tolist() == [r for r, x in enumerate(sample) for _ in x]
    for i, (title, seq) in enumerate(s for r in sample for s in r):
        text, name = tiny.tokenizer.decode(seq), tiny.tokenizer.decode(title)
        enc, _, special, is_title = tokenize(tiny.tokenizer, [text], [name], 64)
        n = int(attention[i].sum())
        assert ids[i, :n].tolist() == enc["input_ids"][0].tolist()
        assert maskable[i, :n].tolist() == (~special[0]).tolist()
        assert content[i, :n].tolist() == (~special[0] | is_title[0]).tolist()
    # A span query: some of a sequence's own tokens, alone, between the specials.
    q_ids, q_attention, q_content = spans(tiny.tokenizer, ids, maskable, shortest=2, longest=4, generator=torch.Generator().manual_seed(0))
    for i in range(len(ids)):
        own = ids[i][maskable[i]].tolist()
        words = q_ids[i][q_content[i]].tolist()
        assert 2 <= len(words) <= 4 and any(own[j : j + len(words)] == words for j in range(len(own)))
        assert q_ids[i, 0] == tiny.tokenizer.cls_token_id and int(q_attention[i].sum()) == len(words) + 2


@pytest.fixture()
def ct_dir(tiny, tiny_dir, tmp_path):
    torch.manual_seed(0)
    model = CrossThoughtModel(tiny.model, slots=3, init_token=tiny.tokenizer.cls_token_id, rank=2)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # non-trivial weights, to see them come back
    state, config = crossthought_weights(model, str(tiny_dir), 16)
    save_weights(state, tmp_path / "ct", config)
    return tmp_path / "ct", model.eval()


def test_saved_weights_load_back_to_the_same_slots(tiny, ct_dir):
    path, model = ct_dir
    loaded, config = load_crossthought(path, tiny.model)
    enc = tiny.tokenizer(["a short sequence", "another one, longer than that"], padding=True, return_tensors="pt")
    with torch.no_grad():
        want = model.states(enc["input_ids"], enc["attention_mask"])[0]
        got = loaded.states(enc["input_ids"], enc["attention_mask"])[0]
    assert config["slots"] == 3 and got.shape == (2, 3, 32)
    # The head is stored in float16; the slots and W^Q, W^K, which make the vectors, are exact.
    assert torch.equal(got, want)
    assert torch.equal(loaded.cross.k.weight, model.cross.k.weight)


def test_encoder_gives_one_unit_of_n_slot_blocks_per_sequence(tiny, ct_dir):
    path, model = ct_dir
    encoder = load_encoder("crossthought", backbone=tiny, weights=str(path), words=0)
    doc = Document("d", TEXT, sentences=((0, 76), (77, len(TEXT))))
    passages = encoder.passages(doc)
    encoded = encoder.encode(passages)
    assert encoder.dim == 3 * 32 and encoder.attention_blocks == 3 * 2
    for p, e in zip(passages, encoded):
        assert e.vectors.shape == (1, 3 * 32)
        (unit,) = e.units
        assert unit.kind == Kind.SLOT
        start = doc.sentences[unit.sentence][0]
        assert doc.text[start + unit.spans[0][0] : start + unit.spans[0][1]] == p.text
    # The vector is the sequence's slot states through W^K; a query's through W^Q.
    enc = tiny.tokenizer([passages[0].text], return_tensors="pt")
    with torch.no_grad():
        slots = encoder.ct.states(enc["input_ids"], enc["attention_mask"])[0]
        assert np.allclose(encoded[0].vectors, encoder.ct.cross.keys(slots).flatten(1).numpy(), atol=1e-5)
        (q,) = encoder.encode_queries([passages[0].text])
        assert np.allclose(q.vectors, encoder.ct.cross.queries(slots).flatten(1).numpy(), atol=1e-5)
    assert encoder.config()["weights_sha256"]


def test_slot_scoring_options_belong_to_slots_alone(tiny, ct_dir):
    with pytest.raises(ValueError, match="words=0"):
        load_encoder("crossthought", backbone=tiny, weights=str(ct_dir[0]), score="dot")
    assert load_encoder("crossthought", backbone=tiny, weights=str(ct_dir[0]), score="dot", words="0").attention_blocks == 0


def test_the_untrained_start_loads_by_name_and_is_the_seeded_model_training_begins_from(tiny):
    a = load_encoder("crossthought", backbone=tiny, weights="untrained-3")
    b = load_encoder("crossthought", backbone=tiny, weights="untrained-3")
    start = CrossThoughtModel(tiny.model, slots=3, init_token=tiny.tokenizer.cls_token_id)
    assert a.ct.n_slots == 3 and a.config()["weights"] == "untrained-3" and a.config()["weights_sha256"] is None
    assert torch.equal(a.ct.slots, b.ct.slots) and torch.equal(a.ct.slots, start.slots)
    assert torch.equal(a.ct.cross.q.weight, torch.eye(32))  # W^Q = W^K = I: the backbone's own inner product
    (qa,), (qb,) = a.encode_queries(["light energy"]), b.encode_queries(["light energy"])
    assert np.array_equal(qa.vectors, qb.vectors)
    assert load_encoder("crossthought", backbone=tiny, weights="untrained").ct.n_slots == 5


@pytest.fixture()
def sharded(tiny, ct_dir, tmp_path):
    """(encoder, one-sentence documents, a 3-shard index of them)."""
    encoder = load_encoder("crossthought", backbone=tiny, weights=str(ct_dir[0]), words=0)
    docs = [Document(f"d{i}", s, sentences=((0, len(s)),)) for i, s in enumerate(TEXT.split(". "))]
    IndexWriter(tmp_path / "idx", encoder, shard_docs=2).build(docs)
    return encoder, docs, tmp_path / "idx"


def best_attention(encoder, query: str, docs: list[Document]) -> dict[str, float]:
    """Each document's best sequence under alpha over all the documents'
    sequences, from the vectors as the index stores them (float16)."""
    (q,) = encoder.encode_queries([query])
    encoded = {d.id: encoder.encode(encoder.passages(d)) for d in docs}
    keys = np.concatenate([e.vectors for es in encoded.values() for e in es]).astype(np.float16)
    owner = [d for d, es in encoded.items() for _ in es]
    alpha = scoring.attention(scoring.block_logits(q.vectors, keys, encoder.attention_blocks))
    return {d: max(a for a, o in zip(alpha, owner) if o == d) for d in encoded}


def test_search_scores_are_attention_over_every_candidate_of_every_shard(sharded):
    encoder, docs, index = sharded
    query = "light energy and carbon"
    want = best_attention(encoder, query, docs)
    with Searcher.load(index, encoder=encoder) as searcher:
        assert len(searcher.shards) == 3
        hits = searcher.search(query, k=len(docs), rerank=len(docs))
    assert sorted(h.doc_id for h in hits) == sorted(want)
    for h in hits:
        assert h.score == pytest.approx(want[h.doc_id], rel=1e-4)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_within_re_scores_exactly_the_listed_documents(sharded):
    encoder, docs, index = sharded
    pool = ["d3", "d0", "missing", "d4"]
    with Searcher.load(index, encoder=encoder) as searcher:
        (hits,) = searcher.search_batch(["light energy"], k=10, within=[pool])
        with pytest.raises(ValueError, match="candidate sets"):
            searcher.search_batch(["a", "b"], within=[pool])
    assert sorted(h.doc_id for h in hits) == ["d0", "d3", "d4"]
    # The softmax runs over the pool's sequences only.
    want = best_attention(encoder, "light energy", [d for d in docs if d.id in pool])
    for h in hits:
        assert h.score == pytest.approx(want[h.doc_id], rel=1e-4)
