"""A subagent file naming its own model gets it on the configured endpoint (issue 12), through
the official openai SDK against a real loopback chat-completions server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.settings import Settings
from support.chat_server import ChatServer, Reply, completion

pytestmark = pytest.mark.anyio


async def test_a_subagent_file_naming_a_model_is_asked_with_that_model(
    tmp_path: Path, chat_server: ChatServer
) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "writer.md").write_text(
        "---\ndescription: Writes short texts.\nmodel: qwen-plus\ntools: []\n---\nWrite well.",
        encoding="utf-8",
    )
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "writer", "arguments": json.dumps({"task": "写一句欢迎语"})},
    }
    chat_server.add(
        Reply(body=completion(tool_calls=[call])),
        Reply(body=completion("欢迎光临！")),
        Reply(body=completion("写好了：欢迎光临！")),
    )
    settings = Settings.load(
        tmp_path,
        env={
            "SHELFHAND_MODEL": "main-model",
            "OPENAI_BASE_URL": chat_server.url,
            "OPENAI_API_KEY": "test-key",
        },
    )
    app = App(settings=settings)
    model = app.chat_model()
    assert model is not None
    supervisor = app.supervisor(model, None)
    result = await supervisor.run("写一句欢迎语", context=UserContext(tenant_id="t", user_id="u"))
    assert result.output == "写好了：欢迎光临！"
    assert [r.body["model"] for r in chat_server.requests] == [
        "main-model",
        "qwen-plus",
        "main-model",
    ]
    asked = chat_server.requests[1].body["messages"]
    assert [m["role"] for m in asked] == ["system", "user"]
    assert asked[0]["content"].startswith("Write well.") and asked[1]["content"] == "写一句欢迎语"
    assert "tools" not in chat_server.requests[1].body
    app.close()
