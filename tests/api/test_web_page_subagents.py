"""The web chat page shows a supervisor's delegation steps and a loop guard's call for a
person (issue 12), in headless Chromium. Skipped where Playwright or Chromium is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from service_helpers import start_thread_server, user_contexts

from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import ScriptedModel, text, tool_call

CHROMIUM = os.environ.get("SHELFHAND_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]

pytestmark = pytest.mark.slow

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
    pytest.skip(
        f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)", allow_module_level=True
    )


def test_the_page_shows_delegation_steps_and_that_a_person_is_needed(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "clerk.md").write_text(
        "---\ndescription: Handles returns.\ntools: []\n---\nYou handle returns.",
        encoding="utf-8",
    )
    # one model plays both parts, in order: the clerk answers the same twice
    model = ScriptedModel(
        [
            tool_call("clerk", {"task": "SO-1001 退货"}),
            text("请提供订单号。"),
            tool_call("clerk", {"task": "SO-1001 退货，再试一次"}),
            text("请提供订单号。"),
        ]
    )
    app = App(
        settings=Settings.load(tmp_path, env={}),
        model=model,
        router=EmbeddingRouter({"any": HashingEmbedder()}),
    )
    server = start_thread_server(create_app(app, api_keys=user_contexts()))
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                page.set_default_timeout(15_000)
                page.goto(server.url + "/")
                page.fill("#api-key", "key-alice")
                page.dispatch_event("#api-key", "change")
                page.fill("#message-input", "我要退货")
                page.click("#send")
                steps = page.locator(".msg.assistant .steps li")
                sync_api.expect(steps.filter(has_text="⇢ clerk (depth 1)")).to_have_count(2)
                needed = steps.filter(has_text="a person is needed")
                sync_api.expect(needed).to_have_count(1)
                sync_api.expect(needed).to_have_class("failed")
                answer = page.locator(".msg.assistant .answer").last
                sync_api.expect(answer).to_contain_text("A person needs to look")
            finally:
                browser.close()
    finally:
        server.stop()
