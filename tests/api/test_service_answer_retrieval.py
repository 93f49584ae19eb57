"""The service's chat answers in ``both`` mode by default: the first retrieval happens before
the model is asked (as the caller), further ones by tool, all under one citation numbering."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import ALICE, BOB, ThreadServer, parse_sse, start_thread_server, user_contexts

from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import FunctionModel, text, tool_call

DOCS = {
    "troubleshooting.md": "# 故障代码\n\n## E-203\n\nE-203：灯泡过热。请关机冷却，并清理风扇。\n",
    "warranty.md": "# Warranty\n\nThe projector lamp is covered for 2 years or 3000 hours.\n",
}


class Recorder:
    """A model that records what it was asked; it retrieves once more, then answers."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.requests: list[list[Message]] = []
        self.tools: list[set[str]] = []

    def __call__(self, messages: list[Message], tools: list[Any]) -> Any:
        self.requests.append(list(messages))
        self.tools.append({t["function"]["name"] for t in tools})
        if len(self.requests) == 1:
            return tool_call("retrieve", {"query": "lamp warranty years"})
        return text(self.answer)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[ThreadServer, Recorder]]:
    recorder = Recorder("E-203 表示灯泡过热 [1]；灯泡保修 2 年 [2]，见 [9]。")
    # default retrieval mode; answers flagged, not replaced: these tests read the model's own
    # citations (the fallback over HTTP is in test_service_grounding.py)
    settings = Settings.load(
        tmp_path, env={"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_CHECK": "flag"}
    )
    app = App(
        settings=settings,
        model=FunctionModel(recorder),
        router=EmbeddingRouter({"any": HashingEmbedder()}),
    )
    server = start_thread_server(create_app(app, api_keys=user_contexts()))
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        files = [("files", (name, body.encode())) for name, body in DOCS.items()]
        assert c.post("/v1/knowledge/files", files=files).status_code == 200
    yield server, recorder
    server.stop()


def test_service_chat_retrieves_up_front_by_default_and_flags_unknown_citations(
    service: tuple[ThreadServer, Recorder],
) -> None:
    server, recorder = service
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(
            f"/v1/sessions/{session}/messages",
            json={"content": "E-203 是什么故障？", "stream": False},
        )
    assert r.status_code == 200, r.text
    reply = r.json()

    first = recorder.requests[0]
    assert first[-1].role == "user" and "灯泡过热" in first[-1].text  # passages, then question
    assert first[-1].text.endswith("E-203 是什么故障？")
    assert "retrieve" in recorder.tools[0]  # both: the model may retrieve more
    steps = reply["tool_steps"]
    assert [s["name"] for s in steps] == ["retrieve", "retrieve"]
    assert '"E-203 是什么故障？"' in steps[0]["arguments"]

    numbers = [c["index"] for c in reply["citations"]]
    assert numbers == list(range(1, len(numbers) + 1))  # one numbering for both retrievals
    sources = {c["index"]: c["source"] for c in reply["citations"]}
    assert sources[1] == "t1/troubleshooting.md"
    assert "t1/warranty.md" in sources.values()
    assert reply["unknown_citations"] == [9]


def test_service_chat_stream_shows_the_up_front_step_first_and_keeps_the_callers_acl(
    service: tuple[ThreadServer, Recorder],
) -> None:
    server, recorder = service
    with httpx.Client(base_url=server.url, headers=BOB, timeout=30) as c:  # another tenant
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "E-203 是什么故障？"})
    events = parse_sse(r.text)
    assert [e["type"] for e in events[:2]] == ["tool_started", "tool_finished"]
    assert events[0]["name"] == "retrieve"
    assert "No relevant passages" in events[1]["content"]
    final = events[-1]
    assert final["type"] == "final" and final["citations"] == []
    assert final["unknown_citations"] == [1, 2, 9]
    assert "No relevant passages" in recorder.requests[0][-1].text
