"""Two shelfhand services delegating over A2A.

* The **documents team** service holds the after-sales documents and serves its agent over
  A2A (``/.well-known/agent-card.json``, JSON-RPC at ``/a2a/shelfhand``).
* The **front desk** service has no documents; its ``agents/docs_team.md`` declares the
  documents team as a remote subagent (``a2a: <url>``, its API key read from the
  ``DOCS_TEAM_KEY`` environment variable). Its supervisor delegates to it like to a local
  specialist: the governed delegate tool, with a timeout and a breaker.

A client asks the front desk through the ``openai`` SDK; the answer comes back with the
documents team's citation. The front desk's caller (alice) is not forwarded: the documents
team sees the front desk's own key.

Runs offline with scripted models::

    python examples/a2a_two_services.py
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any

import openai
import uvicorn

from shelfhand import App, Settings, UserContext
from shelfhand.api import create_app
from shelfhand.knowledge import sample_corpus
from shelfhand.testing import CyclingScriptModel, text, tool_call

ENV = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}


def serve(api: Any) -> tuple[str, uvicorn.Server]:
    """Serve ``api`` from a thread on a free port of 127.0.0.1 (as ``shelfhand serve`` does)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(api, log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def documents_team(workspace: Path) -> tuple[str, uvicorn.Server]:
    model = CyclingScriptModel([
        tool_call("retrieve", {"query": "投影仪 保修期"}),
        text("整机保修期为自购买之日起 12 个月 [1]。"),
    ])  # fmt: skip
    app = App(settings=Settings.load(workspace, env=ENV), model=model)
    keys = {"key-front-desk": UserContext(tenant_id="acme", user_id="front-desk")}
    api = create_app(app, api_keys=keys)
    api.state.service.kb.ingest([sample_corpus()], tenant_id="acme")
    return serve(api)


def front_desk(workspace: Path, docs_url: str) -> tuple[str, uvicorn.Server]:
    agents = workspace / "agents"
    agents.mkdir(parents=True, exist_ok=True)
    (agents / "docs_team.md").write_text(
        "---\n"
        "description: 售后文档团队：保修、退货、故障代码，答案带引用。\n"
        f"a2a: {docs_url}/a2a/shelfhand\n"
        "a2a_token_env: DOCS_TEAM_KEY\n"
        "timeout: 60\n"
        "---\n",
        encoding="utf-8",
    )
    model = CyclingScriptModel([
        tool_call("docs_team", {"task": "投影仪的保修期是多久？"}),
        text("文档团队答复：整机保修期为自购买之日起 12 个月 [1]。"),
    ])  # fmt: skip
    app = App(settings=Settings.load(workspace, env=ENV), model=model)
    keys = {"key-alice": UserContext(tenant_id="shop", user_id="alice")}
    return serve(create_app(app, api_keys=keys))


def main(root: Path) -> None:
    os.environ["DOCS_TEAM_KEY"] = "key-front-desk"  # in production: your secret store
    docs_url, docs_server = documents_team(root / "docs-team")
    desk_url, desk_server = front_desk(root / "front-desk", docs_url)

    client = openai.OpenAI(base_url=desk_url + "/v1", api_key="key-alice")
    reply = client.chat.completions.create(
        model="shelfhand", messages=[{"role": "user", "content": "投影仪保修多久？"}]
    )
    message = reply.choices[0].message
    print("front desk:", message.content)
    extra = (message.model_extra or {})["shelfhand"]
    print("delegated to:", [s["name"] for s in extra["tool_steps"]])
    for c in extra["citations"]:
        print(f"  [{c['index']}] {c['source']}")
    desk_server.should_exit = True
    docs_server.should_exit = True


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp))
