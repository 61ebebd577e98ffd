"""Searcher: load a committed index, search it in two stages.

The facade over the pipeline, one module a stage:

- `loading`: the index's shards, manifest, encoder and BM25, checked on opening;
- `candidates` (stage 1): every query vector to every shard's ANN index,
  and a MaxSim estimate per document from the hits;
- `rescoring` (stage 2): the best candidates scored exactly from their
  stored vectors, by their best passage-sized window, and aggregated to
  documents, sentences or units;
- `hybrid`: fusion with the index's BM25, BM25 alone, and the second hop;
- `hits`: what a search returns;
- `timing`: the time each stage took, for whoever asks (`stage_times`).

Deleted documents and `where=` filters act inside stage 1 (FAISS ID
selectors over the allowed vectors), so they never crowd out the documents
that may be returned; a filter that leaves few vectors is answered exactly.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from propdex.encoders import Document
from propdex.indexer import ann, lexical

from . import candidates as stage1
from . import loading, rescoring
from .candidates import default_candidates, default_nprobe, default_rerank
from .context import CONTEXT_K, Context, context_settings, pack
from .filters import allowed_per_shard
from .hits import Hit, dense_hits
from .hybrid import FUSION_DEPTH, Lexical, LexicalMasks, fused_rows, lexical_hits, second_hop, unscored
from .loading import Shard
from .rescoring import Candidate
from .settings import LEVELS, Level, SearchSettings
from .timing import stage

if TYPE_CHECKING:
    from propdex.encoders import Encoder

__all__ = ["LEVELS", "Hit", "Level", "Searcher", "default_candidates", "default_nprobe", "default_rerank", "set_threads"]

log = logging.getLogger(__name__)

# A filter that leaves at most this many vectors is answered by re-scoring all
# of their documents, without stage 1: exact, and cheaper than a filtered ANN search.
EXACT_FILTERED_VECTORS = 50_000
Allowed = list[np.ndarray | None]  # per shard, the documents a search may return (None: all)


class Searcher:
    """A committed index, open for search: the pipeline's stages run in
    turn for each call, and nothing a call sets outlives it."""

    def __init__(self, path: Path, manifest: dict[str, Any], encoder: "Encoder", shards: list[Shard], nprobe: int | None) -> None:
        self.path = path
        self.manifest = manifest
        self.encoder = encoder
        self.shards = shards
        self._stage1 = stage1.CandidateGeneration(shards)
        if nprobe is not None and nprobe < 1:
            raise ValueError(f"nprobe must be at least 1, got {nprobe}")
        # The default (None: by the query and the lists, `default_nprobe`); search(nprobe=...) overrides it for that call only.
        self.nprobe = nprobe
        self.lists = max((ann.lists(s.index) for s in shards), default=0)
        # Documents score by their best passage-sized window unless a search says otherwise.
        self.window = encoder.passage_units
        self.vectors_per_doc = sum(int(s.store.info["vectors"]) for s in shards) / max(1, sum(len(s.store) for s in shards))
        self._bm25 = loading.open_bm25(path, manifest, shards)
        self._lexical_masks = LexicalMasks(shards)

    @property
    def bm25(self) -> lexical.BM25:
        if self._bm25 is None:
            raise ValueError(f"{self.path} has no BM25 index (built with --no-bm25, or before propdex had one); rebuild it to search with BM25")
        return self._bm25

    @property
    def lexical_search(self) -> Lexical:
        """The index's BM25 as a retriever of the documents this reader holds."""
        return Lexical(self.bm25, self.document, lambda doc_id: loading.key_of(self.shards, doc_id) is not None)

    @classmethod
    def load(
        cls, path: str | Path, *, device: str = "auto", encoder: "Encoder | None" = None, nprobe: int | None = None, mmap: bool = False,
        threads: int | None = None, runtime: str = "torch",
    ) -> "Searcher":
        """The index at `path`, ready to search. `threads` sets the process's
        FAISS and torch threads (both are process-wide): 1 where many
        searches run at once (a server), the core count for one at a time.
        `runtime` runs the query encoder's backbone (torch, onnx, onnx-int8)."""
        path = Path(path)
        if threads is not None:
            set_threads(threads)
        return loading.open_committed(path, lambda manifest: cls._open(path, manifest, device, encoder, nprobe, mmap, runtime))

    @classmethod
    def _open(cls, path: Path, manifest: dict[str, Any], device: str, encoder: "Encoder | None", nprobe: int | None, mmap: bool,
              runtime: str = "torch") -> "Searcher":
        loading.check_index(path, manifest)
        encoder = loading.query_encoder(manifest, encoder, device, runtime)
        on_gpu = encoder.backbone.device.type == "cuda"  # stage 2 decodes and multiplies where the queries are encoded
        shards = loading.open_shards(path, manifest, mmap, encoder.backbone.device if on_gpu else None)
        try:
            return cls(path, manifest, encoder, shards, nprobe)
        except BaseException:
            loading.close_shards(shards)
            raise
    # -- public API ----------------------------------------------------------------
    def search(self, query: str | Document, k: int = 10, level: Level = "doc", **options: Any) -> list[Hit]:
        return self.search_batch([query], k=k, level=level, **options)[0]

    def context(self, query: str, words: int = 200, level: Level | None = None, **options: Any) -> Context:
        """The best CONTEXT_K hits for the query packed into at most `words`
        words with a citation for every piece (retriever.context.pack);
        `options` are the search's (hybrid, hops, where...), CONTEXT_DEFAULTS
        where not given."""
        return self.contexts(query, [words], level, **options)[0]

    def contexts(self, query: str, budgets: Sequence[int], level: Level | None = None, **options: Any) -> list[Context]:
        """`context` at several budgets from one search."""
        if "k" in options:
            raise ValueError("a context is packed from the best CONTEXT_K hits: give words=, not k=")
        level, options = context_settings(level, options)
        hits = self.search(query, k=CONTEXT_K, level=level, **options)
        return [pack(hits, words, level) for words in budgets]

    def search_batch(
        self,
        queries: Sequence[str | Document],
        k: int = 10,
        level: Level = "doc",
        *,
        exclude: Sequence[set[str]] | None = None,
        within: Sequence[Sequence[str]] | None = None,
        **options: Any,
    ) -> list[list[Hit]]:
        """Search many queries. `options` are SearchSettings' (nprobe,
        candidates, rerank, hybrid, bm25, hops, window, where), checked there once;
        `exclude` = doc ids to leave out of each query's results. `within`
        skips stage 1: each query re-scores exactly the documents listed for
        it (another retriever's candidates, BM25's top 200 say); ids not in
        the index are ignored.

        `hybrid` fuses the dense ranking with the index's BM25 ranking by
        reciprocal rank fusion (retriever.fusion; each list FUSION_DEPTH deep;
        below document level a sentence or unit takes its document's BM25
        rank). `bm25` answers from BM25 alone (document level; the hit's
        sentence is the one that holds most query terms).

        `hops=2` answers multi-hop questions (document or sentence level):
        the index's BM25 is asked again with the question and the best
        document's text, and its documents take every HOP_EVERY-th place of
        the ranking (retriever.fusion.interleave), at sentence level each by
        its best sentence (`best_sentences`); their hits say `hop=2` and carry
        their BM25 score.

        `where` keeps the documents whose metadata meets every condition
        (retriever.filters): `{"year": {">=": 2020}, "source": ["arxiv",
        "pmc"], "path": {"prefix": "/notes/"}, "team": {"!=": "web"}}`; a
        field holding a list matches any of its elements. It acts before
        aggregation, so k matching documents give k hits.

        `window` bounds what a multi-vector query matches: a document scores
        as its best window of consecutive sentences holding at most this
        many vectors. The default is the encoder's passage (`self.window`,
        254 token vectors for `tokens` on MiniLM), since whole-document
        MaxSim ranks long documents first; `window=0` scores whole documents."""
        settings = SearchSettings.of(k=k, level=level, **options)
        for q in queries:
            if not _text(q).strip():
                raise ValueError("empty query")
        if within is not None and len(within) != len(queries):
            raise ValueError(f"within lists {len(within)} candidate sets for {len(queries)} queries")
        allowed = allowed_per_shard(self.shards, settings.where)
        encoded = None if settings.bm25 or not self.shards else _encode(self.encoder, queries)
        results = self._search(queries, settings, exclude, within, allowed, encoded)
        if settings.hops == 2:  # the second hop scores its documents with the vectors the first hop encoded
            results = [self._second_hop(q, hits, settings, exclude[qi] if exclude else set(), allowed, None if encoded is None else encoded[qi])
                       for qi, (q, hits) in enumerate(zip(queries, results))]
        return results

    def best_sentences(self, query: str | Document, doc_ids: Sequence[str], *, skip: set[str] = frozenset(),
                       window: int | None = None, vectors: np.ndarray | None = None) -> list[Hit]:
        """Each of these documents' best sentence for the query, scored exactly
        as `level="sentence"` scores it, in the order the ids are given (ids
        the index does not hold, or `skip`s, are left out): what a second hop
        offers at sentence level, here and in eval (`vectors`: the query's, if encoded)."""
        if not doc_ids:
            return []
        settings = SearchSettings(k=len(doc_ids), level="doc", window=window)
        found = {h.doc_id: h for h in self._search([query], settings, [set(skip)], [list(doc_ids)], [None] * len(self.shards),
                                                   None if vectors is None else [vectors])[0]}
        # A document-level hit already names its best sentence; at sentence level its text is that sentence.
        return [replace(found[d], text=found[d].sentence_text, passage=(found[d].sentence_index,) * 2) for d in doc_ids if d in found]

    def document(self, doc_id: str) -> Document | None:
        """The live document with this id, or None."""
        key = loading.key_of(self.shards, doc_id)
        return None if key is None else loading.document_at(self.shards, key)

    def close(self) -> None:
        self._stage1.close()
        loading.close_shards(self.shards)

    def __enter__(self) -> "Searcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the pipeline --------------------------------------------------------------------
    def _search(self, queries: Sequence[str | Document], st: SearchSettings, exclude: Sequence[set[str]] | None,
                within: Sequence[Sequence[str] | np.ndarray] | None, allowed: Allowed,
                encoded: list[np.ndarray] | None = None) -> list[list[Hit]]:
        """One hop of a batch: BM25 alone, or the two dense stages (over
        `within`'s documents only, where given) and their fusion with BM25;
        `encoded`: the queries' vectors, where they are encoded already."""
        skips = [exclude[qi] if exclude else set() for qi in range(len(queries))]
        if st.bm25:
            return [lexical_hits(self.lexical_search, _text(q), st.k, skip, self._lexical_mask(allowed, st.where))
                    for q, skip in zip(queries, skips)]
        if not self.shards:
            return [[] for _ in queries]
        encoded = _encode(self.encoder, queries) if encoded is None else encoded
        depths = stage1.Depths.of(st, max(len(q) for q in encoded), self.vectors_per_doc, self.nprobe, self.lists,
                                  self.encoder.pooled_tokens)
        masks = [shard.vector_mask(a) for shard, a in zip(self.shards, allowed)]
        if within is None and st.where is not None and stage1.allowed_vectors(masks) <= EXACT_FILTERED_VECTORS:
            # Few vectors pass the filter: re-score every one of their documents.
            within = [stage1.allowed_keys(self.shards, allowed)] * len(queries)
        if within is None:
            with stage("stage 1"):  # one ANN call for the batch
                hits = self._stage1.search(np.concatenate(encoded), depths.per_vector, depths.nprobe, masks)
        results = []
        start = 0
        for qi, q in enumerate(encoded):
            rows, start = slice(start, start + len(q)), start + len(q)
            skip = skips[qi]
            # One query vector's best window holds its best unit: windows change nothing there.
            window = self._window(st) if len(q) > 1 else None
            if within is None:
                with stage("stage 1"):
                    chosen, hit = self._stage1.candidates(q, stage1.query_rows(hits, rows), depths.rescored + len(skip), st.k + len(skip),
                                                          depths.per_vector, masks, window)
                with stage("stage 2"):
                    cands = self._rescore(q, chosen, depths.rescored, skip, first=depths.first, window=window,
                                          hit=None if st.all_windows else hit)
            else:
                chosen = within[qi] if isinstance(within[qi], np.ndarray) else loading.locate(self.shards, within[qi], allowed)
                with stage("stage 2"):
                    cands = self._rescore(q, chosen, len(chosen), skip, window=window)
            if st.hybrid:
                with stage("fusion"):
                    results.append(self._hybrid(_text(queries[qi]), q, cands, st, skip, allowed, window))
            else:
                with stage("aggregate"):
                    results.append(dense_hits(self.shards, cands, rescoring.rows(cands, st.k, st.level), st.level, self._window(st)))
        return results

    def _window(self, st: SearchSettings) -> int | None:
        """The window a document is scored and shown by (None: the whole document)."""
        return self.window if st.window is None else st.window or None

    def _rescore(self, q: np.ndarray, chosen: np.ndarray, n: int, skip: set[str], first: int | None = None,
                 window: int | None = None, hit: dict[int, np.ndarray] | None = None) -> list[Candidate]:
        return rescoring.rescore(self.shards, q, chosen, n, skip, blocks=self.encoder.attention_blocks, first=first, window=window,
                                 hit=hit)

    def _hybrid(self, text: str, q: np.ndarray, cands: list[Candidate], st: SearchSettings, skip: set[str], allowed: Allowed,
                window: int | None) -> list[Hit]:
        """The dense candidates' rows fused with BM25's run (hybrid.fused_rows), as hits."""
        depth = max(st.k, FUSION_DEPTH)
        lexical_run = self.bm25.search(text, depth, exclude=skip, mask=self._lexical_mask(allowed, st.where))
        if st.level != "doc":
            missing = unscored(lexical_run, (self._doc_id(c) for c in cands), st.k)
            if missing:
                cands += self._rescore(q, loading.locate(self.shards, missing, allowed), len(missing), skip, window=window)

        def rescore(doc_ids: list[str]) -> list[str]:
            extra = self._rescore(q, loading.locate(self.shards, doc_ids), len(doc_ids), skip, window=window)
            cands.extend(extra)
            return [self._doc_id(c) for c in extra]

        doc_of = [self._doc_id(c) for c in cands]
        chosen = fused_rows(rescoring.rows(cands, depth, st.level), doc_of, lexical_run, st.level, st.k, st.fusion, rescore)
        return dense_hits(self.shards, cands, chosen, st.level, self._window(st))

    def _second_hop(self, query: str | Document, hits: list[Hit], st: SearchSettings, skip: set[str], allowed: Allowed, vectors: Any) -> list[Hit]:
        if not hits:
            return hits
        return second_hop(self.lexical_search, _text(query), hits, st.k, st.level, skip, self._lexical_mask(allowed, st.where),
                          lambda doc_ids: self.best_sentences(query, doc_ids, skip=skip, window=st.window, vectors=vectors))

    def _lexical_mask(self, allowed: Allowed, where: object) -> np.ndarray | None:
        """Which of BM25's documents pass `where` (None: no filter)."""
        return self._lexical_masks.mask(lambda: self.bm25, allowed, where)

    def _doc_id(self, c: Candidate) -> str:
        return self.shards[c.shard].store.doc_id(c.ordinal)


def set_threads(n: int) -> None:
    """FAISS's and torch's threads for this process."""
    import torch

    ann.set_threads(n)
    torch.set_num_threads(n)


def _text(query: str | Document) -> str:
    return query.text if isinstance(query, Document) else query


def _encode(encoder: "Encoder", queries: Sequence[str | Document]) -> list[np.ndarray]:
    _warn_about(encoder, queries)
    with stage("encode"):
        return [e.vectors for e in encoder.encode_queries(list(queries))]


def _warn_about(encoder: "Encoder", queries: Sequence[str | Document]) -> None:
    """Say what the dense search cannot read of a query: one the vocabulary
    cannot spell (every word-piece [UNK], e.g. Chinese for an English model)
    still gets answers that mean nothing; one longer than the encoder reads
    is cut (one line for a batch)."""
    tokenizer, limit, long = encoder.backbone.tokenizer, encoder.query_length, []
    for q in queries:
        ids = tokenizer(_text(q), add_special_tokens=False, verbose=False)["input_ids"]
        if ids and all(i == tokenizer.unk_token_id for i in ids):
            log.warning("query %r is unknown to the backbone's vocabulary (all [UNK]): its dense results carry no meaning", _text(q)[:80])
        if len(ids) > limit:
            long.append(len(ids))
    if long:
        which = f"query {_text(queries[0])[:60]!r}... is" if len(queries) == 1 else f"{len(long)} of {len(queries)} queries are"
        log.warning("%s longer than the %d word pieces the encoder reads (up to %d): the dense search reads each to there",
                    which, limit, max(long))
