"""The Cross-Thought model: N slot embeddings that read a frozen backbone,
the cross-sequence layer whose attention logits score retrieval, and the
masked-word head that trains them; with how its weights are saved, loaded
and (untrained) seeded.

The slots pass through the backbone's own layers without the words ever
attending to them, so the backbone's word states, and the geometry its
other encoders rely on, stay exactly as they were.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .adapters import adapter_stages, layer_stack, merged_stages
from .provenance import read_weights

SEQUENCE_TOKENS = 64


class CrossLayer(nn.Module):
    """The cross-sequence Transformer layer (post-norm, no positions): slot n
    of each sequence attends to slot n of the other sequences, never to
    another slot and never to itself.

    W^Q and W^K start as the identity, so before training the logit is the
    backbone's own inner product of two slot states: the attention starts
    from the pretrained geometry rather than from noise.
    """

    def __init__(self, dim: int, heads: int, ffn: int, dropout: float = 0.1) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"hidden size {dim} is not divisible by {heads} heads")
        self.heads, self.head_dim = heads, dim // heads
        self.q = nn.Linear(dim, dim)
        # No key bias: it adds the same q.b to every candidate's logit, which a softmax over candidates ignores.
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim)
        self.o = nn.Linear(dim, dim)
        with torch.no_grad():
            self.q.weight.copy_(torch.eye(dim))
            self.q.bias.zero_()
            self.k.weight.copy_(torch.eye(dim))
        self.norm1 = nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim))
        self.norm2 = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def queries(self, slots: torch.Tensor) -> torch.Tensor:
        """(..., d) slot states -> (..., heads, d_h) query blocks, scaled by 1/sqrt(d_h)."""
        return self.q(slots).unflatten(-1, (self.heads, self.head_dim)) / math.sqrt(self.head_dim)

    def keys(self, slots: torch.Tensor) -> torch.Tensor:
        """(..., d) slot states -> (..., heads, d_h) key blocks."""
        return self.k(slots).unflatten(-1, (self.heads, self.head_dim))

    def attention(self, slots: torch.Tensor) -> torch.Tensor:
        """(M, N, d) slots of M sequences -> alpha (N, heads, M, M); row m is
        how sequence m's slot n attends over the other sequences' slot n."""
        logits = torch.einsum("mnhe,jnhe->nhmj", self.queries(slots), self.keys(slots))
        itself = torch.eye(len(slots), dtype=torch.bool, device=slots.device)
        return logits.masked_fill(itself, float("-inf")).softmax(-1)

    def forward(self, slots: torch.Tensor) -> torch.Tensor:
        """(M, N, d) -> (M, N, d); needs M >= 2 (a sequence needs others to read)."""
        if len(slots) < 2:
            raise ValueError("the cross layer needs at least 2 sequences")
        alpha = self.dropout(self.attention(slots))
        values = self.v(slots).unflatten(-1, (self.heads, self.head_dim))
        mixed = torch.einsum("nhmj,jnhe->mnhe", alpha, values).flatten(-2)
        x = self.norm1(slots + self.dropout(self.o(mixed)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class MaskedWordHead(nn.Module):
    """Top layer over [slots; word states] and the masked-word classifier,
    whose output matrix is the backbone's (frozen) word embeddings."""

    def __init__(self, word_embeddings: nn.Embedding, heads: int, ffn: int, dropout: float = 0.1) -> None:
        super().__init__()
        dim = word_embeddings.embedding_dim
        self._words = (word_embeddings,)  # the backbone's: not saved here
        self.layer = nn.TransformerEncoderLayer(dim, heads, ffn, dropout, activation="gelu", batch_first=True)
        self.transform = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.LayerNorm(dim))
        self.bias = nn.Parameter(torch.zeros(word_embeddings.num_embeddings))

    def forward(self, slots: torch.Tensor, words: torch.Tensor, padding: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits at the word positions `where` (a (b, L) bool
        mask); `padding` (b, L) marks padded word positions."""
        n = slots.shape[1]
        pad = torch.cat([torch.zeros_like(padding[:, :1]).expand(-1, n), padding], 1)
        out = self.layer(torch.cat([slots, words], 1), src_key_padding_mask=pad)[:, n:]
        return self.transform(out[where]) @ self._words[0].weight.detach().T + self.bias


class LowRank(nn.Module):
    """A low-rank update x -> B(A(x)); B starts at zero, so a layer with it
    starts as the layer without it."""

    def __init__(self, dim_in: int, dim_out: int, rank: int) -> None:
        super().__init__()
        self.a = nn.Linear(dim_in, rank, bias=False)
        self.b = nn.Linear(rank, dim_out, bias=False)
        nn.init.normal_(self.a.weight, std=dim_in ** -0.5)
        nn.init.zeros_(self.b.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


# The projections of a BERT layer the slots' own path adapts.
SLOT_PATH = ("attention.self.query", "attention.output.dense", "intermediate.dense", "output.dense")


def slot_path_adapters(layers: nn.ModuleList, rank: int) -> nn.ModuleList:
    """Per layer, a `LowRank` beside each projection of `SLOT_PATH`: they
    change how the slots read, never what the words are."""
    return nn.ModuleList(
        nn.ModuleDict({name.replace(".", "_"): LowRank(m.in_features, m.out_features, rank)
                       for name in SLOT_PATH for m in [layer.get_submodule(name)]})
        for layer in layers
    )


def read_layer(layer: nn.Module, slots: torch.Tensor, words: torch.Tensor, padding: torch.Tensor,
               adapters: nn.ModuleDict | None = None) -> torch.Tensor:
    """One frozen BERT layer applied to the slots alone: slot queries attend
    over [slots; words] with the layer's own weights (plus, on the slots'
    path only, `adapters`), and nothing attends to the slots, so the words'
    states stay exactly the backbone's."""
    def project(name: str, x: torch.Tensor) -> torch.Tensor:
        out = layer.get_submodule(name)(x)
        return out + adapters[name.replace(".", "_")](x) if adapters is not None else out

    attn = layer.attention.self
    heads, size = attn.num_attention_heads, attn.attention_head_size
    both = torch.cat([slots, words], 1)
    split = lambda x: x.unflatten(-1, (heads, size)).transpose(1, 2)  # noqa: E731
    attend = torch.cat([padding.new_zeros(padding.shape[0], slots.shape[1]), padding], 1)
    context = nn.functional.scaled_dot_product_attention(
        split(project("attention.self.query", slots)), split(attn.key(both)), split(attn.value(both)),
        attn_mask=~attend[:, None, None, :],
    ).transpose(1, 2).flatten(2)
    # BertSelfOutput, BertIntermediate and BertOutput, without dropout (the backbone is frozen).
    mixed = layer.attention.output.LayerNorm(project("attention.output.dense", context) + slots)
    inner = layer.intermediate.intermediate_act_fn(project("intermediate.dense", mixed))
    return layer.output.LayerNorm(project("output.dense", inner) + mixed)


class CrossThoughtModel(nn.Module):
    """N slot embeddings that read a frozen backbone + the cross layer (None:
    the masked-LM control) + the masked-word head.

    The slots enter below the first layer and pass through every layer of
    the backbone with its own weights (`read_layer`), attending to the words
    and to each other; the words never attend to the slots. The backbone is
    never trained and its word states are exactly the ones `single` pools,
    so the slots become learned readers of a geometry that stays intact, and
    one backbone pass serves both. `inline=True` is the earlier design, kept
    so indexes built with it still load: slots in front of the words, read
    by them too, through a private copy of the backbone with LoRA adapters.
    """

    def __init__(self, model: nn.Module, slots: int, cross: bool = True, ffn: int | None = None,
                 init_token: int | None = None, inline: bool = False, rank: int = 0, seed: int = 0) -> None:
        super().__init__()
        if slots < 1:
            raise ValueError(f"need at least one slot, got {slots}")
        self.n_slots, self.inline, self.rank = slots, inline, rank
        self._backbone = (model,)  # not a submodule: never trained, moved or switched to train mode here
        embeddings, layers = layer_stack(model)
        config = model.config
        dim, heads = int(config.hidden_size), int(config.num_attention_heads)
        self.ffn = ffn or dim
        # New embeddings near `init_token`'s ([CLS], whose state the backbone
        # already uses as a summary; default: the mean embedding), each nudged
        # apart so the slots can specialise. Seeded: the untrained start is
        # a fixed model that loads by name.
        noise = torch.randn(slots, dim, generator=torch.Generator().manual_seed(seed))
        table = embeddings.word_embeddings.weight
        token = torch.tensor([[init_token]], device=table.device) if init_token is not None else None
        with torch.no_grad():
            if inline:
                start = table[init_token] if token is not None else table.mean(0)
            else:
                # A frozen reader's slot enters where the first layer reads:
                # after the embedding layer's LayerNorm, as [CLS] at position 0 does.
                start = embeddings(input_ids=token)[0, 0] if token is not None else embeddings.LayerNorm(table.mean(0))
        start = start.float().cpu()
        self.slots = nn.Parameter(start.repeat(slots, 1) + 0.1 * start.std() * noise)
        # Seeded too (A is random): the untrained start is one fixed model.
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.adapters = slot_path_adapters(layers, rank) if rank and not inline else None
        self.cross = CrossLayer(dim, heads, self.ffn) if cross else None
        self.head = MaskedWordHead(embeddings.word_embeddings, heads, self.ffn)

    @property
    def backbone(self) -> nn.Module:
        return self._backbone[0]

    @property
    def heads(self) -> int:
        return self.head.layer.self_attn.num_heads

    def states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(slot states (b, N, d), word states (b, L, d)) of tokenized sequences."""
        if self.inline:
            return self._inline_states(input_ids, attention_mask)
        with torch.no_grad():
            every = self.backbone(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids),
                                  output_hidden_states=True).hidden_states
        padding = attention_mask == 0
        slots = self.slots.to(every[0].dtype).expand(len(input_ids), -1, -1)
        adapters = self.adapters if self.adapters is not None else [None] * len(every)
        for layer, words, adapter in zip(layer_stack(self.backbone)[1], every, adapters):
            slots = read_layer(layer, slots, words, padding, adapter)
        return slots, every[-1]

    def _inline_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # The words keep the positions the backbone was trained with ([CLS]
        # at 0); the slots sit in front at position 0.
        b, n = input_ids.shape[0], self.n_slots
        words = layer_stack(self.backbone)[0].word_embeddings(input_ids)
        inputs = torch.cat([self.slots.to(words.dtype).expand(b, -1, -1), words], 1)
        positions = torch.cat([torch.zeros(n, dtype=torch.long), torch.arange(input_ids.shape[1])]).to(input_ids.device)
        mask = torch.cat([attention_mask.new_ones(b, n), attention_mask], 1)
        hidden = self.backbone(
            inputs_embeds=inputs, attention_mask=mask, position_ids=positions.expand(b, -1),
            token_type_ids=torch.zeros_like(mask),
        ).last_hidden_state
        return hidden[:, :n], hidden[:, n:]

    def masked_lm_loss(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of the masked words (labels != -100) of one sample:
        the batch's sequences are the M sequences the cross layer mixes."""
        slots, words = self.states(input_ids, attention_mask)
        mixed = self.cross(slots) if self.cross is not None else slots
        where = labels != -100
        logits = self.head(mixed, words, attention_mask == 0, where)
        return nn.functional.cross_entropy(logits, labels[where])

    def logits(self, queries: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """(Mq, Mc) retrieval logits of query slot states (Mq, N, d) against
        candidates' (Mc, N, d): stage 1's inner product of the stored vectors,
        the cross layer's attention logits summed over heads and slots (the
        control: the mean over slots of their cosines)."""
        if self.cross is None:
            q, c = (nn.functional.normalize(x, dim=-1) for x in (queries, candidates))
            return torch.einsum("and,bnd->ab", q, c) / self.n_slots
        return torch.einsum("anhe,bnhe->ab", self.cross.queries(queries), self.cross.keys(candidates))

    def head_state(self) -> dict[str, torch.Tensor]:
        """Slots, cross layer and masked-word head: everything that trains."""
        return {k: v.detach().cpu() for k, v in self.state_dict().items()}


def mask_words(input_ids: torch.Tensor, maskable: torch.Tensor, mask_id: int, vocab: int, rate: float = 0.15,
               generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: `rate` of the maskable tokens become targets; of those
    80% are replaced by [MASK], 10% by a random token, 10% kept. Returns
    (inputs, labels with -100 where nothing is predicted)."""
    draw = torch.rand(input_ids.shape, generator=generator)
    target = (draw < rate) & maskable
    labels = input_ids.masked_fill(~target, -100)
    how = torch.rand(input_ids.shape, generator=generator)
    inputs = input_ids.masked_fill(target & (how < 0.8), mask_id)
    swap = target & (how >= 0.8) & (how < 0.9)
    inputs = torch.where(swap, torch.randint(vocab, input_ids.shape, generator=generator), inputs)
    return inputs, labels


def crossthought_weights(model: CrossThoughtModel, backbone: str, length: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """What `load_crossthought` reads back: the slots and W^Q, W^K in float32
    (they make the vectors), the rest of the cross layer and the masked-word
    head in float16 (only training reads them)."""
    exact = ("slots", "cross.q.weight", "cross.q.bias", "cross.k.weight")
    state = {k: (v if k in exact or k.startswith("adapters.") else v.half()) for k, v in model.head_state().items()}
    return state, model_config(model, backbone, length)


def model_config(model: CrossThoughtModel, backbone: str | None, length: int) -> dict[str, Any]:
    """What `load_crossthought` needs to rebuild a frozen reader's model."""
    return {
        "backbone": backbone, "reader": "frozen", "slots": model.n_slots, "slot_path_rank": model.rank, "sequence_tokens": length,
        "cross": model.cross is not None, "heads": model.heads, "ffn": model.ffn,
    }


UNTRAINED = "untrained"  # weights=untrained[-N]: the seeded start training begins from


def untrained(model: nn.Module, tokenizer: Any, slots: int = 5) -> tuple[CrossThoughtModel, dict[str, Any]]:
    """The model `propdex train crossthought --slots N` starts from, built
    from its seed: what training added is measured against it."""
    ct = CrossThoughtModel(model, slots, init_token=tokenizer.cls_token_id or tokenizer.bos_token_id)
    return ct.eval(), model_config(ct, None, SEQUENCE_TOKENS)


def load_crossthought(path: str | Path, model: nn.Module) -> tuple[CrossThoughtModel, dict[str, Any]]:
    """The trained model on `model` (weights of the earlier inline design:
    their adapters merged into a private copy of it)."""
    state, config = read_weights(path, "Cross-Thought weights", "train them with `propdex train crossthought`")
    inline = config.get("reader") != "frozen"
    stages = adapter_stages(config) if inline else []
    base = merged_stages(model, stages, state, path) if stages else model
    ct = CrossThoughtModel(base, config["slots"], cross=config["cross"], ffn=config["ffn"], inline=inline, rank=config.get("slot_path_rank", 0))
    result = ct.load_state_dict({k: v.float() for k, v in state.items() if not k.startswith("lora.")}, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(f"{path}: Cross-Thought weights do not fit ({(result.missing_keys + result.unexpected_keys)[:3]})")
    return ct.eval(), config
