"""`single`: one mean-pooled vector per passage (the DPR-style baseline)."""
from __future__ import annotations

import numpy as np

from .base import Encoder, SentenceLocator, TokenStates, focus_mask, l2_normalize
from .units import Encoded, Kind, Passage


class SingleEncoder(Encoder):
    name = "single"
    kind = Kind.PASSAGE

    def pool(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        doc = passage.doc
        char_spans = tokens.offsets + passage.start
        if doc.focus:
            # Mask pooling: the whole passage is context, only the focus is averaged.
            keep = ~tokens.special & focus_mask(doc, char_spans)
            spans = [(max(a, passage.start), min(b, passage.end)) for a, b in doc.focus if a < passage.end and b > passage.start]
        else:
            # Plain mean pooling over every real token, specials included, as
            # sentence-transformers does, so vectors match the model card's.
            keep = np.ones(len(char_spans), dtype=bool)
            spans = [(passage.start, passage.end)]
        if not keep.any() or not spans:
            return Encoded(np.zeros((0, self.dim), np.float32), [])
        vector = l2_normalize(tokens.states[keep].mean(0, keepdim=True))
        return Encoded(vector, [SentenceLocator(doc).unit(spans, Kind.PASSAGE)])
