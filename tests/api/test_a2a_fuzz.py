"""Property-based JSON-RPC requests to the A2A endpoint: whatever a client sends (unknown
methods, the 0.3 method names, wrong params, random JSON, bodies that are not JSON), the
server answers with a JSON-RPC error or a result, never a 5xx. The A2A routes are mounted
outside the OpenAPI schema, so the schemathesis fuzz does not reach them; this test does."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("a2a", reason="the a2a extra is not installed")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from service_helpers import ALICE, ThreadServer  # noqa: E402
from test_openai_endpoint import retrieve_then_quote, serve  # noqa: E402

from shelfhand.testing import FunctionModel  # noqa: E402

METHODS = [
    "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask",
    "message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/list",
    "GetExtendedAgentCard", "SubscribeToTask", "",
]  # fmt: skip
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "user", 7, None])},
    optional={
        "parts": st.lists(st.fixed_dictionaries({}, optional={"text": st.text(max_size=30)})),
        "messageId": st.text(max_size=12) | st.integers(),
        "contextId": st.text(max_size=12),
        "taskId": st.text(max_size=12),
    },
)
PARAMS = (
    JSON
    | st.fixed_dictionaries({}, optional={"message": MESSAGE, "configuration": JSON})
    | st.fixed_dictionaries(
        {}, optional={"id": st.text(max_size=40) | st.integers(), "historyLength": JSON}
    )
)
BODY = st.fixed_dictionaries(
    {
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "method": st.sampled_from(METHODS) | st.text(max_size=12),
    },
    optional={"id": st.integers() | st.text(max_size=8) | st.none(), "params": PARAMS},
)


@pytest.fixture(scope="module")
def a2a_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    servers: list[ThreadServer] = []
    server = serve(tmp_path_factory.mktemp("a2a-fuzz"), FunctionModel(retrieve_then_quote), servers)
    yield server
    for s in servers:
        s.stop()


INTERNAL_ERROR = -32603  # JSON-RPC's code for a failure of the server itself


def _post(server: ThreadServer, content: bytes, version: str) -> tuple[int, bytes]:
    """The status and the body (of a stream, its first chunk: enough to see an error)."""
    headers = {**ALICE, "Content-Type": "application/json", "A2A-Version": version}
    with (
        httpx.Client(base_url=server.url, timeout=30) as c,
        c.stream("POST", "/a2a/shelfhand", content=content, headers=headers) as response,
    ):
        first = next(iter(response.iter_bytes()), b"")
        return response.status_code, first


def _internal_error(body: bytes) -> bool:
    try:
        reply = json.loads(body)
    except ValueError:
        return False
    return isinstance(reply, dict) and (reply.get("error") or {}).get("code") == INTERNAL_ERROR


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=BODY, version=st.sampled_from(["1.0", "0.3", ""]))
def test_no_json_rpc_request_makes_the_a2a_server_fail(
    a2a_server: ThreadServer, body: dict[str, Any], version: str
) -> None:
    status, reply = _post(a2a_server, json.dumps(body).encode(), version)
    assert status < 500 and not _internal_error(reply), (body, version, status, reply)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_a_body_that_is_not_json_rpc_is_a_client_error(
    a2a_server: ThreadServer, raw: bytes
) -> None:
    status, reply = _post(a2a_server, raw, "1.0")
    assert status < 500 and not _internal_error(reply), (raw, status, reply)


def test_utf8_that_json_reads_as_utf16_is_a_parse_error(a2a_server: ThreadServer) -> None:
    # valid UTF-8 with NUL bytes among the first four: json.loads of the bytes guessed
    # UTF-16, failed to decode, and the SDK answered an internal error (found by the test above)
    status, reply = _post(a2a_server, b"0\x000\xc2\x80", "1.0")
    assert status < 500 and not _internal_error(reply), (status, reply)
    assert json.loads(reply)["error"]["code"] == -32700


@pytest.mark.parametrize("opening", [b"[", b'{"a":'])
def test_json_nested_past_the_parser_s_depth_is_a_parse_error(
    a2a_server: ThreadServer, opening: bytes
) -> None:
    # json.loads raises RecursionError past Python's recursion limit, and the SDK answered
    # -32603 with "maximum recursion depth exceeded" in the message
    deep = opening * 100_000 + b"1" + (b"]" if opening == b"[" else b"}") * 100_000
    status, reply = _post(a2a_server, deep, "1.0")
    error = json.loads(reply)["error"]
    assert status < 500 and error["code"] == -32700, (status, reply)
    assert "recursion" not in error["message"], error
    # a params object nested a little is still read (and answered, not refused as too deep)
    shallow = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    for _ in range(30):
        shallow["params"] = {"id": "x", "metadata": shallow["params"]}
    status, reply = _post(a2a_server, json.dumps(shallow).encode(), "1.0")
    assert json.loads(reply)["error"]["code"] != -32700, reply
