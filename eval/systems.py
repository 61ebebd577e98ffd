"""The grammar of an eval system: what a spec such as `tokens+bm25:hops=2` names.

A system is `bm25` or an encoder name with index options, e.g.
`tokens:factory=Flat`, `single:mask=1` (PropSegment: pool under the
proposition mask instead of reading the proposition text), `title=0` (leave
titles out), and search options (`nprobe=64`, `window=0`, `hops=2`).
`A+bm25` is A searched with `--hybrid` (`fusion=minmax` on the last part
picks the method). Two options are eval's alone: `pool=N` re-ranks exactly
BM25's top N per query and `exact=1` ranks every document by float32 MaxSim (eval.exact). The grammar
lives apart from the runner so that other tasks (eval.rr) can name the same
encoders the same way without importing the runner.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from propdex.encoders import ENCODERS, Document, flag, load_encoder
from propdex.encoders.spec import split_spec
from propdex.indexer.settings import IndexSettings
from propdex.retriever.settings import SearchSettings

from .datasets import Task

if TYPE_CHECKING:
    from propdex.encoders import Backbone, Encoder

# A system's search options are the search's own (SearchSettings: nprobe,
# window, hops, fusion, ...) less those the grammar spells itself (`+bm25` is
# hybrid) or eval sets (k, level); they change how an index is searched, not
# the index, whose build is reused. Two more are eval's: pool=N re-ranks
# exactly BM25's top N per query (`within`), exact=1 scans every document's vectors.
SEARCH_OPTIONS = tuple(f.name for f in fields(SearchSettings) if f.name not in ("k", "level", "hybrid", "bm25", "where"))
EVAL_OPTIONS = ("pool", "exact")
# A system's index options: how its index is built (IndexSettings), and the
# backbone's runtime; the rest of its options are the encoder's.
INDEX_OPTIONS = (*(f.name for f in fields(IndexSettings)), "runtime")
SPEC_GRAMMAR = "NAME[:option=value...][+bm25][:hops=2][:fusion=rrf|minmax]"
_SYSTEM_NAMES = {"bm25", *ENCODERS}


def split_systems(text: str) -> list[str]:
    """The systems of a comma-separated list. A FAISS factory holds commas of
    its own (`tokens:factory=IVF4096,PQ64,single`): a piece that has no
    option and names no system continues the factory before it."""
    out: list[str] = []
    for piece in (p for p in text.split(",") if p):
        head = piece.split("+")[0]
        if out and ":" not in head and head not in _SYSTEM_NAMES and out[-1].split("+")[-1].split(":")[-1].startswith("factory="):
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


@dataclass
class System:
    label: str
    name: str
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> "System":
        return cls(spec, *split_spec(spec, "system"))

    def titles(self) -> bool:
        """Does this system read documents' titles (default yes; `title=0` off)?"""
        return flag(self.options.get("title", True))

    def mask_aware(self) -> bool:
        """Does this system see a proposition as a mask inside its sentence?"""
        return flag(self.options.get("mask", self.name not in ("bm25", "single")))

    def search_options(self) -> dict[str, str]:
        return {k: v for k, v in self.options.items() if k in SEARCH_OPTIONS}


@dataclass(frozen=True)
class Pipeline:
    """What one eval system runs: a dense system or `bm25`, searched with
    `options`; `A+bm25` is the dense A searched with hybrid=True, the
    search's options (hops=, fusion=) written on its last part."""

    system: System
    hybrid: bool
    options: dict[str, str]

    @classmethod
    def parse(cls, spec: str) -> "Pipeline":
        parts = [System.parse(p) for p in spec.split("+")]
        options = {k: v for part in parts for k, v in part.search_options().items()}
        if len(parts) == 1:
            return cls(parts[0], False, options)
        dense, lexical_part = parts[0], parts[-1]
        if len(parts) != 2 or dense.name == "bm25" or lexical_part.name != "bm25" or set(lexical_part.options) - set(SEARCH_OPTIONS):
            raise ValueError(f"system spec {spec!r}: a fusion is what `search --hybrid` runs, one dense system and the "
                             f"index's own BM25 (grammar: {SPEC_GRAMMAR})")
        return cls(dense, True, options)

    def settings(self, k: int, level: str) -> SearchSettings:
        """The search this system runs, checked as the search checks it."""
        if "fusion" in self.options and not self.hybrid:
            raise ValueError(f"system spec {self.system.label!r}: fusion= needs systems to fuse (grammar: {SPEC_GRAMMAR})")
        return SearchSettings.of(k=k, level=level, hybrid=self.hybrid, bm25=self.system.name == "bm25", **self.options)


def corpus_for(task: Task, system: System) -> list[Document]:
    """What a system indexes: masked propositions, or their plain text."""
    if not task.prop_text or system.mask_aware():
        return task.corpus
    return [Document(d.id, task.index_text(d), d.title, ((0, len(task.index_text(d))),)) for d in task.corpus]


def queries_for(task: Task, system: System) -> list[str | Document]:
    return [q.doc if (q.doc is not None and system.mask_aware()) else q.text for q in task.queries]


def system_encoder(system: System, backbone: "Backbone") -> "Encoder":
    """The encoder a system spec names, with its encoder options (index and
    search options stay out)."""
    options: dict[str, Any] = {k: v for k, v in system.options.items() if k not in ("mask", *INDEX_OPTIONS, *SEARCH_OPTIONS, *EVAL_OPTIONS)}
    if "keep_punct" in options:
        options["drop_punct"] = options.pop("keep_punct") not in ("1", "true", "yes")
    return load_encoder(system.name, backbone=backbone, **options)
