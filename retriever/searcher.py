"""Searcher: load a committed index, search it in two stages.

Stage 1 sends every query vector to every shard's ANN index (shards in
parallel) and estimates a MaxSim score per candidate document from the hits.
Stage 2 re-scores the best candidates exactly from their stored vectors
(MaxSim, or Cross-Thought's attention over the candidates) and aggregates to
the level asked for: document, sentence or unit. Both stages score a
document by its best window of about a passage (`window`), as ColBERT
retrieves passages: MaxSim over a whole article grows with its length.

Deleted documents and `where=` filters act inside stage 1 (FAISS ID
selectors over the allowed vectors), so they never crowd out the documents
that may be returned; a filter that leaves few vectors is answered exactly.
"""
from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lmdb
import numpy as np

from propdex.encoders import Document, encoder_from_config, recorded_config
from propdex.indexer import ann, integrity, lexical
from propdex.indexer.manifest import read_manifest
from propdex.indexer.store import ShardStore, read_deleted

from . import filters, fusion, scoring
from .context import CONTEXT_K, Context, context_settings, pack
from .hits import Hit, lexical_hit, passage_text, sentences_of
from .hybrid import FUSION_DEPTH, Lexical, fuse_with_lexical, hop_order
from .settings import LEVELS, Level, SearchSettings  # noqa: F401 (LEVELS: re-exported)

if TYPE_CHECKING:
    from propdex.encoders import Encoder

log = logging.getLogger(__name__)

# A filter that leaves at most this many vectors is answered by re-scoring all of them.
EXACT_FILTERED_VECTORS = 50_000
Where = Mapping[str, Any]


@dataclass
class _Shard:
    name: str
    store: ShardStore
    index: Any  # faiss.Index or ann.HnswIndex
    live: np.ndarray | None = None  # bool per document; None: none is deleted
    rotate: Any = None  # store="codes" behind OPQ: stage 2 scores rotated queries against codes decoded in the rotated space

    def vector_mask(self, docs: np.ndarray) -> np.ndarray:
        """Per vector, whether its document is in the bool mask `docs`."""
        return np.repeat(docs, np.diff(self.store.offsets))


@dataclass
class _Candidate:
    """One re-scored document: exact similarities of every query vector to its units."""

    shard: int
    ordinal: int
    sim: np.ndarray  # (m, n) float32
    unit_sentences: np.ndarray  # (n, 2)
    score: float
    tier: int = 0  # 1: past stage 1's first `rerank` documents, ranked after them

    def sentence_scores(self) -> np.ndarray:
        """MaxSim per sentence of the document (-inf where it has no unit)."""
        n = int(self.unit_sentences[:, 1].max()) + 1 if len(self.unit_sentences) else 0
        return scoring.sentence_scores(self.sim, self.unit_sentences, n)


class Searcher:
    def __init__(self, path: Path, manifest: dict[str, Any], encoder: "Encoder", shards: list[_Shard], nprobe: int | None) -> None:
        self.path = path
        self.manifest = manifest
        self.encoder = encoder
        self.shards = shards
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(len(shards), os.cpu_count() or 1)))
        if nprobe is not None and nprobe < 1:
            raise ValueError(f"nprobe must be at least 1, got {nprobe}")
        # The default (None: by the query and the lists, `default_nprobe`); search(nprobe=...) overrides it for that call only.
        self.nprobe = nprobe
        self.lists = max((ann.lists(s.index) for s in shards), default=0)
        # Documents score by their best passage-sized window unless a search says otherwise.
        self.window = encoder.passage_units
        self.vectors_per_doc = sum(int(s.store.info["vectors"]) for s in shards) / max(1, sum(len(s.store) for s in shards))
        info = manifest.get("lexical")
        # Loaded (memory-mapped) now, not on first use: a writer's later
        # commit replaces it, and this reader keeps the view it opened.
        self._bm25 = lexical.BM25.load(path / info["dir"]) if info else None
        self._bm25_masks: dict[str, np.ndarray] = {}
        self._bm25_lock = threading.Lock()

    @property
    def bm25(self) -> lexical.BM25:
        if self._bm25 is None:
            raise ValueError(f"{self.path} has no BM25 index (built with --no-bm25, or before propdex had one); rebuild it to search with BM25")
        return self._bm25

    @property
    def lexical_search(self) -> Lexical:
        """The index's BM25 as a retriever of the documents this reader holds."""
        return Lexical(self.bm25, self.document, lambda doc_id: self._key(doc_id) is not None)

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
        for attempt in range(3):
            manifest = read_manifest(path)
            try:
                return cls._open(path, manifest, device, encoder, nprobe, mmap, runtime)
            except (ValueError, OSError, lmdb.Error):
                # A writer committed while this reader opened the files of the
                # commit before, and removed some: open the new commit instead.
                if attempt == 2 or read_manifest(path) == manifest:
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def _open(cls, path: Path, manifest: dict[str, Any], device: str, encoder: "Encoder | None", nprobe: int | None, mmap: bool,
              runtime: str = "torch") -> "Searcher":
        problems = integrity.check(path, manifest)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ValueError(f"index {path} is damaged: {problems[0]}{more}; `propdex verify {path}` lists every problem")
        if manifest["status"] != "complete":
            log.warning("index %s is not complete (%s): searching its finished shards only; re-run the build to finish it", path, manifest["status"])
        if encoder is None:
            encoder = encoder_from_config(manifest["encoder"], device=device, runtime=runtime)
        if encoder.config() != recorded_config(manifest["encoder"]):
            raise ValueError(f"encoder {encoder.config()} does not match the index's {manifest['encoder']}")
        if encoder.backbone.weights_hash != manifest["backbone"]["weights_sha256"]:
            raise ValueError(f"backbone {encoder.backbone.name!r} here has other weights than the index was built with")
        shards: list[_Shard] = []
        codec = decoding = None  # the trained index that standalone codes are read through, and decoded by: once, for every shard
        try:
            for s in manifest["shards"]:
                if s["index"] is None:
                    continue
                store = ShardStore(path / s["name"])
                shards.append(_Shard(s["name"], store, None))
                file = path / s["name"] / s["index"]
                codes = ann.read_codes(file) if ann.holds_codes(file) else None
                if codes is not None:
                    if codec is None:
                        codec = ann.read_faiss(path / manifest["index"]["trained"])
                        decoding = ann.decoding_codec(codec)  # one pair codebook for every shard's stage 2
                    index = ann.index_from_codes(codec, codes)
                else:
                    index = ann.read_shard_index(file, store.dim, s["vectors"], mmap)
                counts = (len(store), int(store.info["vectors"]), index.ntotal)
                if counts != (s["docs"], s["vectors"], s["vectors"]):
                    raise ValueError(f"index {path} is damaged: {s['name']} holds {counts[0]} documents, {counts[1]} stored and "
                                     f"{counts[2]} indexed vectors, its manifest {s['docs']} and {s['vectors']}")
                shards[-1].index = index
                if not store.has_vectors:  # store="codes": stage 2 decodes the index's codes
                    # Standalone codes decode through their codec; stage 1 may scan them in another layout.
                    store.decoder, shards[-1].rotate = ann.scoring_decoder(index if codes is None else decoding, codes,
                                                                           manifest["index"].get("vector_norm"))
                if s.get("deleted"):
                    shards[-1].live = np.ones(len(store), dtype=bool)
                    shards[-1].live[read_deleted(path / s["name"] / s["deleted"])] = False
            return cls(path, manifest, encoder, shards, nprobe)
        except BaseException:
            for shard in shards:
                shard.store.close()
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
        allowed = self._allowed(settings.where)
        results = self._search(queries, settings, exclude, within, allowed)
        if settings.hops == 2:
            results = [self._second_hop(q, hits, settings, exclude[qi] if exclude else set(), allowed)
                       for qi, (q, hits) in enumerate(zip(queries, results))]
        return results

    def _search(self, queries: Sequence[str | Document], st: SearchSettings, exclude: Sequence[set[str]] | None,
                within: Sequence[Sequence[str]] | None, allowed: list[np.ndarray | None]) -> list[list[Hit]]:
        k, level, where = st.k, st.level, st.where
        search_window = self.window if st.window is None else st.window or None
        if st.bm25:
            return [self._lexical_hits(_text(q), k, exclude[qi] if exclude else set(), allowed, where) for qi, q in enumerate(queries)]
        if not self.shards:
            return [[] for _ in queries]
        self._warn_unknown(queries)
        encoded = self.encoder.encode_queries(list(queries))
        sizes = [len(e.vectors) for e in encoded]
        depth = max(k, FUSION_DEPTH) if st.hybrid else k
        first = st.rerank or default_rerank(max(sizes))
        n_rerank = max(first, 2 * k)
        per_vector = st.candidates or default_candidates(k, max(sizes), n_rerank, self.vectors_per_doc)
        filtered = [self._vector_mask(s, a) for s, a in zip(self.shards, allowed)]
        if within is None and where is not None and sum(int(m.sum()) for m in filtered if m is not None) <= EXACT_FILTERED_VECTORS:
            # Few vectors pass the filter: re-score every one of their documents.
            within = [self._keys_allowed(allowed)] * len(queries)
        if within is None:
            nprobe = st.nprobe or self.nprobe or default_nprobe(max(sizes), self.lists)
            hits = self._stage1(np.concatenate([e.vectors for e in encoded]), per_vector, nprobe, filtered)  # one ANN call for the batch
        results = []
        start = 0
        for qi, e in enumerate(encoded):
            rows = slice(start, start + sizes[qi])
            start += sizes[qi]
            skip = exclude[qi] if exclude else set()
            # One query vector's best window holds its best unit: windows change nothing there.
            window = search_window if len(e.vectors) > 1 else None
            if within is None:
                chosen = self._candidates(len(e.vectors), [(s, *(part[rows] for part in h)) for s, h in enumerate(hits)],
                                          n_rerank + len(skip), window)
                if len(chosen) < k + len(skip) and any(m is not None for m in filtered):
                    # The probed lists held too few allowed vectors: probe them all.
                    wide = self._stage1(e.vectors, per_vector, 1 << 30, filtered)
                    chosen = self._candidates(len(e.vectors), [(sh, *h) for sh, h in enumerate(wide)], n_rerank + len(skip), window)
            elif isinstance(within[qi], np.ndarray):
                chosen = within[qi]
            else:
                chosen = self._locate(within[qi], allowed)
            cands = (self._stage2(e.vectors, chosen, n_rerank, skip, first, window=window) if within is None
                     else self._stage2(e.vectors, chosen, len(chosen), skip, window=window))
            if not st.hybrid:
                results.append(self._hits(cands, self._rows(cands, k, level), level, search_window))
                continue
            lexical_run = self.bm25.search(_text(queries[qi]), depth, exclude=skip, mask=self._bm25_mask(allowed, where))
            lexical_ranking = [d for d, _ in lexical_run]
            if level != "doc":
                # Sentences of BM25's best documents must be there to be fused.
                have = {self._doc_id(c) for c in cands}
                missing = [d for d in lexical_ranking[:k] if d not in have]
                if missing:
                    cands += self._stage2(e.vectors, self._locate(missing, allowed), len(missing), skip, window=window)
            results.append(self._fused(cands, self._rows(cands, depth, level), lexical_run, e.vectors, st, skip, window, search_window))
        return results

    def _fused(self, cands: list["_Candidate"], rows: list[tuple[float, int, int]], lexical_run: list[tuple[str, float]],
               q: np.ndarray, st: SearchSettings, skip: set[str], window: int | None = None,
               passage_window: int | None = None) -> list[Hit]:
        """The dense rows fused with BM25's document run (hybrid.fuse_with_lexical); the hits of the best k."""
        doc_of = [self._doc_id(c) for c in cands]
        if st.level == "doc":
            fused = fuse_with_lexical([(doc_of[ci], score) for score, ci, _ in rows], lexical_run, None, st.fusion)[:st.k]
            by_doc = {doc_of[ci]: (ci, j) for _, ci, j in rows}
            missing = [d for d, _ in fused if d not in by_doc]
            if missing:  # BM25's finds the dense side never scored: score them now, for their sentence
                extra = self._stage2(q, self._locate(missing), len(missing), skip, window=window)
                for c in extra:
                    cands.append(c)
                    by_doc[self._doc_id(c)] = (len(cands) - 1, 0)
            chosen = [(score, *by_doc[d]) for d, score in fused if d in by_doc]
        else:
            fused = fuse_with_lexical([((ci, j), score) for score, ci, j in rows], lexical_run, lambda key: doc_of[key[0]], st.fusion)
            chosen = [(score, ci, j) for (ci, j), score in fused[:st.k]]
        return self._hits(cands, chosen, st.level, passage_window)

    def _lexical_hits(self, query: str, k: int, skip: set[str], allowed: list[np.ndarray | None], where: Where | None) -> list[Hit]:
        terms = set(lexical.analyze(query))
        ranked = self._lexical_ranking(query, k, skip, allowed, where)
        return [self._bm25_hit(rank, doc_id, score, terms) for rank, (doc_id, score) in enumerate(ranked, start=1)]

    def _lexical_ranking(self, query: str, k: int, skip: set[str], allowed: list[np.ndarray | None],
                         where: Where | None) -> list[tuple[str, float]]:
        return self.lexical_search.ranking(query, k, skip, self._bm25_mask(allowed, where))

    def _bm25_hit(self, rank: int, doc_id: str, score: float, terms: set[str]) -> Hit:
        key = self._key(doc_id)
        assert key is not None
        return lexical_hit(rank, self.shards[key >> 32].store.document(key & 0xFFFFFFFF), score, terms)

    def _warn_unknown(self, queries: Sequence[str | Document]) -> None:
        """A query the vocabulary cannot spell (every word-piece [UNK], e.g.
        Chinese for an English model) still gets answers: say they mean nothing."""
        tokenizer = self.encoder.backbone.tokenizer
        for q in queries:
            ids = tokenizer(_text(q), add_special_tokens=False)["input_ids"]
            if ids and all(i == tokenizer.unk_token_id for i in ids):
                log.warning("query %r is unknown to the backbone's vocabulary (all [UNK]): its dense results carry no meaning", _text(q)[:80])

    def _second_hop(self, query: str | Document, hits: list[Hit], st: SearchSettings, skip: set[str],
                    allowed: list[np.ndarray | None]) -> list[Hit]:
        if not hits:
            return hits
        seed = hits[0].doc_id
        second = dict(self.lexical_search.hop(_text(query), seed, st.k + 1, skip, self._bm25_mask(allowed, st.where)))
        if st.level == "sentence":
            # A hop document offers its best sentence for the question, in BM25's order, and keeps its BM25 score.
            offered = {(h.doc_id, h.sentence_index): replace(h, score=second[h.doc_id], hop=2)
                       for h in self.best_sentences(query, list(second), skip=skip, window=st.window)}
            first = {(h.doc_id, h.sentence_index): h for h in hits}
            return [replace(first.get(key) or offered[key], rank=rank)
                    for rank, key in enumerate(hop_order(list(first), list(offered), st.k), start=1)]
        first = {h.doc_id: h for h in hits}
        seed_doc = self.document(seed)
        assert seed_doc is not None  # a hit comes from a shard
        terms = set(lexical.analyze(fusion.hop_query(_text(query), seed_doc.text)))
        # Hits are built only for the second hop's documents that get a place.
        return [replace(first[d], rank=rank, hop=1) if d in first else replace(self._bm25_hit(rank, d, second[d], terms), hop=2)
                for rank, d in enumerate(hop_order(list(first), list(second), st.k), start=1)]

    def best_sentences(self, query: str | Document, doc_ids: Sequence[str], *, skip: set[str] = frozenset(),
                       window: int | None = None) -> list[Hit]:
        """Each of these documents' best sentence for the query, scored exactly
        as `level="sentence"` scores it, in the order the ids are given (ids
        the index does not hold, or `skip`s, are left out): what a second hop
        offers at sentence level, here and in eval."""
        if not doc_ids:
            return []
        settings = SearchSettings(k=len(doc_ids), level="doc", window=window)
        found = {h.doc_id: h for h in self._search([query], settings, [set(skip)], [list(doc_ids)], [None] * len(self.shards))[0]}
        # A document-level hit already names its best sentence; at sentence level its text is that sentence.
        return [replace(found[d], text=found[d].sentence_text, passage=(found[d].sentence_index,) * 2) for d in doc_ids if d in found]

    def document(self, doc_id: str) -> Document | None:
        """The live document with this id, or None."""
        key = self._key(doc_id)
        return None if key is None else self.shards[key >> 32].store.document(key & 0xFFFFFFFF)

    def _doc_id(self, c: "_Candidate") -> str:
        return self.shards[c.shard].store.document(c.ordinal).id

    # -- stage 1 ---------------------------------------------------------------------
    def _stage1(self, vectors: np.ndarray, per_vector: int, nprobe: int,
                masks: list[np.ndarray | None]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per shard: (scores, document ordinals, positions in the document)
        of each query vector's ANN hits among the vectors its mask allows
        (None: all)."""

        def one(shard: _Shard, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            n = min(per_vector, shard.index.ntotal if mask is None else int(mask.sum()))
            if n == 0:
                empty = np.zeros((len(vectors), 0), np.int64)
                return np.zeros((len(vectors), 0), np.float32), empty, empty
            scores, ids = ann.search(shard.index, vectors, n, nprobe, mask)
            valid = ids >= 0
            docs = np.where(valid, shard.store.doc_of_vectors(np.where(valid, ids, 0)), -1)
            at = np.where(valid, ids - shard.store.offsets[np.maximum(docs, 0)], -1)
            return np.where(valid, scores, -np.inf).astype(np.float32), docs, at

        return list(self._pool.map(one, self.shards, masks))

    # -- deletions and filters -------------------------------------------------------
    def _allowed(self, where: Where | None) -> list[np.ndarray | None]:
        """Per shard, a bool mask of the documents a search may return (None: all)."""
        fields = where or {}
        out = []
        for shard in self.shards:
            mask = shard.live
            for name, conditions in fields.items():
                match = filters.allowed_documents(shard.store, name, conditions)
                mask = match if mask is None else mask & match
            out.append(mask)
        return out

    @staticmethod
    def _vector_mask(shard: _Shard, docs: np.ndarray | None) -> np.ndarray | None:
        return None if docs is None else shard.vector_mask(docs)

    def _keys_allowed(self, allowed: list[np.ndarray | None]) -> np.ndarray:
        keys = [(np.int64(s) << 32) | np.flatnonzero(np.ones(len(sh.store), bool) if m is None else m)
                for s, (sh, m) in enumerate(zip(self.shards, allowed))]
        return np.concatenate(keys) if keys else np.zeros(0, np.int64)

    def _bm25_mask(self, allowed: list[np.ndarray | None], where: Where | None) -> np.ndarray | None:
        """Which of BM25's documents pass `where` (None: no filter). BM25 is
        rebuilt over the live documents at every commit, so deletions need none."""
        if not where:
            return None
        key = json.dumps(where, sort_keys=True)
        with self._bm25_lock:
            if key not in self._bm25_masks:
                ids = {doc_id for shard, mask in zip(self.shards, allowed) if mask is not None and mask.any()
                       for doc_id, o in shard.store.id_ordinals() if mask[o]}
                if len(self._bm25_masks) >= 8:
                    self._bm25_masks.pop(next(iter(self._bm25_masks)))
                self._bm25_masks[key] = np.fromiter((d in ids for d in self.bm25.ids), dtype=bool, count=len(self.bm25))
            return self._bm25_masks[key]

    # -- stage 2 ---------------------------------------------------------------------
    @staticmethod
    def _candidates(m: int, hits: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]], n: int, window: int | None = None) -> np.ndarray:
        """The `n` documents (keys shard << 32 | ordinal) with the best stage-1
        MaxSim estimates; with `window`, a document's estimate is its best
        window's, each window `window` consecutive vectors (stage 2 packs
        whole sentences; an estimate need not)."""
        keys, scores, query_of, windows = [], [], [], []
        for shard, s, d, at in hits:
            valid = d >= 0
            keys.append((np.int64(shard) << 32) | d[valid])
            scores.append(s[valid])
            query_of.append(np.nonzero(valid)[0])
            if window:
                windows.append(at[valid] // window)
        keys_all = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        if len(keys_all) == 0:
            return keys_all
        scores_all = np.concatenate(scores)
        query_all = np.concatenate(query_of)
        # Each query vector's weakest retrieved score over all shards bounds what it missed.
        floor = np.full(m, np.inf, dtype=np.float32)
        np.minimum.at(floor, query_all, scores_all)
        floor[~np.isfinite(floor)] = 0.0
        hit_windows = np.concatenate(windows) if window else None
        docs, approx = scoring.approximate_doc_scores(scores_all, keys_all, m, query_all, floor, hit_windows)
        return docs[np.argsort(-approx, kind="stable")[:n]]

    def _key(self, doc_id: str) -> int | None:
        """The live document's key (shard << 32 | ordinal), or None where no
        shard holds it (an updated document's earlier version is deleted)."""
        for s, shard in enumerate(self.shards):
            ordinal = shard.store.ordinal(doc_id)
            if ordinal is not None and (shard.live is None or shard.live[ordinal]):
                return (s << 32) | ordinal
        return None

    def _locate(self, doc_ids: Sequence[str], allowed: list[np.ndarray | None] | None = None) -> np.ndarray:
        """Keys of the listed documents that the index holds (and the filter
        allows), in the order given."""
        keys = [self._key(d) for d in dict.fromkeys(doc_ids)]
        keys = [k for k in keys if k is not None and (allowed is None or allowed[k >> 32] is None or allowed[k >> 32][k & 0xFFFFFFFF])]
        return np.array(keys, dtype=np.int64)

    def _stage2(self, q: np.ndarray, chosen: np.ndarray, n_rerank: int, exclude: set[str], first: int | None = None,
                window: int | None = None) -> list[_Candidate]:
        """Exact scores of the chosen documents, in the order they are ranked;
        the best `n_rerank`. With `first`, `chosen` is in stage 1's order and
        its first `first` documents (once `exclude` is out) rank ahead of the
        rest, each group best first: a page is the same whatever k. With
        `window`, a document's score is its best window's (scoring.window_maxsims)."""
        m = len(q)
        by_shard: dict[int, list[int]] = {}
        for key in chosen.tolist():
            by_shard.setdefault(key >> 32, []).append(key & 0xFFFFFFFF)
        blocks = self.encoder.attention_blocks
        if blocks and m != 1:
            raise ValueError(f"attention scoring takes one query vector, got {m}")
        out = []
        for shard, ordinals in by_shard.items():
            store = self.shards[shard].store
            if exclude:
                ordinals = [o for o in ordinals if store.document(o).id not in exclude]
            stored = store.vectors(ordinals)
            if not stored:
                continue
            parts = [v for v, _ in stored]
            qs = q if self.shards[shard].rotate is None else self.shards[shard].rotate(q)
            sims = scoring.block_logits(qs, np.concatenate(parts), blocks) if blocks else scoring.similarities(qs, parts)
            bounds = np.cumsum([0] + [len(v) for v, _ in stored])
            for i, (o, (_, sen)) in enumerate(zip(ordinals, stored)):
                out.append(_Candidate(shard, o, sims[:, bounds[i] : bounds[i + 1]], sen, 0.0))
        if blocks and out:
            # The softmax runs over every candidate unit of every shard at once.
            alpha = scoring.attention(np.concatenate([c.sim for c in out], axis=1))
            bounds = np.cumsum([0] + [c.sim.shape[1] for c in out])
            for i, c in enumerate(out):
                c.sim = alpha[None, bounds[i] : bounds[i + 1]]
        if window is None:
            for c in out:
                c.score = scoring.maxsim(c.sim)
        elif out:
            scores = scoring.window_maxsims(np.concatenate([c.sim for c in out], axis=1), [c.unit_sentences for c in out], window)
            for c, score in zip(out, scores.tolist()):
                c.score = score
        if first is not None and len(out) > first:
            place = {key: i for i, key in enumerate(chosen.tolist())}
            out.sort(key=lambda c: place[(c.shard << 32) | c.ordinal])
            for c in out[first:]:
                c.tier = 1
        out.sort(key=lambda c: (c.tier, -c.score, c.shard, c.ordinal))
        return out[:n_rerank]

    # -- aggregation -------------------------------------------------------------------
    @staticmethod
    def _rows(cands: list[_Candidate], k: int, level: Level) -> list[tuple[float, int, int]]:
        """The best k (score, candidate index, sentence or unit; 0 for a document), best first."""
        if level == "doc":
            return [(c.score, ci, 0) for ci, c in enumerate(cands[:k])]
        rows: list[tuple[float, int, int]] = []
        for ci, c in enumerate(cands):
            if level == "sentence":
                scores = c.sentence_scores()
            else:
                # Title units cover no sentence (last < first): never a unit hit.
                scores = np.where(c.unit_sentences[:, 1] >= c.unit_sentences[:, 0], scoring.unit_scores(c.sim), -np.inf)
            for j in scoring.top_k(scores, k):
                if np.isfinite(scores[j]):
                    rows.append((float(scores[j]), ci, int(j)))
        rows.sort(key=lambda r: (cands[r[1]].tier, -r[0], cands[r[1]].shard, cands[r[1]].ordinal, r[2]))
        return rows[:k]

    def _hits(self, cands: list[_Candidate], rows: Sequence[tuple[float, int, int]], level: Level,
              window: int | None = None) -> list[Hit]:
        """Hits of the rows; at document level each shows its best window of
        `window` units (None: the whole document)."""
        return [self._hit(rank + 1, cands[ci], score, None if level == "doc" else (level, j), window)
                for rank, (score, ci, j) in enumerate(rows)]

    def _hit(self, rank: int, c: _Candidate, score: float, where: tuple[str, int] | None, window: int | None = None) -> Hit:
        """The hit for candidate `c`: at document level (`where` None) its
        passage of `window` units, else the sentence or unit `where` names."""
        store = self.shards[c.shard].store
        doc = store.document(c.ordinal)
        sentences = sentences_of(doc)
        passage = None
        if where is not None and where[0] == "unit":
            matched, sentence = [where[1]], int(c.unit_sentences[where[1], 0])
        else:
            if where is None:
                passage, sentence = _passage(c, window, len(sentences))
            else:
                sentence = where[1]
            matched = _matched_units(c, sentence)
        sentence = min(sentence, len(sentences) - 1)
        passage = passage or (sentence, sentence)
        s_start, s_end = sentences[sentence]
        units = store.units(c.ordinal, matched, doc.id)
        spans = []
        for u in units:
            base = sentences[u.sentence][0] - s_start
            for a, b in u.spans:
                a, b = max(a + base, 0), min(b + base, s_end - s_start)
                if a < b:
                    spans.append((a, b))
        return Hit(rank, doc.id, doc.title, score, sentence, doc.text[s_start:s_end], sorted(set(spans)), units,
                   text=passage_text(doc, *passage), metadata=dict(doc.metadata), passage=passage, document=doc)

    def close(self) -> None:
        self._pool.shutdown()
        for shard in self.shards:
            shard.store.close()

    def __enter__(self) -> "Searcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_nprobe(query_vectors: int, lists: int = 4096) -> int:
    """IVF lists probed per query vector unless asked. The vectors of a
    multi-vector query find a document together, so each may miss what the
    others find: 1/256 of the lists, at least 4 and at most 16. A one-vector
    query must find every candidate by itself, and a proposition's vector
    lies near its passage's and its siblings': 512 lists, or all of a smaller
    index's. Chosen on training queries (SciFact's train split), never on a
    reported split; eval/notebook/ keeps the sweeps."""
    if query_vectors > 1:
        return min(16, max(4, lists // 256))
    return min(512, max(lists, 128))


def default_candidates(k: int, query_vectors: int, rerank: int, vectors_per_doc: float) -> int:
    """Stage-1 hits per query vector unless asked. A multi-vector query
    spreads its budget over its vectors: 64 each. A one-vector query must
    name its `rerank` documents by itself, and in an index of many vectors
    a document (propositions) its hits crowd onto a few documents' units:
    it asks for up to 16 hits a document it re-scores, and never fewer than
    100 or 10k."""
    if query_vectors > 1:
        return 64
    return max(100, 10 * k, rerank * min(16, math.ceil(vectors_per_doc)))


def default_rerank(query_vectors: int = 1) -> int:
    """Stage 1's best documents that stage 2 re-scores and ranks first,
    unless asked (`rerank`). Asked for more than half as many, stage 2
    scores up to 2k and ranks the others after them: the first page never
    changes with k (Vespa's second phase keeps a fixed rerank-count for the
    same reason), and a deep ranking's top 10 is a top 10's. A multi-vector
    query ranks 32 first: the fewer stage-1 near-misses MaxSim sees, the
    fewer it ranks in by accident, and stage 2 is most of a query's time
    (chosen on SciFact's train queries). A one-vector query ranks 64, as
    PLAID decompresses 64 of its 256 candidates."""
    return 32 if query_vectors > 1 else 64


def set_threads(n: int) -> None:
    """FAISS's and torch's threads for this process."""
    import torch

    ann.set_threads(n)
    torch.set_num_threads(n)


def _text(query: str | Document) -> str:
    return query.text if isinstance(query, Document) else query


def _passage(c: _Candidate, window: int | None, n_sentences: int) -> tuple[tuple[int, int] | None, int]:
    """A document-level hit's passage, its best window (the whole document
    without one), and its best sentence inside it; (None, best sentence)
    where no unit covers a sentence."""
    scores = c.sentence_scores()
    best = int(np.argmax(scores)) if len(scores) else 0
    passage = scoring.best_window(c.sim, c.unit_sentences, window) if window else (0, n_sentences - 1)
    if passage is None or not len(scores):
        return None, best
    passage = (min(passage[0], n_sentences - 1), min(passage[1], n_sentences - 1))
    inside = scores[passage[0]:passage[1] + 1]
    return passage, passage[0] + int(np.argmax(inside)) if len(inside) else best


def _matched_units(c: _Candidate, sentence: int) -> list[int]:
    """The units that are some query vector's best match inside the sentence."""
    first, last = c.unit_sentences[:, 0], c.unit_sentences[:, 1]
    inside = np.flatnonzero((first <= sentence) & (last >= sentence))
    return sorted(set(inside[c.sim[:, inside].argmax(axis=1)].tolist())) if len(inside) else []
