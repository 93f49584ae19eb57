"""Citations an MCP server sends with a result (``structuredContent.citations``, as
shelfhand's own ``retrieve`` does) are bounded as its content is: any server could send any
number of any length, and they reach the run's citations, the answer check and the reply."""

from __future__ import annotations

import mcp.types as types

from shelfhand.mcp.tool import MAX_CITATIONS, to_output


def result_with(citations: list[dict[str, object]]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="[1] 退货")],
        structured_content={"citations": citations},
    )


def test_citations_are_read_in_shelfhands_shape() -> None:
    sent = [{"index": 1, "source": "手册/退货.md", "title": "退货", "text": "七天内可退。"}]
    out = to_output(result_with(sent), limit=65_536)
    assert [(c.index, c.source, c.text) for c in out.citations] == [
        (1, "手册/退货.md", "七天内可退。")
    ]


def test_a_flood_of_long_citations_is_cut_to_the_count_and_the_output_limit() -> None:
    sent = [
        {"index": i, "source": f"s{i}.md", "title": "t", "text": "长" * 100_000}
        for i in range(1, 1001)
    ]
    out = to_output(result_with(sent), limit=65_536, source="MCP server flood")
    assert len(out.citations) == MAX_CITATIONS
    texts = [c.text for c in out.citations]
    assert sum(len(t.encode()) for t in texts) < 65_536 + MAX_CITATIONS * 200  # (the markers)
    assert "[output truncated: MCP server flood sent 300000 bytes" in texts[0]


def test_citations_of_another_shape_are_none_and_the_content_stands() -> None:
    out = to_output(result_with([{"href": 1}, "x"]), limit=65_536)  # type: ignore[list-item]
    assert out.citations == () and out.content == "[1] 退货"
