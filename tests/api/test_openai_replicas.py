"""The OpenAI endpoint on two replicas sharing real PostgreSQL and Redis: a conversation
keyed by ``user`` continues on whichever replica the next request reaches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service_helpers import ThreadServer
from test_openai_endpoint import client
from test_replicas import replica

from shelfhand.core.messages import Message
from shelfhand.testing import FunctionModel


def test_a_user_keyed_conversation_continues_across_replicas(
    tmp_path: Path, pg_url: str, redis_url: str, thread_servers: list[ThreadServer]
) -> None:
    seen: list[list[str]] = []

    def echo(messages: list[Message], tools: Any) -> str:
        seen.append([m.text for m in messages if m.role == "user"])
        return "收到"

    a = replica(tmp_path / "a", FunctionModel(echo), pg_url, redis_url, thread_servers)
    b = replica(tmp_path / "b", FunctionModel(echo), pg_url, redis_url, thread_servers)
    first = client(a).chat.completions.create(
        model="shelfhand", user="desk-7", messages=[{"role": "user", "content": "第一句"}]
    )
    second = client(b).chat.completions.create(
        model="shelfhand", user="desk-7", messages=[{"role": "user", "content": "第二句"}]
    )
    assert seen[-1] == ["第一句", "第二句"]
    sessions = {
        (r.choices[0].message.model_extra or {})["shelfhand"]["session_id"] for r in (first, second)
    }
    assert len(sessions) == 1
