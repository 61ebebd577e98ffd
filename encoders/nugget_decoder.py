"""The nugget decoder: a small Transformer, trained from scratch, that
reconstructs a text from its nuggets. It exists to train the scorer (its
cross-attention logits carry the nugget scores, the only gradient TopK
lets through) and to measure what the nuggets kept; retrieval never runs it.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class DecoderBlock(nn.Module):
    """Pre-norm decoder layer whose cross-attention logits take an additive bias."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.self_qkv = nn.Linear(dim, 3 * dim)
        self.self_out = nn.Linear(dim, dim)
        self.cross_q = nn.Linear(dim, dim)
        self.cross_kv = nn.Linear(dim, 2 * dim)
        self.cross_out = nn.Linear(dim, dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        b, h, t, dh = x.shape
        return x.transpose(1, 2).reshape(b, t, h * dh)

    def memory(self, nuggets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values of the nuggets (computed once per text)."""
        k, v = self.cross_kv(nuggets).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def forward(self, x: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor], memory_bias: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """`x` attends causally to itself (and to `past` keys/values when
        decoding step by step); returns the output and the keys/values so far."""
        q, k, v = (self._split(t) for t in self.self_qkv(self.norm1(x)).chunk(3, dim=-1))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        causal = past is None and x.shape[1] > 1
        x = x + self.self_out(self._merge(nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)))
        q = self._split(self.cross_q(self.norm2(x)))
        # a = (q.k + s) / sqrt(d_head): SDPA scales q.k itself, so s is scaled here.
        bias = (memory_bias / math.sqrt(q.shape[-1]))[:, None, None, :]
        x = x + self.cross_out(self._merge(nn.functional.scaled_dot_product_attention(q, *memory, attn_mask=bias)))
        return x + self.ffn(self.norm3(x)), (k, v)


class NuggetDecoder(nn.Module):
    """A small Transformer decoder, trained from scratch, that reads nuggets.

    It uses the backbone's vocabulary and, frozen and tied, its word
    embeddings (in and out), so what it adds is only its layers."""

    def __init__(self, word_embeddings: nn.Embedding, layers: int = 2, heads: int = 6, max_positions: int = 512) -> None:
        super().__init__()
        dim = word_embeddings.embedding_dim
        # Not a submodule: the embeddings belong to the backbone and are not saved here.
        self._words = (word_embeddings,)
        self.positions = nn.Embedding(max_positions, dim)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.config = {"layers": layers, "heads": heads, "max_positions": max_positions}

    @property
    def vocabulary(self) -> torch.Tensor:
        return self._words[0].weight.detach()

    def hidden(self, ids: torch.Tensor, nuggets: torch.Tensor, valid: torch.Tensor, scores: torch.Tensor | None) -> torch.Tensor:
        """Output states (b, t, d) for decoder inputs `ids` given the nuggets;
        their inner products with `vocabulary` rows are the next-token logits.

        `scores` (b, k) are added to every cross-attention logit (None: no
        residual, as at inference, where the paper finds it changes little)."""
        x = self.vocabulary[ids] + self.positions(torch.arange(ids.shape[1], device=ids.device))[None]
        bias = self._bias(valid, scores, x.dtype)
        for block in self.blocks:
            x, _ = block(x, block.memory(nuggets), bias)
        return self.norm(x)

    @staticmethod
    def _bias(valid: torch.Tensor, scores: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        bias = torch.zeros_like(valid, dtype=dtype) if scores is None else scores.to(dtype)
        return bias.masked_fill(~valid, float("-inf"))

    def forward(self, ids: torch.Tensor, nuggets: torch.Tensor, valid: torch.Tensor, scores: torch.Tensor | None) -> torch.Tensor:
        """Next-token logits (b, t, vocab)."""
        return self.hidden(ids, nuggets, valid, scores) @ self.vocabulary.T

    @torch.inference_mode()
    def generate(self, nuggets: torch.Tensor, valid: torch.Tensor, start: int, end: int, max_new: int) -> list[list[int]]:
        """Greedy decoding, one token at a time with cached keys/values; each row stops at `end`."""
        ids = torch.full((nuggets.shape[0], 1), start, dtype=torch.long, device=nuggets.device)
        done = torch.zeros(nuggets.shape[0], dtype=torch.bool, device=nuggets.device)
        memories = [block.memory(nuggets) for block in self.blocks]
        bias = self._bias(valid, None, nuggets.dtype)
        past: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(self.blocks)
        max_new = min(max_new, self.positions.num_embeddings - 1)
        for t in range(max_new):
            x = self.vocabulary[ids[:, -1:]] + self.positions.weight[t][None, None]
            for i, block in enumerate(self.blocks):
                x, past[i] = block(x, memories[i], bias, past[i])
            nxt = (self.norm(x)[:, -1] @ self.vocabulary.T).argmax(-1)
            nxt = nxt.masked_fill(done, end)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            done |= nxt == end
            if bool(done.all()):
                break
        return [[t for t in row[1:] if t != end] for row in ids.tolist()]
