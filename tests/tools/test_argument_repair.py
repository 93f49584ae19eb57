"""Bounded repair of model-written arguments: schema echoes and JSON strings are undone and
audited; every other undeclared argument (identity above all) is still refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from shelfhand import AuditLog, Toolkit, UserContext, tool
from shelfhand.core.context import RunContext
from shelfhand.core.messages import ToolCallBlock
from shelfhand.tools.repair import repair_arguments

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")


class Address(BaseModel):
    city: str
    street: str = ""


@tool(read_only=True)
def search_docs(ctx: UserContext, query: str, k: int = 3) -> str:
    """Search the caller's documents.

    Args:
        query: What to look for.
        k: How many passages.
    """
    return f"{ctx.user_id} searched {query!r} (k={k})"


@tool
def ship(order_id: str, address: Address, tags: list[str] | None = None) -> str:
    """Ship an order."""
    return f"{order_id} → {address.city} {tags or []}"


@tool(read_only=True)
def classify(type: str, title: str = "") -> str:
    """Classify a document type."""
    return f"type={type} title={title}"


def call(name: str, arguments: object, call_id: str = "c1") -> ToolCallBlock:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCallBlock(id=call_id, name=name, arguments=text)


async def run_one(
    kit: Toolkit, block: ToolCallBlock, user: UserContext = ALICE
) -> tuple[str, bool, tuple[str, ...]]:
    report = await kit.execute(block, RunContext.start(agent_name="t", user=user))
    return report.result.content, report.result.is_error, report.repairs


async def test_schema_keywords_echoed_into_the_arguments_are_dropped_and_audited(
    tmp_path: Path,
) -> None:
    with AuditLog(tmp_path / "audit.db") as log:
        kit = Toolkit([search_docs], audit=log)
        content, is_error, repairs = await run_one(
            kit,
            call(
                "search_docs",
                {
                    "query": "退货政策",
                    "type": "object",
                    "required": ["query"],
                    "additionalProperties": False,
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "title": "search_docs",
                },
            ),
        )
        records = log.query()

    assert not is_error, content
    assert content == "alice searched '退货政策' (k=3)"
    assert len(repairs) == 5 and all("JSON-schema keyword" in r for r in repairs)
    assert records[0].outcome == "ok"
    assert records[0].repairs == repairs
    assert json.loads(records[0].arguments) == {"query": "退货政策"}
    assert records[0].to_dict()["repairs"] == list(repairs)


async def test_arguments_wrapped_in_a_schema_properties_object_are_unwrapped() -> None:
    kit = Toolkit([search_docs])
    content, is_error, repairs = await run_one(
        kit,
        call(
            "search_docs",
            {"type": "object", "properties": {"query": "warranty", "k": 2}, "required": ["query"]},
        ),
    )

    assert (content, is_error) == ("alice searched 'warranty' (k=2)", False)
    assert repairs == ("unwrapped the arguments from a JSON-schema 'properties' object",)


async def test_arguments_sent_as_a_json_string_and_object_params_as_strings_are_decoded() -> None:
    kit = Toolkit([search_docs, ship])
    whole = json.dumps(json.dumps({"query": "E-203 故障"}, ensure_ascii=False))
    content, is_error, repairs = await run_one(kit, call("search_docs", whole))
    assert (content, is_error) == ("alice searched 'E-203 故障' (k=3)", False)
    assert repairs == ("decoded the arguments from a JSON string",)

    nested = {
        "order_id": "SO-1",
        "address": json.dumps({"city": "杭州"}, ensure_ascii=False),
        "tags": '["fragile"]',
    }
    content, is_error, repairs = await run_one(kit, call("ship", nested))
    assert (content, is_error) == ("SO-1 → 杭州 ['fragile']", False)
    assert set(repairs) == {
        "decoded the argument 'address' from a JSON string",
        "decoded the argument 'tags' from a JSON string",
    }


async def test_json_strings_after_whitespace_are_decoded_and_plain_text_is_left_alone() -> None:
    # the toolkit skips repair for arguments that cannot need it; a JSON string behind
    # whitespace still needs it
    kit = Toolkit([ship])
    spaced = {"order_id": "SO-2", "address": '\n  {"city": "深圳"}', "tags": ' \t["寄件"]'}
    content, is_error, repairs = await run_one(kit, call("ship", spaced))
    assert (content, is_error) == ("SO-2 → 深圳 ['寄件']", False)
    assert len(repairs) == 2

    kit = Toolkit([search_docs])
    content, is_error, repairs = await run_one(kit, call("search_docs", {"query": "  退货 [1]"}))
    assert (content, is_error, repairs) == ("alice searched '  退货 [1]' (k=3)", False, ())


async def test_an_injected_user_id_is_still_rejected_and_nothing_is_repaired_away(
    tmp_path: Path,
) -> None:
    with AuditLog(tmp_path / "audit.db") as log:
        kit = Toolkit([search_docs], audit=log)
        content, is_error, repairs = await run_one(
            kit, call("search_docs", {"query": "salaries", "type": "object", "user_id": "bob"})
        )
        records = log.query()

    assert is_error and "user_id" in content
    assert "searched" not in content  # the tool never ran
    assert repairs == ("dropped the JSON-schema keyword 'type'",)
    assert records[0].outcome == "invalid_arguments"
    assert records[0].repairs == repairs


async def test_declared_parameters_named_like_schema_keywords_are_kept() -> None:
    kit = Toolkit([classify])
    content, is_error, repairs = await run_one(
        kit, call("classify", {"type": "invoice", "title": "发票"})
    )

    assert (content, is_error, repairs) == ("type=invoice title=发票", False, ())


def test_string_parameters_keep_json_looking_text() -> None:
    parameters = search_docs.schema()["function"]["parameters"]
    arguments = {"query": '{"looks": "like json"}'}

    assert repair_arguments(arguments, parameters) == (arguments, [])


async def test_a_string_that_is_not_an_object_is_still_refused() -> None:
    kit = Toolkit([search_docs])
    content, is_error, _ = await run_one(kit, call("search_docs", json.dumps("just words")))

    assert is_error and "must be a JSON object" in content


def test_an_audit_log_written_before_repairs_existed_is_upgraded_in_place(tmp_path: Path) -> None:
    from shelfhand.core.db import apply_migrations, connect
    from shelfhand.tools.audit import AUDIT_MIGRATIONS

    path = tmp_path / "audit.db"
    old = connect(path)
    apply_migrations(old, AUDIT_MIGRATIONS[:1])
    old.execute(
        "INSERT INTO audit_log (ts, tool, tenant, user_id, trace_id, request_id, call_id, "
        "args_hash, arguments, decision, outcome, error_class, duration_ms, cache_hit, "
        "dedup_hit, attempts) VALUES (1, 'search_docs', 'acme', 'alice', 't', 'r', 'c', 'h', "
        "'{}', 'allow', 'ok', '', 1.0, 0, 0, 1)"
    )
    old.commit()
    old.close()

    with AuditLog(path) as log:
        log.record(
            tool="search_docs", tenant="acme", user="alice", trace_id="t2", request_id="r2",
            call_id="c2", arguments={"query": "x"}, canonical=None, decision="allow",
            outcome="ok", duration_ms=1.0, repairs=["dropped the JSON-schema keyword 'type'"],
        )  # fmt: skip
        records = log.query()

    assert [r.repairs for r in records] == [(), ("dropped the JSON-schema keyword 'type'",)]
