"""Stage 2 over standalone codes that store each vector's scale: a row's
product is its residual's plus its list centroid's, times the scale, and
must equal the product with the whole decoded vector scaled to the common
norm (what stage 2 computes for codes written before scales were)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from propdex.indexer import ann
from propdex.indexer.decoding import CodesDecoder, to_length


@pytest.fixture(scope="module")
def trained():
    """Unit vectors in 64 dimensions, an OPQ + IVF + 4-bit PQ codec trained on
    them, and their codes with scales (norm 1)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6000, 64)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    codec = ann.train("OPQ16,IVF32,PQ32x4", x[:4000])
    codes = ann.encode(codec, x)
    rows = ann.scaled(codes, ann.decoding_codec(codec).sa_decode(codes), 1.0)
    scales = rows[:, codes.shape[1]:].copy().view("<f4")[:, 0]
    return codec, codes, scales, rng


def _reference(tables: CodesDecoder, q: torch.Tensor, rows: np.ndarray, norm: float | None) -> np.ndarray:
    """Each row decoded whole, scaled to `norm` where there is one, then multiplied."""
    x = torch.from_numpy(tables(rows))  # tables built with norm=None: unscaled
    if norm is not None:
        to_length(x, norm)
    return (q @ x.T).numpy()


def test_a_rows_scale_takes_its_decoded_vector_to_the_common_norm(trained):
    codec, codes, scales, _ = trained
    lengths = np.linalg.norm(ann.decoding_codec(codec).sa_decode(codes), axis=1)
    assert lengths.std() > 0.01  # codes shorten vectors unevenly: a scale is a number a row
    np.testing.assert_allclose(scales * lengths, 1.0, rtol=1e-6)
    assert ann.row_bytes(codec, True) == codec.sa_code_size() + 4


@pytest.mark.parametrize("device", [None, "cpu"])
def test_products_from_residuals_and_centroids_equal_products_with_whole_decoded_rows(trained, device):
    codec, codes, scales, rng = trained
    unscaled = CodesDecoder(codec, None)
    rotation = ann.scoring_decoder(codec)[1]
    for norm, stored in ((1.0, scales), (1.0, None), (None, None)):
        tables = CodesDecoder(codec, norm, device)
        # Queries in sequence, over other rows each (other lists): a query's centroid products must not serve the next.
        for _ in range(3):
            q = torch.from_numpy(rotation(rng.standard_normal((5, 64)).astype(np.float32)))
            ids = np.sort(rng.choice(len(codes), 700, replace=False))
            for part in (ids[:300], ids):  # the second asks for lists the first did not
                out = torch.empty((len(q), len(part)))
                tables.products(q, codes[part], None if stored is None else scales[part], out)
                np.testing.assert_allclose(out.numpy(), _reference(unscaled, q, codes[part], norm), rtol=1e-4, atol=1e-5)


def test_threads_keep_their_own_centroid_products(trained):
    """One decoder serves concurrent searches: each thread's query keeps its
    own table of centroid products."""
    codec, codes, scales, _ = trained
    tables, unscaled = CodesDecoder(codec, 1.0), CodesDecoder(codec, None)
    rotation = ann.scoring_decoder(codec)[1]
    wrong: list[int] = []

    def run(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(40):
            q = torch.from_numpy(rotation(rng.standard_normal((4, 64)).astype(np.float32)))
            ids = np.sort(rng.choice(len(codes), 200, replace=False))
            out = torch.empty((len(q), len(ids)))
            tables.products(q, codes[ids], scales[ids], out)
            wrong.append(not np.allclose(out.numpy(), _reference(unscaled, q, codes[ids], 1.0), rtol=1e-4, atol=1e-5))

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wrong) == 160 and not any(wrong)


def test_codes_of_the_wrong_width_are_reported_damaged(trained, tmp_path):
    codec, codes, _, _ = trained
    with open(tmp_path / ann.CODES_FILE, "wb") as f:
        np.save(f, codes)
    assert ann.read_codes(tmp_path / ann.CODES_FILE, codec, False)[1] is None
    with pytest.raises(ValueError, match="damaged"):
        ann.read_codes(tmp_path / ann.CODES_FILE, codec, True)  # the manifest says scaled, the rows hold none
