"""The trace store, on SQLite and on PostgreSQL: spans written in batches by the recorder,
read back per tenant (a user sees their own traces, an admin all of the tenant's, another
tenant nothing, even under the same trace id), and kept for a retention period."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from shelfhand.core.context import UserContext
from shelfhand.core.tracing import Tracer, enter, leave, start_span
from shelfhand.traces import SqliteTraceStore, SqlTraceStore, StoreRecorder
from shelfhand.traces.store import EncodedTrace
from support.pg import pg_pool

ALICE = UserContext(tenant_id="acme", user_id="alice")
BOB = UserContext(tenant_id="acme", user_id="bob")
ADMIN = UserContext(tenant_id="acme", user_id="root", roles=["admin"])
MALLORY = UserContext(tenant_id="other", user_id="alice")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlTraceStore]:
    if request.param == "sqlite":
        found: SqlTraceStore = SqliteTraceStore(tmp_path / "traces.db")
        yield found
        found.close()
        return
    from shelfhand.traces.pg import PgTraceStore

    with pg_pool(request) as (pool, url):
        yield PgTraceStore(pool, url=url)


def record_turn(tracer: Tracer, owner: UserContext, trace_id: str, question: str) -> None:
    root = tracer.start_root(
        "turn", trace_id=trace_id, tenant_id=owner.tenant_id, user_id=owner.user_id
    )
    token = enter(root)
    retrieval = start_span("retrieval", "retrieval")
    assert retrieval is not None
    retrieval.update({"gen_ai.retrieval.query.text": question, "hits": [{"id": "d1::0"}]})
    retrieval.event("degraded", reason="无向量")
    retrieval.end()
    root.update({"gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 5})
    leave(root, token)


def test_spans_are_read_back_as_the_tree_by_their_owner(store: SqlTraceStore) -> None:
    recorder = StoreRecorder(store, interval=60)
    record_turn(Tracer([recorder]), ALICE, "trace-0001", "退货政策")
    recorder.flush()
    spans = store.spans("trace-0001", ALICE)
    assert spans is not None
    root, retrieval = spans
    assert (root.name, root.parent_id) == ("turn", "")
    assert retrieval.parent_id == root.span_id
    assert retrieval.attributes["gen_ai.retrieval.query.text"] == "退货政策"
    assert retrieval.events[0]["attributes"] == {"reason": "无向量"}
    (listed,) = store.recent(ALICE)
    assert (listed.trace_id, listed.input_tokens, listed.output_tokens) == ("trace-0001", 12, 5)
    recorder.close()


def test_another_user_sees_nothing_an_admin_sees_the_tenant_and_another_tenant_nothing(
    store: SqlTraceStore,
) -> None:
    recorder = StoreRecorder(store, interval=60)
    tracer = Tracer([recorder])
    record_turn(tracer, ALICE, "shared-id-1", "alice's question")
    # another tenant picks the same trace id: its trace is its own
    record_turn(tracer, MALLORY, "shared-id-1", "mallory's question")
    recorder.flush()
    assert store.spans("shared-id-1", BOB) is None
    assert store.recent(BOB) == []
    admin_view = store.spans("shared-id-1", ADMIN, all_users=True)
    assert admin_view is not None
    assert admin_view[1].attributes["gen_ai.retrieval.query.text"] == "alice's question"
    other = store.spans("shared-id-1", MALLORY)
    assert other is not None
    assert other[1].attributes["gen_ai.retrieval.query.text"] == "mallory's question"
    assert [t.user_id for t in store.recent(ADMIN, all_users=True)] == ["alice"]
    recorder.close()


def test_retention_keeps_the_newest_traces_with_their_spans(store: SqlTraceStore) -> None:
    recorder = StoreRecorder(store, interval=60)
    tracer = Tracer([recorder])
    for i in range(5):
        record_turn(tracer, ALICE, f"trace-{i:04d}", f"q{i}")
    recorder.flush()
    assert store.prune(max_traces=2) == 3
    assert [t.trace_id for t in store.recent(ALICE)] == ["trace-0004", "trace-0003"]
    assert store.spans("trace-0000", ALICE) is None
    assert store.prune(max_age_days=1) == 0
    assert store.prune(max_age_days=-1) == 2  # everything is older than tomorrow
    recorder.close()


def test_a_trace_written_over_several_writes_and_older_one_row_spans_read_as_one_tree(
    store: SqlTraceStore,
) -> None:
    recorder = StoreRecorder(store, interval=60)
    tracer = Tracer([recorder])
    root = tracer.start_root("turn", trace_id="trace-split", tenant_id="acme", user_id="alice")
    token = enter(root)
    retrieval = start_span("retrieval", "retrieval")
    assert retrieval is not None
    retrieval.end()
    tracer.flush()  # the retrieval is stored before its turn ends
    lookup = start_span("execute_tool lookup", "tool", attributes={"gen_ai.tool.name": "查询"})
    assert lookup is not None
    lookup.end()
    leave(root, token)
    recorder.flush()
    with store.database.transaction() as conn:  # a span stored one per row, the older layout
        conn.execute(
            store._sql(
                "INSERT INTO {spans} (tenant, trace_id, span_id, parent_id, name, kind, "
                "start_ns, end_ns, status, attributes, events) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            ("acme", "trace-split", "00000000000000ff", root.span_id, "chat old", "chat",
             lookup.end_ns + 1000, lookup.end_ns + 2000, "ok", '{"gen_ai.request.model": "m"}',
             '[{"name": "e", "time_ns": 1, "attributes": {}}]'),
        )  # fmt: skip
    spans = store.spans("trace-split", ALICE)
    assert spans is not None
    assert [s.name for s in spans] == ["turn", "retrieval", "execute_tool lookup", "chat old"]
    assert {s.parent_id for s in spans[1:]} == {root.span_id}
    assert spans[2].attributes == {"gen_ai.tool.name": "查询"}
    assert spans[3].attributes == {"gen_ai.request.model": "m"}
    assert spans[3].events == ({"name": "e", "time_ns": 1, "attributes": {}},)
    assert store.prune(max_age_days=-1) == 1
    with store.database.connection() as conn:
        for table in ("{spans}", "{span_batches}"):
            assert conn.execute(store._sql(f"SELECT count(*) FROM {table}")).fetchone()[0] == 0
    recorder.close()


class SignallingStore(SqliteTraceStore):
    """Says when a batch has been written."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.written = threading.Event()

    def write_encoded(self, traces: Sequence[EncodedTrace]) -> None:
        super().write_encoded(traces)
        self.written.set()


def test_the_recorder_writes_a_finished_trace_without_being_asked(tmp_path: Path) -> None:
    store = SignallingStore(tmp_path / "traces.db")
    recorder = StoreRecorder(store, interval=3600, batch=2)  # only the batch can wake it
    record_turn(Tracer([recorder]), ALICE, "trace-auto", "q")
    assert store.written.wait(10)
    assert [t.trace_id for t in store.recent(ALICE)] == ["trace-auto"]
    recorder.close()
    store.close()


def test_attributes_json_cannot_hold_as_such_are_stored_as_text(tmp_path: Path) -> None:
    store = SqliteTraceStore(tmp_path / "traces.db")
    tracer = Tracer([StoreRecorder(store, interval=3600)])
    with tracer.root("turn", trace_id="trace-odd", tenant_id="acme", user_id="alice") as root:
        root.update({"shelfhand.by_page": {3: "第三页"}, "shelfhand.big": 2**70})
        root.set("shelfhand.when", tmp_path)
    tracer.flush()
    [stored] = store.spans("trace-odd", ALICE) or []
    assert stored.attributes["shelfhand.by_page"] == {"3": "第三页"}
    assert stored.attributes["shelfhand.big"] == 2**70
    assert stored.attributes["shelfhand.when"] == str(tmp_path)
    tracer.close()


def test_text_that_is_not_valid_unicode_is_stored_escaped_with_the_rest_of_its_batch(
    store: SqlTraceStore,
) -> None:
    # a model-written argument can hold a lone surrogate ("\ud800" in its JSON): its trace
    # is stored, escaped, and so is every other trace written with it (the batch failed
    # whole before, on SQLite)
    recorder = StoreRecorder(store, interval=3600)
    tracer = Tracer([recorder])
    record_turn(tracer, ALICE, "trace-plain", "退货政策")
    with tracer.root("turn", trace_id="trace-odd", tenant_id="acme", user_id="alice") as root:
        root.update({"gen_ai.tool.call.arguments": "订单\ud800号", "shelfhand.ok": "保修"})
    recorder.flush()
    [odd] = store.spans("trace-odd", ALICE) or []
    assert odd.attributes["gen_ai.tool.call.arguments"] == "订单\ud800号"
    assert odd.attributes["shelfhand.ok"] == "保修"
    _, retrieval = store.spans("trace-plain", ALICE) or []
    assert retrieval.attributes["gen_ai.retrieval.query.text"] == "退货政策"
    recorder.close()


@pytest.mark.parametrize(
    ("attributes", "outcome"),
    [
        ({"shelfhand.turn.stop_reason": "final"}, ""),
        ({"shelfhand.turn.stop_reason": "final", "shelfhand.answer.fallback_reason": "refusal"},
         "refusal"),
        ({"shelfhand.turn.stop_reason": "model_timeout",
          "shelfhand.answer.fallback_reason": "model_timeout"}, "model_timeout"),
        ({"shelfhand.run.stop_reason": "max_iterations"}, "max_iterations"),
        ({}, ""),
    ],
)  # fmt: skip
def test_a_trace_is_listed_with_how_its_turn_ended(
    store: SqlTraceStore, attributes: dict[str, str], outcome: str
) -> None:
    recorder = StoreRecorder(store, interval=60)
    tracer = Tracer([recorder])
    root = tracer.start_root("turn", trace_id="trace-0002", tenant_id="acme", user_id="alice")
    root.update(attributes)
    root.end()
    recorder.flush()
    (listed,) = store.recent(ALICE)
    assert listed.outcome == outcome and listed.to_dict()["outcome"] == outcome
    found = store.summary("trace-0002", ALICE)
    assert found is not None and found.outcome == outcome
    recorder.close()


def test_a_traces_db_from_before_outcomes_is_upgraded_and_its_traces_still_listed(
    tmp_path: Path,
) -> None:
    from shelfhand.core.db import SqliteDatabase
    from shelfhand.traces.store import MIGRATIONS

    older = SqliteDatabase(tmp_path / "traces.db", MIGRATIONS[:2])
    with older.transaction() as conn:
        conn.execute(
            "INSERT INTO traces (tenant, trace_id, user_id, name, start_ns, end_ns, status, "
            "input_tokens, output_tokens) VALUES ('acme', 'old-trace-1', 'alice', 'turn', 1, 2, "
            "'ok', 3, 4)"
        )
    older.close()
    store = SqliteTraceStore(tmp_path / "traces.db")
    (listed,) = store.recent(ALICE)
    assert (listed.trace_id, listed.input_tokens, listed.outcome) == ("old-trace-1", 3, "")
    store.close()


def test_traces_are_listed_by_how_their_turns_ended(store: SqlTraceStore) -> None:
    from shelfhand.traces.store import ANY_OUTCOME

    recorder = StoreRecorder(store, interval=60)
    tracer = Tracer([recorder])
    for n, reason in enumerate(["", "refusal", "", "model_timeout", "refusal"]):
        root = tracer.start_root("turn", trace_id=f"trace-{n}", tenant_id="acme", user_id="alice")
        root.start_ns = n + 1  # (newest last)
        if reason:
            root.set("shelfhand.answer.fallback_reason", reason)
        root.end()
    recorder.flush()

    def listed(outcome: str | None, owner: UserContext = ALICE) -> list[str]:
        return [t.trace_id for t in store.recent(owner, outcome=outcome, all_users=owner is ADMIN)]

    assert listed("refusal") == ["trace-4", "trace-1"]
    assert listed(ANY_OUTCOME) == ["trace-4", "trace-3", "trace-1"]
    assert listed(None) == ["trace-4", "trace-3", "trace-2", "trace-1", "trace-0"]
    assert listed("refusal", ADMIN) == ["trace-4", "trace-1"]
    assert listed("refusal", BOB) == [] and listed("off_topic") == []
    recorder.close()
