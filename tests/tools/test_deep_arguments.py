"""A model's arguments nested hundreds of levels deep: parsed, they failed the masking of the
trace and the audit log's redaction with ``RecursionError`` (a recursion per level), which
ended the run; 100,000 levels failed the parse itself the same way. Now arguments nested
deeper than 64 levels are not valid arguments (``parsed_arguments``): the toolkit refuses
the call, and nothing stores the secret they carry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shelfhand import Agent, AuditLog, Toolkit, tool
from shelfhand.core.messages import MAX_ARGUMENT_DEPTH, too_deep
from shelfhand.core.tracing import SpanList, Tracer, set_default_tracer
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.audit import masked_arguments


@tool(read_only=True)
def lookup(q: str, password: str = "") -> str:
    """Look a word up."""
    return "found"


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.fixture
def spans() -> Iterator[SpanList]:
    kept = SpanList()
    set_default_tracer(Tracer([kept]))
    yield kept
    set_default_tracer(None)


@pytest.mark.anyio
async def test_arguments_nested_nine_hundred_deep_are_refused_and_the_run_goes_on(
    tmp_path: Path, spans: SpanList
) -> None:
    audit = AuditLog(tmp_path / "audit.db")
    arguments = {"password": "s3cret-value", "q": nested(900)}
    model = ScriptedModel([tool_call("lookup", arguments), text("查不到。")])

    result = await Agent(model=model, toolkit=Toolkit([lookup], audit=audit)).run("查一下")
    audit.flush()
    (record,) = audit.query()
    audit.close()

    assert (result.stop_reason, result.output) == ("final", "查不到。")
    (refused,) = [r for m in result.messages for r in m.tool_results]
    assert refused.is_error
    assert f"not valid JSON (nested deeper than {MAX_ARGUMENT_DEPTH} levels" in refused.content
    assert record.outcome == "invalid_arguments"
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"s3cret-value" not in stored
    (span,) = [s for s in spans.spans if s.name == "execute_tool lookup"]
    assert "s3cret-value" not in str(span.attributes)


def test_the_depth_limit_is_exact_and_cheap_for_flat_arguments() -> None:
    assert not too_deep("{}", {"q": nested(MAX_ARGUMENT_DEPTH - 1)})  # 64 levels in all
    deep = {"q": nested(MAX_ARGUMENT_DEPTH)}
    assert too_deep("[" * 70, deep)
    assert not too_deep("[" * 70, {"q": [[1, 2]] * 70})  # many brackets, shallow


def test_arguments_too_deep_to_parse_are_masked_as_unparsed() -> None:
    deep = '{"password": "s3cret", "q": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert masked_arguments(deep) == f"<unparsed arguments, {len(deep)} chars>"
