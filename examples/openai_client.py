"""The official ``openai`` SDK talking to a shelfhand agent (``/v1/chat/completions``).

Starts the shelfhand service on 127.0.0.1 with the bundled sample documents (the same app
``shelfhand serve`` runs), then asks it three ways: a plain completion, a stream with the
usage chunk and tool-step lines, and a conversation kept on the server through ``user``.
The shelfhand API key is the OpenAI key; the model name is ``shelfhand``.

Runs offline: a scripted model plays the turns a real model would. With ``--real`` the
service uses the configured chat model (``SHELFHAND_MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``)::

    python examples/openai_client.py [WORKSPACE] [--real]
"""

from __future__ import annotations

import socket
import sys
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

KEYS = {"key-alice": UserContext(tenant_id="acme", user_id="alice", roles=["user"])}


def serve(api: Any) -> tuple[str, uvicorn.Server]:
    """Serve ``api`` from a thread on a free port of 127.0.0.1 (as ``shelfhand serve`` does)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(api, log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def main(workspace: Path, real: bool) -> None:
    model = None
    if not real:  # each turn: search the documents, then answer citing the first passage
        model = CyclingScriptModel([
            tool_call("retrieve", {"query": "投影仪 保修期"}),
            text("整机保修期为自购买之日起 12 个月 [1]。"),
        ])  # fmt: skip
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    app = App(settings=Settings.load(workspace, env=None if real else env), model=model)
    api = create_app(app, api_keys=KEYS)
    api.state.service.kb.ingest([sample_corpus()], tenant_id="acme")
    url, server = serve(api)
    client = openai.OpenAI(base_url=url + "/v1", api_key="key-alice")

    print("models:", [m.id for m in client.models.list().data])

    reply = client.chat.completions.create(
        model="shelfhand", messages=[{"role": "user", "content": "投影仪的保修期是多久？"}]
    )
    message = reply.choices[0].message
    print("answer:", message.content)
    for c in (message.model_extra or {})["shelfhand"]["citations"]:
        print(f"  [{c['index']}] {c['label']}")
    assert reply.usage is not None
    print("usage:", reply.usage.prompt_tokens, "in,", reply.usage.completion_tokens, "out")

    stream = client.chat.completions.create(
        model="shelfhand",
        messages=[{"role": "user", "content": "保修期多久？"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Shelfhand-Steps": "1"},
    )
    print("streamed: ", end="")
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
        elif chunk.usage is not None:
            print(f"\nstreamed usage: {chunk.usage.total_tokens} tokens")

    for question in ("我叫小王。保修期多久？", "刚才我问了什么？"):  # one server-side session
        reply = client.chat.completions.create(
            model="shelfhand",
            user="conversation-1",
            messages=[{"role": "user", "content": question}],
        )
        session = (reply.choices[0].message.model_extra or {})["shelfhand"]["session_id"]
        print(f"session {session}: {question}")

    server.should_exit = True


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(args[0]) if args else Path(tmp), "--real" in sys.argv)
