"""Nugget reconstruction: how much of a passage its nuggets keep, and which tokens they are.

Held-out Wikipedia passages (wiki_70 .. wiki_99) are encoded into nuggets at
each ratio r and decoded greedily by the AE decoder; sacreBLEU against the
passage as the tokenizer sees it (lower-cased wordpieces joined back). The
chosen tokens are counted by class, beside the share of each class among all
tokens, as the paper's Figure 5 does.
"""
from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from propdex.encoders import WEIGHTS
from propdex.encoders.text import is_wordlike

# English function words: determiners, pronouns, prepositions, conjunctions, auxiliaries.
FUNCTION_WORDS = frozenset("""
a an the this that these those some any each every no my your his her its our their
i you he she it we they me him us them who whom whose which what
of in on at by for with from to into onto over under about after before between through during
without within along across against among around behind beyond near since until upon via as than
and or but nor so yet if because while although though whereas unless whether
is are was were be been being am has have had do does did will would shall should can could may might must
not also there here then
""".split())


def token_class(token: str, special: bool) -> str:
    if special:
        return "special"
    if not is_wordlike(token):
        return "punctuation"
    if token.lower() in FUNCTION_WORDS:
        return "function word"
    return "other"


def evaluate_reconstruction(folder: str | Path, ratios: list[float], weights: str | Path = WEIGHTS / "nugget-ae",
                            n: int = 256, max_words: int = 90, batch: int = 32, device: str = "auto") -> dict[str, Any]:
    try:
        import sacrebleu
    except ImportError as e:
        raise ValueError("reconstruction BLEU needs sacrebleu: pip install -e '.[eval]'") from e

    from propdex.encoders.backbone import Backbone
    from propdex.encoders.nugget import load_nugget
    from propdex.encoders.training.nugget import wiki_passages

    bb = Backbone.load(device=device)
    nugget, decoder, config = load_nugget(weights, bb.model, with_decoder=True)
    nugget.to(bb.device)
    decoder.to(bb.device)  # type: ignore[union-attr]
    tok = bb.tokenizer
    texts = wiki_passages(folder, "heldout", n, max_words, seed=1)
    max_length = int(config.get("max_length", 128))
    out: dict[str, Any] = {"weights": str(weights), "passages": len(texts), "max_words": max_words, "decoding": "greedy", "ratios": {}}
    all_tokens: Counter[str] = Counter()
    for r in ratios:
        started = time.time()
        hyps, refs = [], []
        chosen: Counter[str] = Counter()
        chosen_classes: Counter[str] = Counter()
        classes: Counter[str] = Counter()
        n_chosen = n_real = 0
        for i in range(0, len(texts), batch):
            enc = tok(texts[i : i + batch], padding=True, truncation=True, max_length=max_length, return_tensors="pt",
                      return_special_tokens_mask=True)
            special = enc.pop("special_tokens_mask").bool()
            enc = {k: v.to(bb.device) for k, v in enc.items()}
            with torch.inference_mode():
                nug = nugget(**enc, ratio=r)
                generated = decoder.generate(nug.vectors, nug.valid, tok.cls_token_id, tok.sep_token_id,  # type: ignore[union-attr]
                                             max_new=max_length - 1)
            for row in range(len(generated)):
                length = int(enc["attention_mask"][row].sum())
                ids = enc["input_ids"][row, :length].tolist()
                hyps.append(tok.decode(generated[row], skip_special_tokens=True))
                refs.append(tok.decode(ids, skip_special_tokens=True))
                pieces = tok.convert_ids_to_tokens(ids)
                for j, piece in enumerate(pieces):
                    cls = token_class(piece, bool(special[row, j]))
                    classes[cls] += 1
                    if r == ratios[0]:
                        all_tokens[piece] += 1
                    if nug.chosen[row, j]:
                        chosen[piece] += 1
                        chosen_classes[cls] += 1
                n_chosen += int(nug.chosen[row].sum())
                n_real += length
        out["ratios"][str(r)] = {
            "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
            "nuggets_per_passage": round(n_chosen / len(texts), 2),
            "tokens_per_passage": round(n_real / len(texts), 2),
            "chosen_share": {c: round(chosen_classes[c] / max(n_chosen, 1), 4) for c in sorted(classes)},
            "all_share": {c: round(classes[c] / max(n_real, 1), 4) for c in sorted(classes)},
            "top_chosen": chosen.most_common(10),
            "examples": [{"reference": refs[k], "decoded": hyps[k]} for k in range(2)],
            "seconds": round(time.time() - started, 1),
        }
    out["top_tokens_overall"] = all_tokens.most_common(10)
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = ["| r | BLEU | nuggets / passage | chosen: special / punct. / function / other | all tokens: special / punct. / function / other | most chosen |",
             "|---|---|---|---|---|---|"]
    order = ("special", "punctuation", "function word", "other")
    for r, s in result["ratios"].items():
        chosen = " / ".join(f"{100 * s['chosen_share'].get(c, 0):.1f}" for c in order)
        every = " / ".join(f"{100 * s['all_share'].get(c, 0):.1f}" for c in order)
        top = ", ".join(f"`{t}`" for t, _ in s["top_chosen"][:6])
        lines.append(f"| {r} | {s['bleu']:.2f} | {s['nuggets_per_passage']} | {chosen} | {every} | {top} |")
    return "\n".join(lines)
