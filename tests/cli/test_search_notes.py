"""The lines ``shelfhand search`` prints under its passages are in the query's language;
the knowledge layer's own reason (technical) is kept word for word under either label."""

from __future__ import annotations

from shelfhand.cli.search import search_notes
from shelfhand.knowledge.types import SearchResult, SearchTimings

DEGRADED = "query embedding did not finish within 5s; using keyword search"


def outcome(pending: int = 0, rerank: str | None = None) -> SearchResult:
    timings = SearchTimings(pending_chunks=pending, rerank_reason=rerank)
    return SearchResult(hits=(), timings=timings, degraded_reason=DEGRADED)


def test_a_chinese_query_gets_chinese_labels_around_the_reason() -> None:
    lines = search_notes(outcome(pending=3, rerank="rerank (x) failed"), chinese=True)

    assert lines == [
        "[dim]3 个段落尚未嵌入（只能按关键词找到）；`shelfhand embed` 会嵌入它们[/]",
        f"[yellow]注意：[/]{DEGRADED}",
        "[yellow]注意：[/]rerank (x) failed",
    ]


def test_an_english_query_keeps_english_lines() -> None:
    assert search_notes(outcome(pending=1), chinese=False) == [
        "[dim]1 chunk is not embedded yet (found by keywords only); `shelfhand embed` embeds it[/]",
        f"[yellow]note:[/] {DEGRADED}",
    ]


def test_a_search_that_went_as_asked_has_no_lines() -> None:
    done = SearchResult(hits=(), timings=SearchTimings())
    assert search_notes(done, chinese=True) == search_notes(done, chinese=False) == []
