"""The audit log: one correct record per call, secrets redacted, queryable (docs/design.md T5)."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from governance_helpers import FakeClock, governance

from shelfhand import Agent, AuditLog, Toolkit, UserContext, tool
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.audit import masked_arguments, parse_since, redact
from shelfhand.tools.governance import Governance

ALICE = UserContext(tenant_id="acme", user_id="alice")
BOB = UserContext(tenant_id="acme", user_id="bob")
ROOT = Path(__file__).resolve().parents[2]


class Backend:
    """The audit log on SQLite (a file) or PostgreSQL (a fresh database): the same tests."""

    def __init__(self, kind: str, folder: Path, pg_url: str | None) -> None:
        self.kind = kind
        self.folder = folder
        self.pg_url = pg_url
        self.pool: Any = None

    def open(self, **kwargs: Any) -> AuditLog:
        if self.kind == "sqlite":
            return AuditLog(self.folder / "audit.db", **kwargs)
        from shelfhand.backends.postgres import open_pool
        from shelfhand.tools.pg_audit import PgAuditLog

        assert self.pg_url is not None
        if self.pool is None:
            self.pool = open_pool(self.pg_url, max_size=2)
        return PgAuditLog(self.pool, url=self.pg_url, **kwargs)

    def stored(self) -> bytes:
        """Everything written, as bytes (to look for leaked secrets)."""
        if self.kind == "sqlite":
            return b"".join(p.read_bytes() for p in self.folder.iterdir() if p.is_file())
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT audit_pg_log::text FROM audit_pg_log").fetchall()
        return "\n".join(r[0] for r in rows).encode()

    def count(self) -> int:
        """Rows in the table, read through a connection of its own."""
        if self.kind == "sqlite":
            other = sqlite3.connect(self.folder / "audit.db")
            try:
                return int(other.execute("SELECT COUNT(*) FROM audit_log").fetchone()[0])
            finally:
                other.close()
        with self.pool.connection() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM audit_pg_log").fetchone()[0])

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


@pytest.fixture(params=["sqlite", "pg"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    url = request.getfixturevalue("pg_url") if request.param == "pg" else None
    opened = Backend(request.param, tmp_path, url)
    yield opened
    opened.close()


@tool(read_only=True, retries=1, cache_ttl=300)
def query_stock(sku: str) -> str:
    """Stock of a SKU."""
    if sku == "BROKEN":
        raise ConnectionError("inventory down")
    return f"{sku}: 12"


@tool(permission="admin")
def delete_order(order_id: str) -> str:
    """Delete an order."""
    return "deleted"


@tool
def login(username: str, password: str, options: dict[str, object]) -> str:
    """Log in to the vendor portal."""
    return f"welcome {username}"


@pytest.mark.anyio
async def test_the_audit_log_holds_one_correct_record_per_call(
    backend: Backend, clock: FakeClock
) -> None:
    log = backend.open()
    gov = governance(clock)
    gov.audit = log
    kit = Toolkit([query_stock, delete_order, login], governance=gov)
    secret_options = {"Api_Key": "sk-should-not-leak", "nested": [{"Authorization": "Bearer x"}]}
    model = ScriptedModel(
        [
            [
                tool_call("query_stock", {"sku": "SKU2024-011"}, id="c1"),
                tool_call("query_stock", {"sku": "SKU2024-011"}, id="c2"),
            ],
            tool_call("query_stock", {"sku": "BROKEN"}, id="c3"),
            tool_call("delete_order", {"order_id": "SO-1"}, id="c4"),
            tool_call("no_such_tool", {}, id="c5"),
            tool_call(
                "login",
                {"username": "张三", "password": "hunter2", "options": secret_options},
                id="c6",
            ),
            text("done"),
        ]
    )
    result = await Agent(model=model, toolkit=kit).run("go", context=ALICE)
    records = log.query()
    assert [r.call_id for r in records] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert {r.trace_id for r in records} == {result.trace_id}
    assert len({r.request_id for r in records}) == 6
    assert all((r.tenant, r.user) == ("acme", "alice") for r in records)
    by_call = {r.call_id: r for r in records}
    # the two identical read-only calls ran concurrently: one executed, one shared
    first, second = by_call["c1"], by_call["c2"]
    assert (first.outcome, second.outcome) == ("ok", "ok")
    assert sorted([first.dedup_hit, second.dedup_hit]) == [False, True]
    assert first.args_hash == second.args_hash and len(first.args_hash) == 64
    assert first.arguments == '{"sku":"SKU2024-011"}' and first.decision == "allow"
    broken = by_call["c3"]
    assert (broken.outcome, broken.error_class, broken.attempts) == ("error", "ConnectionError", 2)
    assert (by_call["c4"].outcome, by_call["c4"].decision) == ("denied", "deny")
    assert (by_call["c5"].outcome, by_call["c5"].decision) == ("unknown_tool", "deny")
    secret = by_call["c6"]
    assert json.loads(secret.arguments) == {
        "username": "张三",
        "password": "[REDACTED]",
        "options": {"Api_Key": "[REDACTED]", "nested": [{"Authorization": "[REDACTED]"}]},
    }
    assert all(r.duration_ms >= 0 and r.ts > 0 for r in records)

    # a cache hit is a record of its own, marked as such
    model = ScriptedModel([tool_call("query_stock", {"sku": "SKU2024-011"}, id="c7"), text("ok")])
    await Agent(model=model, toolkit=kit).run("again", context=ALICE)
    hit = log.query(tool="query_stock")[-1]
    assert (hit.call_id, hit.cache_hit, hit.attempts) == ("c7", True, 0)
    log.close()
    stored = backend.stored()
    assert "张三".encode() in stored
    for leaked in (b"hunter2", b"sk-should-not-leak", b"Bearer x"):
        assert leaked not in stored


@pytest.mark.anyio
async def test_query_filters_by_tool_user_time_and_outcome(
    backend: Backend, tmp_path: Path
) -> None:
    with backend.open() as log:
        kit = Toolkit([query_stock], audit=log)
        for user, sku in ((ALICE, "A"), (BOB, "B"), (BOB, "BROKEN")):
            model = ScriptedModel([tool_call("query_stock", {"sku": sku}), text("ok")])
            await Agent(model=model, toolkit=kit).run("x", context=user)
        assert [r.arguments for r in log.query(user="bob")] == ['{"sku":"B"}', '{"sku":"BROKEN"}']
        assert [r.user for r in log.query(outcome="error")] == ["bob"]
        assert len(log.query(tool="query_stock", tenant="acme")) == 3
        assert log.query(tool="delete_order") == []
        assert len(log.query(since=time.time() - 60)) == 3
        assert log.query(since=datetime.now() + timedelta(minutes=1)) == []
        assert [r.arguments for r in log.query(limit=1)] == ['{"sku":"BROKEN"}']
        out = io.StringIO()
        assert log.export_jsonl(out, user="alice") == 1
        line = json.loads(out.getvalue())
        assert line["arguments"] == {"sku": "A"} and line["outcome"] == "ok"
        assert line["time"].endswith("+00:00")
        assert log.export_jsonl(tmp_path / "all.jsonl") == 3
        assert len((tmp_path / "all.jsonl").read_text(encoding="utf-8").splitlines()) == 3


def test_writes_are_batched_not_one_transaction_per_call(backend: Backend) -> None:
    log = backend.open(batch_size=1000, flush_interval=60)
    for i in range(3):
        log.record(
            tool="query_stock",
            tenant="acme",
            user="alice",
            trace_id="t",
            request_id=f"r{i}",
            call_id=f"c{i}",
            arguments={"sku": str(i)},
            canonical=None,
            decision="allow",
            outcome="ok",
            duration_ms=0.1,
        )
    assert backend.count() == 0
    assert log.flush() == 3
    assert backend.count() == 3
    log.record(
        tool="t",
        tenant="x",
        user="y",
        trace_id="t",
        request_id="r",
        call_id="c",
        arguments='{"broken',  # not JSON: hashed, never stored
        canonical=None,
        decision="allow",
        outcome="invalid_arguments",
        duration_ms=0.1,
    )
    log.close()  # writes what is left
    assert backend.count() == 4
    stored = backend.stored()
    assert b"<unparsed arguments, 8 chars>" in stored and b'{"broken' not in stored


def test_a_record_holding_half_a_surrogate_pair_loses_nothing_of_its_batch(
    backend: Backend,
) -> None:
    """Half of a surrogate pair in one caller's record (a model's JSON ``\\ud800`` escape in
    the arguments, or in the name of a tool it made up) failed the whole batch's write: every
    record of every caller buffered with it was lost. Now all are stored, the half as
    U+FFFD."""
    log = backend.open(batch_size=1000, flush_interval=60)
    calls = [
        ("alice", "query_stock", {"sku": "A-1"}, "ok"),
        ("bob", "query_stock", {"sku": "B-\ud800"}, "ok"),
        ("carol", "query_\udcb1", {"sku": "C-3"}, "unknown_tool"),
    ]
    for user, name, arguments, outcome in calls:
        log.record(
            tool=name,
            tenant="acme",
            user=user,
            trace_id="t",
            request_id=f"r-{user}",
            call_id=f"c-{user}",
            arguments=arguments,
            canonical=None,
            decision="allow",
            outcome=outcome,
            duration_ms=0.1,
        )
    assert log.flush() == 3
    assert backend.count() == 3
    records = {r.user: r for r in log.query()}
    log.close()
    assert ascii(records["bob"].arguments) == ascii('{"sku":"B-\ufffd"}')
    assert ascii(records["carol"].tool) == ascii("query_\ufffd")
    assert records["alice"].arguments == '{"sku":"A-1"}'


def test_redaction_covers_every_secret_name_at_any_depth() -> None:
    value = {
        "PASSWORD": "a",
        "passwd": "b",
        "client_secret": "c",
        "refresh_token": "d",
        "apikey": "e",
        "credentials": {"user": "f"},
        "query": "退货政策",
        "items": [{"x_api_key": "g", "sku": "S"}],
    }
    assert redact(value) == {
        "PASSWORD": "[REDACTED]",
        "passwd": "[REDACTED]",
        "client_secret": "[REDACTED]",
        "refresh_token": "[REDACTED]",
        "apikey": "[REDACTED]",
        "credentials": "[REDACTED]",
        "query": "退货政策",
        "items": [{"x_api_key": "[REDACTED]", "sku": "S"}],
    }


@pytest.mark.parametrize(
    "arguments",
    [
        '{"order_id": "A-1", "API_Key": "sk-live-1"}',
        '{"查询": "退货政策", "Authorization": "Bearer sk-live-1"}',
        '{"用户": "张三", "配置": {"client_SECRET": "sk-live-1"}}',
        '{"items": [{"x-Access-TOKEN": "sk-live-1", "数量": 2}]}',
        # letters outside ASCII that case-insensitive matching reads as i and s
        '{"credentİal": "sk-live-1"}',
        '{"credentıal": "sk-live-1"}',
        '{"paſſword": "sk-live-1"}',
    ],
)
def test_a_secret_looking_key_is_masked_in_any_case_among_chinese_and_english_keys(
    arguments: str,
) -> None:
    masked = masked_arguments(arguments)

    assert "sk-live-1" not in masked
    assert "[REDACTED]" in masked
    assert json.loads(masked) == redact(json.loads(arguments))


@pytest.mark.parametrize(
    "arguments", ['{"order_id": "A-1"}', '{"查询": "退货政策", "数量": 2}', '{"passage": "七天"}']
)
def test_arguments_without_a_secret_looking_key_are_shown_as_sent(arguments: str) -> None:
    assert masked_arguments(arguments) == arguments


def test_arguments_that_are_not_json_are_described_never_shown() -> None:
    assert masked_arguments("api_key=sk-live-1") == "<unparsed arguments, 17 chars>"


def test_since_reads_durations_and_iso_times() -> None:
    assert parse_since("90s", now=1000.0) == 910.0
    assert parse_since("1h", now=10_000.0) == 6400.0
    assert parse_since("2d", now=200_000.0) == 200_000.0 - 172_800
    iso = "2025-01-31T09:00:00+00:00"
    assert parse_since(iso) == datetime.fromisoformat(iso).timestamp()
    with pytest.raises(ValueError, match="30m"):
        parse_since("last tuesday")


def test_a_toolkit_without_an_audit_log_records_nothing() -> None:
    assert Toolkit([query_stock]).governance.audit is None
    assert isinstance(Toolkit().governance, Governance)


def _cli(*args: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(SHELFHAND_WORKSPACE=str(workspace), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "audit", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_audit_command_filters_and_exports_jsonl(tmp_path: Path) -> None:
    with AuditLog.for_workspace(tmp_path) as log:
        for user, tool_name, outcome in (
            ("alice", "query_stock", "ok"),
            ("bob", "create_return", "rejected"),
        ):
            log.record(
                tool=tool_name,
                tenant="acme",
                user=user,
                trace_id="t1",
                request_id=f"r-{user}",
                call_id=f"c-{user}",
                arguments={"order_id": "SO-1", "token": "tok-secret"},
                canonical=None,
                decision="ask" if outcome == "rejected" else "allow",
                outcome=outcome,
                duration_ms=1.5,
            )
    table = _cli("--since", "1h", workspace=tmp_path)
    assert table.returncode == 0, table.stderr
    assert "query_stock" in table.stdout and "create_return" in table.stdout
    assert "tok-secret" not in table.stdout
    jsonl = _cli("--jsonl", "--user", "bob", "--outcome", "rejected", workspace=tmp_path)
    assert jsonl.returncode == 0, jsonl.stderr
    [line] = [json.loads(x) for x in jsonl.stdout.splitlines()]
    assert (line["tool"], line["user"], line["arguments"]["token"]) == (
        "create_return",
        "bob",
        "[REDACTED]",
    )
    bad = _cli("--since", "last week", workspace=tmp_path)
    assert bad.returncode == 2 and "cannot read the time" in bad.stderr


def test_the_governed_tools_example_runs(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "governed_tools.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("approve create_return") and "'[REDACTED]'" in lines[0]
    assert lines[1] == "SKU2024-011 有货；退货单 RMA-SO-1001 已创建。"
    assert lines[2] == 'query_stock allow ok {"sku":"SKU2024-011"}'
    assert lines[3].startswith("create_return ask ok") and "tok-123" not in out.stdout
    assert (tmp_path / ".shelfhand" / "audit.db").is_file()
