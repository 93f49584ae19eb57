"""Circuit breakers keyed by tool and target, opened only by dependency-health failures (T5).

http_get runs against real HTTP servers on 127.0.0.1 (and a closed port for a dead target).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from governance_helpers import FakeClock, governance

from shelfhand import Toolkit, UserContext, tool
from shelfhand.core.breaker import CircuitBreaker
from shelfhand.core.context import RunContext
from shelfhand.core.errors import ToolArgumentError, ToolUnavailableError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.tools.builtins import http_target, make_http_get
from shelfhand.tools.limits import TargetBreakers
from support.loopback import serving

pytestmark = pytest.mark.anyio

TENANT_A = RunContext(user=UserContext(tenant_id="tenant-a", user_id="alice"))
TENANT_B = RunContext(user=UserContext(tenant_id="tenant-b", user_id="bob"))


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 404 if self.path == "/missing" else 200
        body = "没有这个页面".encode() if status == 404 else "库存：12 件".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def healthy_port() -> Iterator[int]:
    with serving(_Handler) as port:
        yield port


@pytest.fixture
def dead_port() -> int:
    """A loopback port nobody listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> ToolCallBlock:
    return ToolCallBlock(id="c1", name="http_get", arguments=f'{{"url": "{url}"}}')


async def test_a_failing_target_of_tenant_a_blocks_neither_tenant_b_nor_another_host(
    clock: FakeClock, healthy_port: int, dead_port: int
) -> None:
    kit = Toolkit([make_http_get(allow_private=True)], governance=governance(clock))
    dead = f"http://127.0.0.1:{dead_port}/api"
    failed = await kit.call(get(dead), TENANT_A)
    assert failed.content.startswith("tool http_get failed after 3 attempts")
    assert "ConnectError" in failed.content
    opened = await kit.call(get(dead), TENANT_A)  # attempts 4 and 5 fail: the breaker opens
    assert opened.content.startswith("tool http_get unavailable after 2 failed attempts")
    blocked = await kit.call(get(dead), TENANT_A)
    assert blocked.content.startswith(
        f"tool http_get unavailable: circuit for 127.0.0.1:{dead_port} (tenant tenant-a) open"
    )
    a_breaker = kit.governance.breaker("http_get", f"127.0.0.1:{dead_port} (tenant tenant-a)")
    assert a_breaker is not None and a_breaker.state == "open"

    # tenant B, a healthy target: goes through
    healthy = await kit.call(get(f"http://127.0.0.1:{healthy_port}/stock"), TENANT_B)
    assert not healthy.is_error and "库存：12 件" in healthy.content
    # tenant A itself, another host: goes through
    other_host = await kit.call(get(f"http://localhost:{healthy_port}/stock"), TENANT_A)
    assert not other_host.is_error and "库存：12 件" in other_host.content
    # tenant B, the very target that is failing for A: tried (and fails on its own merits)
    tried = await kit.call(get(dead), TENANT_B)
    assert "ConnectError" in tried.content and "circuit" not in tried.content


async def test_bad_input_never_opens_a_breaker(clock: FakeClock, healthy_port: int) -> None:
    executions = 0

    @tool(read_only=True, retries=0)
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        nonlocal executions
        executions += 1
        if order_id == "SO-1001":
            return "SO-1001: shipped"
        if order_id.startswith("SO-"):
            raise ToolArgumentError(f"no order {order_id}")
        raise ValueError(f"order ids start with SO-, not {order_id!r}")

    http_get = make_http_get(allow_private=False)  # loopback is refused: a permission error
    kit = Toolkit([lookup_order, http_get], governance=governance(clock, breaker_min_calls=1))
    bad_calls = [
        ToolCallBlock(id="c1", name="lookup_order", arguments='{"order_id": "订单-7"}'),
        ToolCallBlock(id="c2", name="lookup_order", arguments='{"order_id": "SO-404"}'),
        ToolCallBlock(id="c3", name="lookup_order", arguments='{"order_id": 17}'),
        ToolCallBlock(id="c4", name="lookup_order", arguments="{not json"),
        get("http://no-such-host.invalid/"),
        get("ftp://127.0.0.1/file"),
        get(f"http://127.0.0.1:{healthy_port}/missing"),
    ]
    for _ in range(5):
        for bad in bad_calls:
            result = await kit.call(bad, TENANT_A)
            assert result.is_error and "circuit" not in result.content
    order_breaker = kit.governance.breaker("lookup_order")
    assert order_breaker is not None and order_breaker.state == "closed"
    dns = await kit.call(get("http://no-such-host.invalid/"), TENANT_A)
    assert "host 'no-such-host.invalid' does not exist" in dns.content
    ok = await kit.call(
        ToolCallBlock(id="c9", name="lookup_order", arguments='{"order_id": "SO-1001"}'),
        TENANT_A,
    )
    assert ok.content == "SO-1001: shipped" and executions == 11  # 2 x 5 ran, then this one


async def test_timeouts_of_one_server_tool_never_block_its_sibling_tools(
    clock: FakeClock,
) -> None:
    server_up = True

    @tool(read_only=True, retries=0, circuit="mcp:files")
    async def slow_search(query: str) -> str:
        """Search (always times out)."""
        if not server_up:
            raise ToolUnavailableError("server files is not connected")
        raise TimeoutError("no answer within 5 s")

    @tool(read_only=True, retries=0, circuit="mcp:files")
    async def read_text(path: str) -> str:
        """Read a file."""
        if not server_up:
            raise ToolUnavailableError("server files is not connected")
        return f"{path}: version 2"

    list_dir_runs = 0

    @tool(read_only=True, retries=0, circuit="mcp:files")
    async def list_dir() -> str:
        """List files."""
        nonlocal list_dir_runs
        list_dir_runs += 1
        return "a.txt"

    kit = Toolkit([slow_search, read_text, list_dir], governance=governance(clock))
    for i in range(5):
        call = ToolCallBlock(id="c", name="slow_search", arguments=f'{{"query": "q{i}"}}')
        await kit.call(call, TENANT_A)
    blocked = await kit.call(
        ToolCallBlock(id="c", name="slow_search", arguments='{"query": "q"}'), TENANT_A
    )
    assert blocked.content.startswith("tool slow_search unavailable: circuit open")
    sibling = await kit.call(
        ToolCallBlock(id="c", name="read_text", arguments='{"path": "a.txt"}'), TENANT_B
    )
    assert sibling.content == "a.txt: version 2"
    shared = kit.governance.breaker("mcp:files")
    assert shared is not None and shared.state == "closed"

    # the server itself goes away: the shared circuit opens for every tool of it
    server_up = False
    for i in range(5):
        call = ToolCallBlock(id="c", name="read_text", arguments=f'{{"path": "{i}.txt"}}')
        await kit.call(call, TENANT_A)
    assert shared.state == "open"
    # a tool of that server that has not failed itself fails fast too, without running
    listed = await kit.call(ToolCallBlock(id="c", name="list_dir", arguments="{}"), TENANT_B)
    assert listed.content.startswith("tool list_dir unavailable: circuit 'mcp:files' open")
    assert list_dir_runs == 0


def test_http_target_is_host_port_and_tenant_and_survives_bad_urls() -> None:
    alice = TENANT_A.user
    assert http_target({"url": "https://Example.COM/a?b=1"}, alice) == (
        "example.com:443 (tenant tenant-a)"
    )
    assert http_target({"url": "http://例子.测试:8080/"}, alice).endswith(":8080 (tenant tenant-a)")
    assert http_target({"url": "http://[::1"}, alice) == "(invalid URL) (tenant tenant-a)"
    assert http_target({}, TENANT_B.user) == "(no host):80 (tenant tenant-b)"


def test_target_breakers_stay_bounded_and_keep_open_ones() -> None:
    breakers = TargetBreakers(lambda name: CircuitBreaker(name, min_calls=1), max_keys=100)
    stuck = breakers.of(("http_get", "down.example:443 (tenant a)"))
    stuck.failure(0.0)
    assert stuck.state == "open"
    for i in range(1_000):
        breakers.of(("http_get", f"host-{i}.example:443 (tenant a)"))
    assert len(breakers) <= 100
    assert breakers.get(("http_get", "down.example:443 (tenant a)")) is stuck


@pytest.mark.parametrize(
    ("errno", "kind", "counts"),
    [
        (socket.EAI_NONAME, "does not exist", False),
        (socket.EAI_AGAIN, "cannot resolve host", True),
    ],
)
async def test_a_name_that_does_not_exist_is_bad_input_and_a_resolver_outage_is_not(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch, errno: int, kind: str, counts: bool
) -> None:
    import anyio

    async def resolver(host: str, port: int, **kwargs: object) -> list[object]:
        raise socket.gaierror(errno, "resolver says no")

    monkeypatch.setattr(anyio, "getaddrinfo", resolver)
    kit = Toolkit([make_http_get()], governance=governance(clock, breaker_min_calls=3))
    results = [await kit.call(get("https://shop.example.cn/orders"), TENANT_A) for _ in range(3)]
    assert kind in results[0].content
    breaker = kit.governance.breaker("http_get", "shop.example.cn:443 (tenant tenant-a)")
    assert breaker is not None and (breaker.state == "open") is counts


def test_a_breaker_key_that_is_not_a_function_is_refused_at_decoration() -> None:
    def lookup(host: str) -> str:
        """Look up a host."""
        return host

    with pytest.raises(ValueError, match="breaker_key must be a function"):
        tool(breaker_key="host")(lookup)  # type: ignore[arg-type]
