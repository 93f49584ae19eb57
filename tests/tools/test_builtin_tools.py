"""Built-in tools: current_time, calculator, http_get (docs/design.md T6)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler

import pytest

from shelfhand.core.context import RunContext
from shelfhand.core.errors import ToolArgumentError, ToolPermissionError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.tools import Toolkit
from shelfhand.tools.builtins import builtin_tools, calculator, current_time, make_http_get
from support.loopback import serving

RUN = RunContext()


# --- current_time ----------------------------------------------------------------------------
def test_current_time_in_a_named_zone() -> None:
    text = current_time("Asia/Shanghai")
    stamp = datetime.fromisoformat(text.split(" ", 1)[0])
    assert stamp.utcoffset() == timedelta(hours=8)
    assert abs(stamp - datetime.now(stamp.tzinfo)) < timedelta(minutes=1)
    assert text.endswith("Asia/Shanghai)")


def test_current_time_defaults_to_utc() -> None:
    assert "+00:00" in current_time()


def test_an_unknown_time_zone_is_a_clear_error() -> None:
    with pytest.raises(ToolArgumentError, match="unknown time zone 'Mars/Olympus'"):
        current_time("Mars/Olympus")
    with pytest.raises(ToolArgumentError, match="IANA"):
        current_time("../../etc/passwd")


# --- calculator ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", "7"),
        ("(1299 * 3) * 0.9", "3507.3"),
        ("7 // 2", "3"),
        ("7 % 4", "3"),
        ("2 ** 10", "1024"),
        ("2^10", "1024"),
        ("-3 + +5", "2"),
        ("10 / 4", "2.5"),
        ("0.1 + 0.2", "0.3"),
        ("sqrt(16) + abs(-2)", "6"),
        ("round(3.14159, 2)", "3.14"),
        ("max(1, 5, 3) - min(4, 2)", "3"),
        ("log(e)", "1"),
        ("cos(0) + sin(0)", "1"),
        ("pi", "3.14159265358979"),
        ("（１２＋８）×３÷４", "15"),
        ("2 ** -1", "0.5"),
    ],
)
def test_calculator_evaluates_arithmetic(expression: str, expected: str) -> None:
    assert calculator(expression) == expected


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("().__class__", "attribute access is not allowed"),
        ("(1, 2)", "a tuple is not allowed"),
        ("(1).__class__", "attribute access is not allowed"),
        ("9**9**9", "too large"),
        ("10 ** 100000", "too large"),
        ("2.0 ** 100000", "too large"),
        ("open('x')", "unknown function 'open'"),
        ("x + 1", "unknown name 'x'"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("1 / 0", "division by zero"),
        ("sqrt(-1)", "math domain error"),
        ("(-8) ** 0.5", "not a real number"),
        ("lambda: 1", "a lambda is not allowed"),
        ("[1] * 10", "a list is not allowed"),
        ("1 if 1 else 2", "if/else is not allowed"),
        ("1 < 2", "a comparison is not allowed"),
        ("round(1.5, 10**9)", "round()"),
        ("max(*[1, 2])", "positional arguments only"),
        ("1 +", "cannot parse"),
        ("", "empty"),
        ("1+" * 300 + "1", "longer than 500"),
        ("math.sqrt(4)", "unknown function 'math.sqrt'"),
    ],
)
def test_calculator_refuses_hostile_or_bad_input(expression: str, reason: str) -> None:
    with pytest.raises(ToolArgumentError) as info:
        calculator(expression)
    assert reason in str(info.value)


def test_builtin_tools_are_read_only_and_listed() -> None:
    tools = builtin_tools()
    assert [t.name for t in tools] == ["current_time", "calculator", "http_get"]
    assert all(t.read_only and t.concurrency_safe for t in tools)


# --- http_get against a real local server ----------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        port = self.server.server_address[1]
        routes = {
            "/hello": (
                200,
                {"Content-Type": "text/plain; charset=utf-8"},
                "你好, shelfhand".encode(),
            ),
            "/gbk": (200, {"Content-Type": "text/plain; charset=gbk"}, "保修期两年".encode("gbk")),
            "/big": (200, {"Content-Type": "text/plain"}, b"a" * 300_000),
            "/binary": (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n" + bytes(64)),
            "/missing": (404, {"Content-Type": "text/plain"}, b"no such page"),
            "/busy": (503, {"Content-Type": "text/plain"}, b"try later"),
            "/to-hello": (302, {"Location": "/hello"}, b""),
            "/to-loopback": (302, {"Location": f"http://127.0.0.2:{port}/hello"}, b""),
            "/to-ftp": (302, {"Location": "ftp://example.com/file"}, b""),
            "/loop": (302, {"Location": "/loop"}, b""),
            "/host": (200, {"Content-Type": "text/plain"}, str(self.headers["Host"]).encode()),
        }
        status, headers, body = routes.get(self.path, (404, {}, b""))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with serving(_Handler) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.mark.anyio
async def test_http_get_refuses_loopback_by_default(server_url: str) -> None:
    http_get = make_http_get()
    with pytest.raises(ToolPermissionError, match="non-public address"):
        await http_get.invoke({"url": f"{server_url}/hello"}, run=RUN)
    with pytest.raises(ToolPermissionError):
        await http_get.invoke({"url": "http://localhost:9/"}, run=RUN)
    with pytest.raises(ToolPermissionError):
        await http_get.invoke({"url": "http://[::ffff:127.0.0.1]:9/"}, run=RUN)


@pytest.mark.anyio
async def test_http_get_refusal_reaches_the_model_as_an_error_result(server_url: str) -> None:
    kit = Toolkit(builtin_tools())
    call = ToolCallBlock(id="c1", name="http_get", arguments=f'{{"url": "{server_url}/hello"}}')
    result = await kit.call(call, RUN)
    assert result.is_error
    assert result.content.startswith("tool http_get failed: ToolPermissionError: refusing to fetch")


@pytest.mark.anyio
async def test_http_get_fetches_text_when_private_addresses_are_allowed(server_url: str) -> None:
    http_get = make_http_get(allow_private=True)
    out = await http_get.invoke({"url": f"{server_url}/hello"}, run=RUN)
    assert not out.is_error
    assert out.content.startswith(f"HTTP 200 OK from {server_url}/hello")
    assert out.content.endswith("你好, shelfhand")
    gbk = await http_get.invoke({"url": f"{server_url}/gbk"}, run=RUN)
    assert gbk.content.endswith("保修期两年")


@pytest.mark.anyio
async def test_http_get_sends_the_host_name_not_the_pinned_address(server_url: str) -> None:
    http_get = make_http_get(allow_private=True)
    out = await http_get.invoke({"url": f"{server_url}/host"}, run=RUN)
    assert out.content.endswith(server_url.removeprefix("http://"))


@pytest.mark.anyio
async def test_http_get_truncates_at_the_size_cap(server_url: str) -> None:
    http_get = make_http_get(allow_private=True, max_bytes=1000)
    out = await http_get.invoke({"url": f"{server_url}/big"}, run=RUN)
    body = out.content.split("\n\n", 1)[1]
    assert body.startswith("a" * 1000)
    assert "a" * 1001 not in body
    assert body.endswith("[truncated: only the first 1000 bytes were read]")


@pytest.mark.anyio
async def test_http_get_refuses_schemes_other_than_http(server_url: str) -> None:
    http_get = make_http_get(allow_private=True)
    for url in ("file:///etc/passwd", "ftp://example.com/x", "gopher://127.0.0.1/"):
        with pytest.raises(ToolArgumentError, match="only http and https"):
            await http_get.invoke({"url": url}, run=RUN)
    with pytest.raises(ToolArgumentError, match="only http and https"):
        await http_get.invoke({"url": f"{server_url}/to-ftp"}, run=RUN)


@pytest.mark.anyio
async def test_http_get_follows_redirects_and_checks_each_hop(server_url: str) -> None:
    followed = await make_http_get(allow_private=True).invoke(
        {"url": f"{server_url}/to-hello"}, run=RUN
    )
    assert followed.content.startswith(f"HTTP 200 OK from {server_url}/hello")
    # 127.0.0.1 is trusted by name; the redirect to 127.0.0.2 (loopback too) is not.
    trusting = make_http_get(allowed_hosts=["127.0.0.1"])
    direct = await trusting.invoke({"url": f"{server_url}/hello"}, run=RUN)
    assert direct.content.endswith("你好, shelfhand")
    with pytest.raises(ToolPermissionError, match=r"127\.0\.0\.2"):
        await trusting.invoke({"url": f"{server_url}/to-loopback"}, run=RUN)


@pytest.mark.anyio
async def test_http_get_stops_after_five_redirects(server_url: str) -> None:
    kit = Toolkit([make_http_get(allow_private=True)])
    call = ToolCallBlock(id="c1", name="http_get", arguments=f'{{"url": "{server_url}/loop"}}')
    result = await kit.call(call, RUN)
    assert result.is_error
    assert "too many redirects" in result.content


@pytest.mark.anyio
async def test_http_get_reports_status_errors_and_hides_binary(server_url: str) -> None:
    kit = Toolkit([make_http_get(allow_private=True)])

    async def get(path: str) -> tuple[bool, str]:
        arguments = f'{{"url": "{server_url}{path}"}}'
        result = await kit.call(ToolCallBlock(id="c", name="http_get", arguments=arguments), RUN)
        return result.is_error, result.content

    missing_error, missing = await get("/missing")
    assert missing_error and missing.startswith("HTTP 404") and missing.endswith("no such page")
    busy_error, busy = await get("/busy")
    # a 503 is transient and http_get is read-only: the governance layer retried it (T5)
    assert busy_error and busy.startswith(
        "tool http_get failed after 3 attempts: TransientToolError: HTTP 503"
    )
    binary_error, binary = await get("/binary")
    assert not binary_error and binary.endswith("[72 bytes of binary content not shown]")


@pytest.mark.anyio
async def test_current_time_is_never_served_from_the_result_cache() -> None:
    from shelfhand.core.context import RunContext
    from shelfhand.core.messages import ToolCallBlock
    from shelfhand.tools import Toolkit
    from shelfhand.tools.builtins import current_time

    kit = Toolkit([current_time])
    call = ToolCallBlock(id="c1", name="current_time", arguments="{}")
    first = await kit.execute(call, RunContext())
    second = await kit.execute(call, RunContext())
    assert not first.replayed and not second.replayed


@pytest.mark.anyio
async def test_inline_sync_tools_run_on_the_event_loop_thread_and_others_do_not() -> None:

    from shelfhand.core.context import RunContext
    from shelfhand.tools import tool

    @tool(inline=True)
    def where_inline() -> str:
        """Report the thread."""
        return threading.current_thread().name

    @tool
    def where_default() -> str:
        """Report the thread."""
        return threading.current_thread().name

    loop_thread = threading.current_thread().name
    assert (await where_inline.invoke({}, run=RunContext())).content == loop_thread
    assert (await where_default.invoke({}, run=RunContext())).content != loop_thread
