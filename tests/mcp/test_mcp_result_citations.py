"""Citations an MCP server sends with a result (``structuredContent.citations``, as
shelfhand's own ``retrieve`` does) are bounded as its content is: any server could send any
number of any length, and they reach the run's citations, the answer check and the reply.
They are marked with the server's name as mounted, so that they never pass for the knowledge
base's passages (a real SDK server, tests/mcp/variant_server.py, over stdio)."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp_helpers import HERE
from variant_server import POSING_AS_LOCAL

from shelfhand.core.citations import (
    CitationLedger,
    number_here,
    renumber_markers,
    renumber_passages,
)
from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.messages import Citation, ToolCallBlock
from shelfhand.knowledge.evidence.citations import label
from shelfhand.mcp import StdioServer
from shelfhand.mcp.tool import MAX_CITATIONS, MAX_LABEL_CHARS, MAX_NOTE_CHARS, to_output
from shelfhand.tools.tool import ToolOutput, tool
from shelfhand.tools.toolkit import Toolkit


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


WARRANTY = [
    {
        "index": 1,
        "source": "a.md",
        "chunk_id": "a.md::0",
        "text": "保修 12 个月。",
        "conflicts_with": [2],
        "conflict_note": "[1] 与 [2] 不一致：12 个月 vs 24 个月；[2] 较新（第 2 版）。",
    },
    {
        "index": 2,
        "source": "b.md",
        "chunk_id": "b.md::0",
        "text": "保修 24 个月。见附录 [1]。",
        "conflicts_with": [1, 9],
        "conflict_note": "[1] 与 [2] 不一致：12 个月 vs 24 个月；[2] 较新（第 2 版）。\n"
        "[2] 与 [9] 不一致：24 个月 vs 36 个月。",
    },
]
WARRANTY_TEXT = (
    "[1] a (a.md)\n保修 12 个月。\n\n[2] b (b.md)\n保修 24 个月。见附录 [1]。\n\n"
    "注意：[1] 与 [2] 不一致：12 个月 vs 24 个月；[2] 较新（第 2 版）。"
)


def test_disagreements_a_server_reports_take_the_runs_numbers() -> None:
    """Their numbers are the server's: numbered in the run (which has given out 1 to 3 here),
    the passages and the disagreements between them follow; one naming a passage the
    server did not send ([9]) is dropped, as it would name another passage of the run."""
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text=WARRANTY_TEXT)],
        structured_content={"citations": WARRANTY},
    )
    out = to_output(result, limit=65_536, source="MCP server docs")
    assert [c.conflicts_with for c in out.citations] == [(2,), (1, 9)]  # the server's, as sent
    ledger = CitationLedger()
    ledger.number([Citation(index=0, source=f"ours{i}.md", text=f"{i}") for i in range(3)])

    numbers, citations = number_here(out.citations, ledger)

    assert numbers == {1: 4, 2: 5}
    assert [(c.index, c.conflicts_with) for c in citations] == [(4, (5,)), (5, (4,))]
    note = "[4] 与 [5] 不一致：12 个月 vs 24 个月；[5] 较新（第 2 版）。"
    assert [c.conflict_note for c in citations] == [note, note]
    assert renumber_passages(WARRANTY_TEXT, numbers) == (
        f"[4] a (a.md)\n保修 12 个月。\n\n[5] b (b.md)\n保修 24 个月。见附录 [1]。\n\n注意：{note}"
    )  # the document's own "[1]" inside a passage stays
    assert [c.conflicts_with for c in ledger.citations[3:]] == [(), ()]  # passages, not notes


def test_markers_are_renumbered_in_one_pass() -> None:
    """[1] → [2] and [2] → [3] never chain into [3][3]."""
    assert renumber_markers("[1][2]、[1, 2]", {1: 2, 2: 3}) == "[2][3]、[2, 3]"
    assert renumber_passages("[1] x\n[2] y\nNote: [1] and [2] disagree", {1: 2, 2: 3}) == (
        "[2] x\n[3] y\nNote: [2] and [3] disagree"
    )


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


def test_what_labels_a_servers_citation_and_its_disagreements_is_bounded() -> None:
    """They reach the reply and the run's notes as sent (before, the disagreements were
    dropped: kept now, renumbered, they are bounded as the texts are)."""
    sent = [
        {
            "index": 1,
            "source": "s" * 1_000_000,
            "title": "标题" * 500_000,
            "section": "x" * 1_000_000,
            "text": "七天内可退。",
            "conflicts_with": list(range(2, 10_002)),
            "conflict_note": "\n".join(
                f"[1] 与 [{n}] 不一致：12 个月 vs 24 个月。" for n in range(2, 10_002)
            ),
            "spans": [[0, 1]] * 10_000,
        },
        {"index": 2, "source": "b.md", "text": "x", "conflict_note": "长" * 100_000},
    ]
    first, second = to_output(result_with(sent), limit=65_536, source="MCP server big").citations
    assert len(first.source) == len("MCP server big: ") + MAX_LABEL_CHARS
    assert len(first.title) == len(first.section) == MAX_LABEL_CHARS
    assert len(first.conflicts_with) == MAX_CITATIONS and len(first.spans) == 64
    assert 0 < len(first.conflict_note) <= MAX_NOTE_CHARS
    assert first.conflict_note.splitlines()[-1] in sent[0]["conflict_note"].splitlines()  # type: ignore[union-attr]
    assert second.conflict_note == ""  # one line longer than the bound: no whole line fits


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


@pytest.mark.anyio
async def test_one_shared_result_is_numbered_in_each_run_that_gets_it() -> None:
    """Two runs of one caller at once (two sessions) share one execution of a read-only
    tool; each numbers its passages in its own run, after the sharing."""
    runs = 0
    release = anyio.Event()

    @tool(read_only=True)
    async def partner_search(query: str) -> ToolOutput:
        """Search the partner's documents."""
        nonlocal runs
        runs += 1
        await release.wait()
        sent = [
            Citation(index=i, source=f"MCP server p: {n}", text=n)
            for i, n in ((1, "甲"), (2, "乙"))
        ]
        return ToolOutput(content="[1] 甲 (a.md)\n甲\n\n[2] 乙 (b.md)\n乙", citations=tuple(sent))

    partner_search.numbered_elsewhere = True  # as McpTool is
    kit = Toolkit([partner_search])
    alice = UserContext(tenant_id="acme", user_id="alice")
    busy, fresh = RunContext(user=alice), RunContext(user=alice)
    busy.citations.number([Citation(index=0, source=f"{i}.md", text=str(i)) for i in range(3)])
    call = ToolCallBlock(id="c1", name="partner_search", arguments='{"query": "x"}')

    async with anyio.create_task_group() as tg:
        got: dict[str, Any] = {}

        async def one(name: str, run: RunContext) -> None:
            got[name] = await kit.execute(call, run)

        tg.start_soon(one, "busy", busy)
        tg.start_soon(one, "fresh", fresh)
        await anyio.sleep(0.2)
        release.set()

    assert runs == 1 and got["fresh"].shared != got["busy"].shared  # one ran, one shared it
    assert [c.index for c in got["busy"].result.citations] == [4, 5]
    assert (
        got["busy"].result.content.startswith("[4] 甲")
        and "\n\n[5] 乙" in got["busy"].result.content
    )
    assert [c.index for c in got["fresh"].result.citations] == [1, 2]
    assert got["fresh"].result.content.startswith("[1] 甲")
