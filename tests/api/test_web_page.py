"""The web chat page in headless Chromium (Debian's ``chromium`` driven by Playwright).

A screenshot is saved to ``build/test-artifacts/web-chat.png`` (or ``$SHELFHAND_TEST_ARTIFACTS``).
Skipped, with the reason shown, where Playwright or Chromium is not installed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import ALICE, ThreadServer, start_thread_server, user_contexts

from shelfhand.agent.grounding import PASSAGES_INTRO
from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import CyclingScriptModel, FunctionModel, text, tool_call
from shelfhand.tools.tool import tool

CHROMIUM = os.environ.get("SHELFHAND_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
ARTIFACTS = Path(
    os.environ.get("SHELFHAND_TEST_ARTIFACTS")
    or Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
)

pytestmark = pytest.mark.slow

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
    pytest.skip(
        f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True
    )


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[ThreadServer]:
    yield from _page_server(tmp_path, "E-203 表示灯泡过热，请清理风扇 [1]。另见 [9]。")


TROUBLESHOOTING = (
    "# 故障代码\n\n## E-203\n\nE-203：灯泡过热。请关机冷却，并清理进风口和风扇上的灰尘。\n"
)


def _page_server(
    tmp_path: Path,
    answer: str = "",
    *,
    model: Any = None,
    env: dict[str, str] | None = None,
    doc: tuple[str, str] = ("troubleshooting.md", TROUBLESHOOTING),
    tools: tuple[Any, ...] = (),
) -> Iterator[ThreadServer]:
    if model is None:
        model = CyclingScriptModel([tool_call("retrieve", {"query": "E-203 故障"}), text(answer)])
    app = App(
        settings=Settings.load(tmp_path, env=env or {}),
        model=model,
        router=EmbeddingRouter({"any": HashingEmbedder()}),
        extra_tools=tools,
    )
    server = start_thread_server(create_app(app, api_keys=user_contexts()))
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        files = [("files", (doc[0], doc[1].encode()))]
        assert c.post("/v1/knowledge/files", files=files).status_code == 200
    yield server
    server.stop()


@contextmanager
def asked(server: ThreadServer, question: str, *, height: int) -> Iterator[Any]:
    """The page in headless Chromium, signed in as Alice, with ``question`` sent."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": height})
            page.set_default_timeout(15_000)
            page.goto(server.url + "/")
            page.fill("#api-key", "key-alice")
            page.dispatch_event("#api-key", "change")
            page.fill("#message-input", question)
            page.click("#send")
            yield page
        finally:
            browser.close()


def test_the_page_streams_an_answer_with_a_clickable_citation_and_no_link_for_unknown_ones(
    page_server: ThreadServer,
) -> None:
    with asked(page_server, "E-203 是什么故障？", height=800) as page:
        answer = page.locator(".msg.assistant .answer").last
        sync_api.expect(answer).to_contain_text("E-203 表示灯泡过热")
        sync_api.expect(page.locator(".msg.assistant .steps li").first).to_contain_text("retrieve")
        sync_api.expect(page.locator("#sessions li")).to_have_count(1)
        cite = answer.locator("a.cite").first
        sync_api.expect(cite).to_have_text("[1]")
        # [9] was never given: shown as marked text, not as a link
        sync_api.expect(answer.locator("a.cite")).to_have_count(1)
        sync_api.expect(answer.locator("span.cite-unknown")).to_have_text("[9]")
        cite.click()
        sync_api.expect(page.locator("#passage")).to_be_visible()
        sync_api.expect(page.locator("#passage-text")).to_contain_text("灯泡过热")
        sync_api.expect(page.locator("#passage-where")).to_contain_text("t1/troubleshooting.md")
        page.screenshot(path=str(ARTIFACTS / "web-chat.png"), full_page=True)
    assert (ARTIFACTS / "web-chat.png").stat().st_size > 10_000


def test_an_answer_opens_its_trace_with_the_tree_times_and_scored_passages(
    page_server: ThreadServer,
) -> None:
    with asked(page_server, "E-203 是什么故障？", height=900) as page:
        toggle = page.locator(".msg.assistant .trace-toggle").last
        sync_api.expect(toggle).to_contain_text("2 model calls")
        toggle.click()
        spans = page.locator(".msg.assistant .trace .span")
        sync_api.expect(spans.first).to_contain_text("turn")
        # the up-front retrieval, then the model's own call
        calls = page.locator(".trace .span", has_text="execute_tool retrieve")
        sync_api.expect(calls).to_have_count(2)
        sync_api.expect(calls.last).to_contain_text("allow/ok")
        retrieval = page.locator(".trace .span", has_text="“E-203 故障”")
        sync_api.expect(retrieval).to_contain_text("retrieval")
        sync_api.expect(retrieval.locator(".hits li").first).to_contain_text("troubleshooting.md")
        page.screenshot(path=str(ARTIFACTS / "web-trace.png"), full_page=True)


def test_the_trace_says_why_a_search_kept_its_fused_order(tmp_path: Path) -> None:
    env = {"SHELFHAND_RERANK": "endpoint", "SHELFHAND_RERANK_URL": "http://127.0.0.1:9"}
    faq = "# 故障\n\n## E-203\n\nE-203 故障：灯泡过热。\n\n## E-203 处理\n\nE-203 故障时请关机冷却。\n"
    for server in _page_server(tmp_path, "E-203：灯泡过热 [1]。", env=env, doc=("faq.md", faq)):
        with asked(server, "E-203 是什么故障？", height=900) as page:
            page.locator(".msg.assistant .trace-toggle").last.click()
            retrieval = page.locator(".trace .span", has_text="“E-203 故障”")
            sync_api.expect(retrieval).to_contain_text(
                "failed, fused order kept: rerank endpoint unreachable"
            )


def test_an_answer_the_check_replaced_shows_the_checked_text_and_says_so(
    tmp_path: Path,
) -> None:
    for server in _page_server(tmp_path, "E-203 出现时请关机冷却 90 分钟 [1]。"):
        with asked(server, "E-203 要冷却多久？", height=800) as page:
            answer = page.locator(".msg.assistant .answer").last
            sync_api.expect(answer).to_contain_text("摘自文档：")
            sync_api.expect(answer).not_to_contain_text("90 分钟")
            notes = page.locator(".msg.assistant .grounding .replaced").last
            sync_api.expect(notes).to_contain_text("上面的回答经与文档核对后已被替换")
            # why, in the question's language too
            why = page.locator(".msg.assistant .grounding .extractive").last
            sync_api.expect(why).to_have_text(
                "摘录式回答：文档的原句，并非模型所写（文档不支持这个回答）。"
            )
            # the trace says the same: the turn's answer replaced, and why
            page.locator(".msg.assistant .trace-toggle").last.click()
            turn = page.locator(".msg.assistant .trace .span").first
            sync_api.expect(turn).to_contain_text("fallback ungrounded · extractive")


def test_a_guess_withdrawn_mid_stream_leaves_only_the_answer_after_the_search(
    tmp_path: Path,
) -> None:
    # `tool` mode: the model guesses a number before any search; the loop withdraws the
    # streamed guess, searches, and the model answers from the passage (the page showed the
    # guess and the answer run together before the text_withdrawn event)
    def model(messages: list[Message], tools: list[Any]) -> Any:
        if PASSAGES_INTRO not in messages[-1].text:
            return text("E-203 表示电源故障 77 号。")
        return text("E-203：灯泡过热 [1]。")

    tool_mode = {"SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    for server in _page_server(tmp_path, model=FunctionModel(model), env=tool_mode):
        with asked(server, "E-203 是什么故障？", height=800) as page:
            shown = page.locator(".msg.assistant").last
            sync_api.expect(shown.locator(".answer")).to_contain_text("灯泡过热")
            sync_api.expect(shown.locator(".answer")).not_to_contain_text("77")
            sync_api.expect(shown).to_contain_text("上面的草稿已撤回")
            sync_api.expect(shown).to_contain_text("→ retrieve")
            page.screenshot(path=str(ARTIFACTS / "web-chat-withdrawn.png"), full_page=True)


def test_another_rows_price_is_shown_as_not_supported_with_the_reason(tmp_path: Path) -> None:
    prices = "# 价格\n\n| 型号 | 价格（元） |\n|---|---|\n| Lumen X1 | 3,999 |\n| Lumen X1 Pro | 5,999 |\n"
    model = CyclingScriptModel(
        [
            tool_call("retrieve", {"query": "Lumen X1 Pro 价格"}),
            text("Lumen X1 Pro 的价格是 3,999 元 [1]。"),
        ]
    )
    flag = {"SHELFHAND_ANSWER_CHECK": "flag"}  # the model's answer stays, flagged
    for server in _page_server(tmp_path, model=model, env=flag, doc=("prices.md", prices)):
        with asked(server, "Lumen X1 Pro 多少钱？", height=800) as page:
            sync_api.expect(page.locator(".msg.assistant .answer").last).to_contain_text("3,999")
            note = page.locator(".msg.assistant .unsupported").last
            # said in the question's language, as the answer is
            sync_api.expect(note).to_contain_text("（3999 在段落的表格中属于另一行）")
            sync_api.expect(note).to_contain_text("无依据：Lumen X1 Pro 的价格是 3,999 元 [1]。")


def test_a_failed_tool_step_says_why_as_people_may_read_it(tmp_path: Path) -> None:
    @tool(read_only=True, retries=0)
    def order_status(order_id: str) -> str:
        """Look up an order (its system refuses connections)."""
        raise ConnectionError("refused by 10.0.0.7:5432")

    model = CyclingScriptModel(
        [tool_call("order_status", {"order_id": "SO-1001"}), text("稍后再试。")]
    )
    for server in _page_server(tmp_path, model=model, tools=(order_status,)):
        with asked(server, "我的订单 SO-1001 到哪了？", height=800) as page:
            step = page.locator(".msg.assistant .steps li.failed").last
            sync_api.expect(step).to_contain_text("order_status")
            sync_api.expect(step).to_contain_text("ms: failed: ConnectionError")
            sync_api.expect(step).not_to_contain_text("10.0.0.7")
