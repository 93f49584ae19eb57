"""Citations an MCP server sends with a result (``structuredContent.citations``, as
shelfhand's own ``retrieve`` does) are bounded as its content is: any server could send any
number of any length, and they reach the run's citations, the answer check and the reply.
They are marked with the server's name as mounted, so that they never pass for the knowledge
base's passages (a real SDK server, tests/mcp/variant_server.py, over stdio)."""

from __future__ import annotations

import sys

import anyio
import mcp.types as types
import pytest
from mcp_helpers import HERE
from variant_server import POSING_AS_LOCAL

from shelfhand.core.citations import CitationLedger
from shelfhand.core.messages import Citation
from shelfhand.knowledge.evidence.citations import label
from shelfhand.mcp import StdioServer
from shelfhand.mcp.tool import MAX_CITATIONS, to_output


def result_with(citations: list[dict[str, object]]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="[1] 退货")],
        structured_content={"citations": citations},
    )


def test_citations_are_read_in_shelfhands_shape() -> None:
    sent = [{"index": 1, "source": "手册/退货.md", "title": "退货", "text": "七天内可退。"}]
    out = to_output(result_with(sent), limit=65_536, source="MCP server docs")
    assert [(c.index, c.source, c.title, c.text) for c in out.citations] == [
        (1, "MCP server docs: 手册/退货.md", "退货", "七天内可退。")
    ]


def test_disagreements_a_server_reports_are_dropped() -> None:
    """Their numbers are the server's: in the run they would name other passages, and print
    as the run's own note ("[1] 与 [2] 不一致")."""
    sent = [
        {
            "index": 1,
            "source": "a.md",
            "text": "保修 12 个月。",
            "conflicts_with": [2],
            "conflict_note": "[1] 与 [2] 不一致：12 个月 vs 24 个月",
        },
        {"index": 2, "source": "b.md", "text": "保修 24 个月。", "conflicts_with": [1]},
    ]
    out = to_output(result_with(sent), limit=65_536, source="MCP server docs")
    assert [(c.conflicts_with, c.conflict_note) for c in out.citations] == [((), "")] * 2
    assert [c.text for c in out.citations] == ["保修 12 个月。", "保修 24 个月。"]


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


@pytest.mark.anyio
async def test_a_servers_citations_name_it_as_mounted_and_never_pass_for_a_local_passage() -> None:
    # the server calls itself variant-citing and sends a local file's name, doc id and chunk id
    variant = str(HERE / "variant_server.py")
    server = StdioServer(sys.executable, [variant, "citing"], name="partner", timeout=20)
    with anyio.fail_after(30):
        async with server:
            out = await server.call_tool("returns_policy", {})
    (theirs,) = out.citations
    assert theirs.source == "MCP server partner: 手册/退货.md"
    assert (theirs.doc_id, theirs.chunk_id) == (
        "MCP server partner: 手册/退货.md",
        "MCP server partner: 手册/退货.md::0",
    )
    assert label(theirs) == "退货政策 (MCP server partner: 手册/退货.md)"
    # the knowledge base's own passage of that file keeps its number and its text in the run
    ours = Citation(**{**POSING_AS_LOCAL, "text": "拆封后 7 天内可退。"})
    ledger = CitationLedger()
    ledger.number([ours])
    (numbered,) = ledger.number(out.citations)
    assert numbered.index == 2 and numbered.text == POSING_AS_LOCAL["text"]
    assert ledger.citations == (ours, numbered)
