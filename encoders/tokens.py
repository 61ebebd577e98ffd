"""`tokens`: one vector per token, ColBERT-style late interaction.

Two ways to store fewer vectors per passage, baselines for nuggets at the
same budget:
- `pool=F`: token pooling (Clavie et al. 2024): a passage's token vectors are
  clustered hierarchically (Ward linkage on cosine distance) into ceil(n / F)
  clusters; each cluster's mean, normalised, is one vector whose unit spans
  all of its tokens.
- `keep="idf", ratio=r`: static pruning: the ceil(n r) tokens of highest IDF
  (a word-piece's inverse document frequency over Wikipedia's training split,
  shipped as weights/idf; `propdex train idf` rebuilds it) are kept.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from . import flag, weights_path
from .backbone import Backbone
from .base import Encoder, SentenceLocator, TokenStates, _n_specials, focus_mask, l2_normalize
from .text import is_wordlike
from .units import Encoded, Kind, Passage, Unit

KEEP = ("all", "idf")


class TokensEncoder(Encoder):
    name = "tokens"
    kind = Kind.TOKEN

    def __init__(self, backbone: Backbone, batch_size: int = 32, drop_punct: bool = True, pool: int | str = 1,
                 keep: str = "all", ratio: float | str = 1.0, idf_sha256: str | None = None,
                 title_units: bool | str = False) -> None:
        super().__init__(backbone, batch_size)
        # The title's own token vectors, in the first passage of a document,
        # as TITLE units: MaxSim can match a query's entity to the title, and
        # no sentence ever scores through them.
        self.title_units = flag(title_units)
        # Punctuation tokens are ~15% of Wikipedia tokens and match everything
        # weakly; dropping them shrinks the index without hurting MaxSim much.
        self.drop_punct = drop_punct
        self.pool_factor = int(pool)
        self.keep, self.ratio = keep, float(ratio)
        if self.pool_factor < 1:
            raise ValueError(f"tokens pool factor must be at least 1, got {pool}")
        if keep not in KEEP:
            raise ValueError(f"tokens keep must be one of {', '.join(KEEP)}, got {keep!r}")
        if not 0 < self.ratio <= 1:
            raise ValueError(f"tokens ratio must be in (0, 1], got {ratio}")
        if keep != "all" and self.pool_factor > 1:
            raise ValueError("tokens: choose pool=F or keep=idf, not both")
        self.idf, self.idf_sha256 = (load_idf(backbone, idf_sha256) if keep == "idf" else (None, None))
        # Decided once per vocabulary entry, not per token in the hot path;
        # only [UNK] needs the text it stands for.
        tokenizer = backbone.tokenizer
        vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self._wordlike = np.array([is_wordlike(t) for t in vocab], dtype=bool)
        self._unk = tokenizer.unk_token_id
        # A late-interaction checkpoint's own choice of tokens (`kept`): the ids its documents drop.
        late = backbone.recipe.late
        self.skiplist = None if late is None else np.array(
            sorted({i for i in tokenizer.convert_tokens_to_ids(list(late.skiplist)) if i not in (None, self._unk)}), dtype=np.int64)

    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"drop_punct": self.drop_punct}
        if self.pool_factor > 1:
            options["pool"] = self.pool_factor
        if self.keep != "all":
            options |= {"keep": self.keep, "ratio": self.ratio, "idf_sha256": self.idf_sha256}
        if self.title_units:
            options["title_units"] = True
        return options

    @property
    def pooled_tokens(self) -> float:
        return float(self.pool_factor)

    @property
    def passage_units(self) -> int:
        # A token a vector, fewer when pooled or pruned; the title's own
        # units (title_units) are not counted, as they score no sentence.
        # A late-interaction checkpoint makes a vector of every position, its specials' too.
        n = self.max_length - (0 if self.backbone.recipe.late is not None else _n_specials(self.backbone))
        if self.keep == "idf":
            return math.ceil(n * self.ratio)
        return math.ceil(n / self.pool_factor)

    def pool(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        idx = self.kept(passage, tokens, query=query)
        if len(idx) == 0:
            return Encoded(np.zeros((0, self.dim), np.float32), [])
        # A query keeps every token: compression is for the index.
        groups = [[int(i)] for i in idx] if query else self.groups(idx, tokens)
        encoded = self.emit(passage, tokens, groups)
        if self.title_units and not query and tokens.title is not None and passage.start == 0:
            title = np.flatnonzero(tokens.title & self._wordlike[tokens.ids])
            if len(title):
                encoded = Encoded(np.concatenate([encoded.vectors, l2_normalize(tokens.states[title])]),
                                  encoded.units + [Unit(passage.doc.id, 0, (), Kind.TITLE) for _ in title])
        return encoded

    def kept(self, passage: Passage, tokens: TokenStates, *, query: bool) -> np.ndarray:
        """Positions of the tokens that stand for the passage: its own text, in
        focus, and (with `drop_punct`) not punctuation. A late-interaction
        checkpoint keeps what its library keeps: a query's every position
        ([MASK]s included), a document's every one off its skiplist
        (specials included)."""
        if self.skiplist is not None:
            return np.arange(len(tokens.ids)) if query else np.flatnonzero(~np.isin(tokens.ids, self.skiplist))
        keep = ~tokens.special & focus_mask(passage.doc, tokens.offsets + passage.start)
        if self.drop_punct:
            wordlike = self._wordlike[tokens.ids]
            for i in np.flatnonzero(tokens.ids == self._unk):
                a, b = tokens.offsets[i]
                wordlike[i] = is_wordlike(passage.text[a:b])
            words = keep & wordlike
            # A query of punctuation alone ("?!") still deserves vectors.
            keep = words if words.any() or not query else keep
        return np.flatnonzero(keep)

    def groups(self, idx: np.ndarray, tokens: TokenStates) -> list[list[int]]:
        """The kept tokens of a passage grouped into its vectors (a group's states are averaged)."""
        if self.keep == "idf":
            n = math.ceil(len(idx) * self.ratio)
            return [[int(i)] for i in np.sort(idx[np.argsort(-self.idf[tokens.ids[idx]], kind="stable")[:n]])]
        if self.pool_factor > 1:
            return [[int(idx[j]) for j in g] for g in pool_groups(tokens.states[idx].numpy(), self.pool_factor)]
        return [[int(i)] for i in idx]

    def emit(self, passage: Passage, tokens: TokenStates, groups: list[list[int]]) -> Encoded:
        """One normalised vector per group (the mean of its states) and a unit
        spanning the group's tokens."""
        char_spans = tokens.offsets + passage.start
        locate = SentenceLocator(passage.doc)
        if all(len(g) == 1 for g in groups):
            rows = np.array([g[0] for g in groups], dtype=np.int64)
            units = locate.units(char_spans[rows], Kind.TOKEN)
            if tokens.special[rows].any():
                # A late-interaction checkpoint's specials: vectors for the document, no span; they go with the
                # passage's first sentence, so a window of sentences (the searcher's) holds its passage's specials.
                first = locate.sentence_of(passage.start)
                units = [Unit(passage.doc.id, first, (), Kind.SPECIAL) if s else u for u, s in zip(units, tokens.special[rows])]
            return Encoded(l2_normalize(tokens.states[rows]), units)
        vectors = l2_normalize(torch.stack([tokens.states[g].mean(0) for g in groups]))
        units = [locate.unit([(int(char_spans[i, 0]), int(char_spans[i, 1])) for i in g], Kind.TOKEN) for g in groups]
        return Encoded(vectors, units)


def pool_groups(vectors: np.ndarray, factor: int) -> list[list[int]]:
    """Rows of `vectors` in ceil(n / factor) clusters (Ward linkage on cosine
    distance), each cluster's rows in order, clusters by their first row."""
    n = len(vectors)
    clusters = math.ceil(n / factor)
    if clusters >= n:
        return [[i] for i in range(n)]
    from scipy.cluster.hierarchy import fcluster, linkage

    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    distance = np.clip(1.0 - unit @ unit.T, 0.0, None)
    condensed = distance[np.triu_indices(n, 1)]
    labels = fcluster(linkage(condensed, method="ward"), t=clusters, criterion="maxclust")
    groups: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(int(label), []).append(i)
    return sorted(groups.values())


def load_idf(backbone: Backbone, expected_sha256: str | None = None) -> tuple[np.ndarray, str]:
    """The shipped word-piece IDF table for this backbone's vocabulary, and its sha256."""
    from .provenance import read_weights, verified_sha256

    path = weights_path("idf")
    state, config = read_weights(path, "IDF table", "rebuild it with `propdex train idf`")
    idf = state["idf"].float().numpy()
    if len(idf) != len(backbone.tokenizer):
        raise ValueError(f"{path}: IDF table for a vocabulary of {len(idf)}, the backbone has {len(backbone.tokenizer)}")
    return idf, verified_sha256(path, expected_sha256)
