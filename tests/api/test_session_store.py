"""Session and user-memory stores, on real SQLite files and on a real PostgreSQL (the same
tests, parametrised), and the scripted-model file format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelfhand.agent.remember import make_remember_tool
from shelfhand.core.context import UserContext
from shelfhand.core.errors import ConfigurationError, ModelProviderError, ModelTimeoutError
from shelfhand.core.messages import Citation, Message, ToolCallBlock, ToolResultBlock
from shelfhand.sessions import SqliteSessionStore, SqliteUserMemoryStore
from shelfhand.sessions.store import SessionStore
from shelfhand.sessions.user_memory import UserMemoryStore
from shelfhand.testing import CyclingScriptModel, ScriptedModel, load_scripted_model

ALICE = UserContext(tenant_id="t1", user_id="alice")
BOB = UserContext(tenant_id="t2", user_id="alice")  # same user id, other tenant


class Stores:
    """Opens the session and memory stores of one backend (again, to test reopening)."""

    def __init__(self, kind: str, folder: Path, pg_url: str | None) -> None:
        self.kind = kind
        self.folder = folder
        self.pg_url = pg_url
        self._pools: list[Any] = []

    def _pool(self) -> Any:
        from shelfhand.backends.postgres import open_pool

        assert self.pg_url is not None
        pool = open_pool(self.pg_url, max_size=2)
        self._pools.append(pool)
        return pool

    def sessions(self) -> SessionStore:
        if self.kind == "sqlite":
            return SqliteSessionStore(self.folder / "sessions.db")
        from shelfhand.sessions.pg import PgSessionStore

        assert self.pg_url is not None
        return PgSessionStore(self._pool(), url=self.pg_url)

    def memories(self, **kwargs: Any) -> UserMemoryStore:
        if self.kind == "sqlite":
            return SqliteUserMemoryStore(self.folder / "sessions.db", **kwargs)
        from shelfhand.sessions.pg import PgUserMemoryStore

        assert self.pg_url is not None
        return PgUserMemoryStore(self._pool(), url=self.pg_url, **kwargs)

    def close(self) -> None:
        for pool in self._pools:
            pool.close()


@pytest.fixture(params=["sqlite", "pg"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """The SQLite stores (one file) or the PostgreSQL stores (a fresh database)."""
    url = request.getfixturevalue("pg_url") if request.param == "pg" else None
    opened = Stores(request.param, tmp_path, url)
    yield opened
    opened.close()


def turn(question: str, answer: str) -> list[Message]:
    call = ToolCallBlock(id="c1", name="retrieve", arguments='{"query": "q"}')
    cited = Citation(index=1, source="faq.md", text="passage")
    return [
        Message.user(question),
        Message.assistant(tool_calls=[call]),
        Message.tool(
            [ToolResultBlock(call_id="c1", name="retrieve", content="[1]", citations=(cited,))]
        ),
        Message.assistant(answer),
    ]


def test_a_recorded_turn_is_read_back_losslessly_after_reopening(stores: Stores) -> None:
    store = stores.sessions()
    info = store.create(ALICE)
    first = turn("保修期多久？", "12 个月 [1]。")
    updated = store.record_turn(info.id, ALICE, first, window=first, summary="", trace_id="tr-1")
    assert updated is not None and updated.message_count == 4 and updated.title == "保修期多久？"
    store.close()

    reopened = stores.sessions()
    assert reopened.messages(info.id, ALICE) == first
    got = reopened.get(info.id, ALICE)
    assert got is not None and got.last_trace_id == "tr-1" and got.state == "idle"


def test_the_memory_window_starts_where_the_memory_kept_messages_after_compaction(
    stores: Stores,
) -> None:
    store = stores.sessions()
    sid = store.create(ALICE).id
    one, two = turn("first", "a1"), turn("second", "a2")
    store.record_turn(sid, ALICE, one, window=one, summary="", trace_id="t1")
    store.record_turn(sid, ALICE, two, window=two, summary="user asked first", trace_id="t2")
    window = store.window(sid, ALICE)
    assert window is not None
    assert window.messages == tuple(two) and window.summary == "user asked first"
    assert len(store.messages(sid, ALICE) or []) == 8


def test_a_message_recorded_twice_starts_the_window_where_the_memory_has_it(
    stores: Stores,
) -> None:
    store = stores.sessions()
    one = turn("first", "a1")
    again = [one[0], *turn("first", "a2")[1:]]  # the same question message, asked again
    compacted, kept = store.create(ALICE).id, store.create(ALICE).id
    for sid in (compacted, kept):
        store.record_turn(sid, ALICE, one, window=one, summary="", trace_id="t1")
    # the memory folded the first turn away: the window is the second turn only
    store.record_turn(compacted, ALICE, again, window=again, summary="s", trace_id="t2")
    window = store.window(compacted, ALICE)
    assert window is not None and window.messages == tuple(again)
    # the memory kept both turns: the window starts at the first copy
    store.record_turn(kept, ALICE, again, window=[*one, *again], summary="", trace_id="t2")
    window = store.window(kept, ALICE)
    assert window is not None and window.messages == (*one, *again)


def test_sessions_of_another_tenant_or_user_look_missing(stores: Stores) -> None:
    store = stores.sessions()
    sid = store.create(ALICE, title="mine").id
    carol = UserContext(tenant_id="t1", user_id="carol")
    for other in (BOB, carol):
        assert store.get(sid, other) is None
        assert store.messages(sid, other) is None and store.window(sid, other) is None
        assert store.list_sessions(other) == []
        assert (
            store.record_turn(sid, other, turn("x", "y"), window=[], summary="", trace_id="")
            is None
        )
        assert store.delete(sid, other) is False
    assert [s.id for s in store.list_sessions(ALICE)] == [sid]
    assert store.delete(sid, ALICE) is True and store.get(sid, ALICE) is None


def test_a_failed_run_is_recorded_without_touching_the_transcript(stores: Stores) -> None:
    store = stores.sessions()
    sid = store.create(ALICE).id
    store.record_failure(sid, ALICE, trace_id="tr-9", error="model timed out")
    info = store.get(sid, ALICE)
    assert info is not None and info.state == "failed" and info.last_error == "model timed out"
    assert info.message_count == 0


def test_user_memories_are_deduplicated_bounded_and_kept_per_tenant(stores: Stores) -> None:
    memories = stores.memories(max_per_user=3)
    first = memories.remember(ALICE, "偏好中文回答")
    assert memories.remember(ALICE, "  偏好中文回答\n").id == first.id
    for fact in ("owns a P20", "lives in Hangzhou", "prefers short answers"):
        memories.remember(ALICE, fact)
    assert [m.content for m in memories.recall(ALICE)] == [
        "owns a P20",
        "lives in Hangzhou",
        "prefers short answers",
    ]
    assert memories.recall(BOB) == []
    assert memories.forget(BOB, first.id) is False
    with pytest.raises(ValueError, match="at most"):
        memories.remember(ALICE, "x" * 501)


@pytest.mark.anyio
async def test_the_remember_tool_saves_for_the_injected_caller_only(stores: Stores) -> None:
    from shelfhand.core.context import RunContext

    memories = stores.memories()
    remember = make_remember_tool(memories)
    assert set(remember.schema()["function"]["parameters"]["properties"]) == {"fact"}
    out = await remember.invoke({"fact": "Owns the P20 projector"}, run=RunContext(user=ALICE))
    assert out.content == "saved: Owns the P20 projector"
    assert [m.content for m in memories.recall(ALICE)] == ["Owns the P20 projector"]
    assert memories.recall(BOB) == []


@pytest.mark.anyio
async def test_a_script_file_plays_turns_and_failures_in_order(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    script = [
        [{"tool_call": "retrieve", "arguments": {"query": "保修"}}, {"tool_call": "current_time"}],
        {"text": "答案 [1]"},
        {"error": "timeout", "message": "slow"},
        {"error": "provider", "status": 503},
    ]
    path.write_text(json.dumps(script, ensure_ascii=False), encoding="utf-8")
    model = load_scripted_model(path)
    assert isinstance(model, ScriptedModel)
    reply = (await model.request([Message.user("q")])).message
    assert [c.name for c in reply.tool_calls] == ["retrieve", "current_time"]
    assert (await model.request([Message.user("q")])).message.text == "答案 [1]"
    with pytest.raises(ModelTimeoutError, match="slow"):
        await model.request([Message.user("q")])
    with pytest.raises(ModelProviderError) as failed:
        await model.request([Message.user("q")])
    assert failed.value.status_code == 503


@pytest.mark.anyio
async def test_a_cycling_script_replays_per_user_message_whatever_the_interleaving(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cycle.json"
    turns = [{"tool_call": "retrieve", "arguments": {"query": "x"}}, "done"]
    path.write_text(json.dumps({"cycle": True, "turns": turns}), encoding="utf-8")
    model = load_scripted_model(path)
    assert isinstance(model, CyclingScriptModel)
    a = [Message.user("a")]
    b = [Message.user("b")]
    assert (await model.request(a)).message.tool_calls
    assert (await model.request(b)).message.tool_calls
    a.append(Message.assistant(tool_calls=[ToolCallBlock(id="1", name="retrieve")]))
    assert (await model.request(a)).message.text == "done"


def test_a_broken_script_file_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    for content in ("{not json", '{"turns": [{"unknown": 1}]}', '{"turns": 3}'):
        path.write_text(content, encoding="utf-8")
        with pytest.raises(ConfigurationError):
            load_scripted_model(path)
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_scripted_model(tmp_path / "missing.json")
