"""A team's tool fails with a secret in its error: the logs, the model and the audit log never
see it.

An HTTP client's error names the whole URL it called, query string included, so a tool that
puts its service's token in the URL raises an exception whose message holds the token. The
governance pipeline logged that exception's traceback word for word and gave its message to
the model (which may repeat it to the user).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shelfhand import Agent, Approvals, Toolkit, UserContext, tool
from shelfhand.core.secrets import RedactSecrets, redact_text
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.audit import AuditLog
from shelfhand.tools.governance import GovernancePolicy
from support.loopback import Refusing, serving

TOKEN = "s3cr3t-7f1c"
PASSWORD = "hunter2-pw"


@pytest.fixture
def orders_url() -> Iterator[str]:
    with serving(Refusing) as port:
        yield f"http://127.0.0.1:{port}/orders"


@pytest.mark.anyio
async def test_a_tool_error_naming_a_token_reaches_no_log_model_or_audit_row(
    orders_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    @tool(read_only=True)
    async def order_status(order_id: str) -> str:
        """The status of one order."""
        async with httpx.AsyncClient() as client:
            reply = await client.get(orders_url, params={"id": order_id, "token": TOKEN})
            reply.raise_for_status()  # 401: names the URL, token included
            return reply.text

    audit = AuditLog(tmp_path / "audit.db")
    kit = Toolkit([order_status], policy=GovernancePolicy(retries=0), audit=audit)
    model = ScriptedModel([tool_call("order_status", {"order_id": "SO-1001"}), text("稍后再试")])
    caplog.set_level(logging.DEBUG, logger="shelfhand")
    result = await Agent(model=model, toolkit=kit).run(
        "SO-1001 到哪了", context=UserContext(tenant_id="acme", user_id="alice")
    )

    told = [r.content for m in result.messages for r in m.tool_results]
    assert len(told) == 1
    assert "HTTPStatusError" in told[0] and "401" in told[0]
    assert "token=[REDACTED]" in told[0]  # what was wrong stays readable
    assert "SO-1001" in told[0]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTPStatusError" in logged and "Traceback" in logged  # the operator still sees it
    assert TOKEN not in logged
    assert TOKEN not in "\n".join(str(m) for m in result.messages)
    rows = audit.query()
    assert [r.outcome for r in rows] == ["error"]
    assert TOKEN not in repr(rows)
    audit.close()


@pytest.mark.anyio
async def test_an_approval_handler_error_is_redacted_in_the_reason_and_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool(confirm=True)
    def create_return(order_id: str) -> str:
        """Create a return for one of the caller's orders."""
        return f"RMA-{order_id}"

    def handler(request: object) -> bool:
        raise ConnectionError(f"POST https://ops:{PASSWORD}@hooks.example/approve failed")

    caplog.set_level(logging.DEBUG, logger="shelfhand")
    model = ScriptedModel([tool_call("create_return", {"order_id": "SO-1001"}), text("好的。")])
    result = await Agent(
        model=model, toolkit=Toolkit([create_return]), approvals=Approvals(handler=handler)
    ).run("退货", context=UserContext(tenant_id="acme", user_id="bob"))
    told = result.messages[2].tool_results[0].content
    assert "approval handler failed: ConnectionError" in told
    assert "ops:[REDACTED]@hooks.example" in told
    assert PASSWORD not in "\n".join(str(m) for m in result.messages)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "approval handler failed" in logged and "Traceback" in logged
    assert PASSWORD not in logged


@pytest.mark.parametrize(
    ("text_in", "text_out"),
    [
        (
            "Client error '401 Unauthorized' for url 'https://api.x/v1/o?id=1&token=abc123&page=2'",
            "Client error '401 Unauthorized' for url 'https://api.x/v1/o?id=1&token=[REDACTED]&page=2'",
        ),
        ("postgresql://app:pa55@db:5432/shop", "postgresql://app:[REDACTED]@db:5432/shop"),
        ('{"api_key": "sk-live-1", "q": "x"}', '{"api_key": "[REDACTED]", "q": "x"}'),
        ("Authorization: Bearer eyJhbGciOi.x.y", "Authorization: Bearer [REDACTED]"),
        ("X-Api-Key: k-99 refused", "X-Api-Key: [REDACTED] refused"),
        ("access_token=zz; Path=/", "access_token=[REDACTED]; Path=/"),
        ("PASSWORD='p w' rejected", "PASSWORD='[REDACTED]' rejected"),
        ("订单服务拒绝了请求 (token：abc)", "订单服务拒绝了请求 (token：[REDACTED])"),
        ("connection refused to http://orders.internal:8080/v1", None),
        ('password authentication failed for user "app"', None),
        ("tool order_status timed out after 2 s", None),
    ],
)
def test_redact_text(text_in: str, text_out: str | None) -> None:
    assert redact_text(text_in) == (text_in if text_out is None else text_out)


def test_a_handler_with_redact_secrets_prints_no_library_s_secret(orders_url: str) -> None:
    """httpx logs every request's URL at INFO, a token in the query string included; a
    traceback's messages and uvicorn's access line (its path an argument) are redacted too."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    handler.addFilter(RedactSecrets())
    root = logging.getLogger()
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        httpx.get(orders_url, params={"id": "SO-1001", "token": TOKEN}, timeout=5)
        try:
            raise ConnectionError(f"postgresql://app:{PASSWORD}@db/shop refused")
        except ConnectionError:
            logging.getLogger("shelfhand.test").exception("the order database failed")
        # uvicorn's access line, handled here: uvicorn's own set-up (another test's server)
        # keeps its logger's records from the root's handlers
        args = ("127.0.0.1:5", "GET", f"/o?token={TOKEN}", "1.1", 200)
        access = {"name": "uvicorn.access", "msg": '%s - "%s %s HTTP/%s" %d', "args": args}
        handler.handle(logging.makeLogRecord(access))
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    printed = stream.getvalue()
    assert "httpx HTTP Request: GET" in printed and "token=[REDACTED]" in printed
    assert "app:[REDACTED]@db/shop" in printed and "Traceback" in printed
    assert '"GET /o?token=[REDACTED] HTTP/1.1" 200' in printed
    assert TOKEN not in printed and PASSWORD not in printed


@pytest.mark.anyio
async def test_a_tool_error_s_long_message_is_read_by_people_short_and_redacted() -> None:
    from shelfhand.core.errors import ToolError

    @tool(read_only=True, retries=0)
    def lookup(order_id: str) -> str:
        """Look an order up."""
        raise ToolError(f"token={TOKEN} " + "E" * 100_000 + "\nsecond line")

    model = ScriptedModel([tool_call("lookup", {"order_id": "SO-1"}), text("OK.")])
    result = await Agent(model=model, toolkit=Toolkit([lookup])).run(
        "where?", context=UserContext(tenant_id="acme", user_id="bob")
    )
    (failed,) = [r for m in result.messages for r in m.tool_results]
    assert failed.failure.startswith("failed: token=[REDACTED] EEE") and TOKEN not in failed.failure
    assert failed.failure.endswith("…") and len(failed.failure) < 300
