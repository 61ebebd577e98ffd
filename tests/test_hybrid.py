"""retriever.hybrid: the lexical side of a search, pure functions over rankings."""
import pytest

from propdex.encoders import Document
from propdex.indexer import lexical
from propdex.retriever import fusion
from propdex.retriever.hybrid import Lexical, fuse_with_lexical, hop_order
from propdex.retriever.settings import SearchSettings


def test_below_document_level_an_item_takes_its_documents_share_of_bm25():
    dense = [(("a", 0), 3.0), (("b", 2), 2.0), (("a", 5), 1.0)]
    run = [("b", 12.0), ("a", 4.0)]
    doc_of = lambda item: item[0]  # noqa: E731
    rrf = fuse_with_lexical(dense, run, doc_of, "rrf")
    # b's sentence ties a's first (1/62 + 1/61 against 1/61 + 1/62) and keeps the dense order; a's second trails.
    assert [i for i, _ in rrf] == [("a", 0), ("b", 2), ("a", 5)]
    assert rrf[0][1] == pytest.approx(1 / 61 + 1 / 62) and rrf[2][1] == pytest.approx(1 / 63 + 1 / 62)
    minmax = fuse_with_lexical(dense, run, doc_of, "minmax")
    # dense scores map to 1, 0.5, 0; BM25's to b 1, a 0: b's sentence now leads.
    assert minmax == [(("b", 2), 1.5), (("a", 0), 1.0), (("a", 5), 0.0)]
    # Only dense items are ranked below document level; at document level BM25's finds join.
    assert {i for i, _ in fuse_with_lexical([("a", 1.0)], run, None, "rrf")} == {"a", "b"}
    with pytest.raises(ValueError, match="unknown fusion 'sum'"):
        fuse_with_lexical(dense, run, doc_of, "sum")
    with pytest.raises(ValueError, match="unknown fusion 'sum'"):
        SearchSettings(hybrid=True, fusion="sum")


def test_the_lexical_retriever_answers_only_with_documents_it_holds_and_hops_from_the_seed():
    docs = [Document("paris", "Paris is the capital of France. It lies on the Seine.", "Paris"),
            Document("seine", "The Seine flows through Paris into the English Channel.", "Seine"),
            Document("channel", "The English Channel separates England from France.", "English Channel"),
            Document("gone", "Paris capital France capital Paris.", "Gone")]
    held = {d.id: d for d in docs if d.id != "gone"}
    retriever = Lexical(lexical.index_documents(docs), held.get, held.__contains__)
    ranking = [d for d, _ in retriever.ranking("capital of France", 10)]
    assert ranking[0] == "paris" and "gone" not in ranking
    # The hop asks with the question and the seed's text, never returns the seed, honours skips.
    hop = [d for d, _ in retriever.hop("Where does the river of the French capital end?", "paris", 10)]
    assert "paris" not in hop and hop[0] == "seine"
    assert "seine" not in [d for d, _ in retriever.hop("river", "paris", 10, skip={"seine"})]
    assert retriever.hop("river", "gone", 10) == []  # a seed the index lacks has no text to ask with
    assert hop_order(["a", "b", "c", "d", "e", "f"], ["x", "a"], 6) == ["a", "b", "c", "d", "x", "e"]
    assert fusion.contributions([("a", 2.0), ("a", 1.0)], "rrf") == {"a": 1 / 61}


def test_interleave_reads_the_second_list_only_as_far_as_k_places_need():
    read = []

    def second():
        for item in "xyzw":
            read.append(item)
            yield item

    assert fusion.interleave(list("abcdefgh"), second(), every=3, k=6) == list("abxcdy")
    assert read == ["x", "y"]
    assert fusion.interleave(list("ab"), iter("xyz"), every=3, k=10) == list("abxyz")  # one list runs out: the other fills
    assert fusion.interleave(list("abcdefgh"), list("xyzw"), every=3, k=6) == fusion.interleave(list("abcdefgh"), list("xyzw"), every=3)[:6]
