"""`tokens`: one vector per token, ColBERT-style late interaction."""
from __future__ import annotations

from typing import Any

import numpy as np

from .backbone import Backbone
from .base import Encoder, SentenceLocator, TokenStates, focus_mask, l2_normalize
from .text import is_wordlike
from .units import Encoded, Kind, Passage


class TokensEncoder(Encoder):
    name = "tokens"
    kind = Kind.TOKEN

    def __init__(self, backbone: Backbone, batch_size: int = 32, drop_punct: bool = True) -> None:
        super().__init__(backbone, batch_size)
        # Punctuation tokens are ~15% of Wikipedia tokens and match everything
        # weakly; dropping them shrinks the index without hurting MaxSim much.
        self.drop_punct = drop_punct
        # Decided once per vocabulary entry, not per token in the hot path;
        # only [UNK] needs the text it stands for.
        tokenizer = backbone.tokenizer
        vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        self._wordlike = np.array([is_wordlike(t) for t in vocab], dtype=bool)
        self._unk = tokenizer.unk_token_id

    def options(self) -> dict[str, Any]:
        return {"drop_punct": self.drop_punct}

    def pool(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        doc = passage.doc
        char_spans = tokens.offsets + passage.start
        keep = ~tokens.special & focus_mask(doc, char_spans)
        if self.drop_punct:
            wordlike = self._wordlike[tokens.ids]
            for i in np.flatnonzero(tokens.ids == self._unk):
                a, b = char_spans[i]
                wordlike[i] = is_wordlike(doc.text[a:b])
            words = keep & wordlike
            # A query of punctuation alone ("?!") still deserves vectors.
            keep = words if words.any() or not query else keep
        idx = np.flatnonzero(keep)
        if len(idx) == 0:
            return Encoded(np.zeros((0, self.dim), np.float32), [])
        locate = SentenceLocator(doc)
        units = [locate.unit([(int(char_spans[i, 0]), int(char_spans[i, 1]))], Kind.TOKEN) for i in idx]
        return Encoded(l2_normalize(tokens.states[idx]), units)
