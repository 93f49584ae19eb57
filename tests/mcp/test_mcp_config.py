"""MCP configuration: mcp.json, [mcp] in shelfhand.toml, service mode, the shipped example."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from shelfhand.core.errors import ConfigurationError
from shelfhand.mcp import (
    SseServer,
    StdioServer,
    StreamableHttpServer,
    load_mcp_config,
    servers_from_config,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mcp.json"


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_the_shipped_example_loads_through_the_config_loader() -> None:
    configs = load_mcp_config(EXAMPLE, env={})
    by_name = {c.name: c for c in configs}
    assert list(by_name) == ["docs", "weather", "files"]
    docs, weather, files = by_name["docs"], by_name["weather"], by_name["files"]
    assert docs.transport == "stdio" and docs.command == "shelfhand"
    assert docs.args == ("mcp", "serve", "--tenant", "default")
    assert docs.env == {"SHELFHAND_WORKSPACE": ".shelfhand"}  # the ${VAR:-default} default
    assert weather.transport == "http" and weather.timeout == 10
    assert weather.headers == {"Authorization": "Bearer dev-key"}
    assert isinstance(docs.server(), StdioServer)
    assert isinstance(weather.server(), StreamableHttpServer)
    assert weather.prefix == "weather_" and weather.defaults.cache_ttl == 60
    assert files.args[-1] == "." and files.prefix == "fs_" and not files.tools("move_file")
    write = files.server().settings_for("write_file")
    assert write.confirm and write.permission == "admin"
    assert not files.server().settings_for("read_text_file").confirm


def test_the_mcp_page_shows_the_shipped_example() -> None:
    page = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    block = re.search(r"```json\n(.*?)```", page, re.S)
    assert block is not None, "docs/mcp.md needs a ```json mcp.json example"
    assert json.loads(block.group(1)) == json.loads(EXAMPLE.read_text(encoding="utf-8"))


@pytest.mark.anyio
async def test_the_examples_stdio_entry_really_serves_tools(tmp_path: Path) -> None:
    if shutil.which("shelfhand") is None:
        pytest.skip("the shelfhand command is not on PATH")
    configs = load_mcp_config(EXAMPLE, env={"DOCS_WORKSPACE": str(tmp_path)})
    [docs] = [c for c in configs if c.name == "docs"]
    assert docs.env == {"SHELFHAND_WORKSPACE": str(tmp_path)}
    server = replace(docs, timeout=60).server()
    with anyio.fail_after(90):
        await server.connect()
        try:
            names = [t.name for t in server.listed_tools]
            total = await server.call_tool("calculator", {"expression": "1299 * 3 * 0.9"})
        finally:
            await server.aclose()
    assert names[0] == "retrieve" and "calculator" in names
    assert total.content == "3507.3"


def test_service_mode_refuses_a_stdio_entry_naming_it(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "mcp.json",
        {
            "mcpServers": {
                "remote": {"url": "http://127.0.0.1:9000/mcp"},
                "local-files": {"command": "npx", "args": ["server-filesystem", "/srv"]},
            }
        },
    )
    assert len(load_mcp_config(path)) == 2  # fine outside service mode
    with pytest.raises(ConfigurationError) as caught:
        load_mcp_config(path, service_mode=True)
    message = str(caught.value)
    assert "'local-files'" in message and "stdio" in message and str(path) in message
    assert "'remote'" not in message


def test_service_mode_accepts_http_and_sse_entries(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "mcp.json",
        {
            "mcpServers": {
                "a": {"url": "http://127.0.0.1:9000/mcp"},
                "b": {"url": "http://127.0.0.1:9001/sse"},
                "c": {"type": "sse", "url": "http://127.0.0.1:9002/events"},
            }
        },
    )
    configs = load_mcp_config(path, service_mode=True)
    assert [c.transport for c in configs] == ["http", "sse", "sse"]
    group = servers_from_config(configs)
    assert [type(s) for s in group] == [StreamableHttpServer, SseServer, SseServer]


def test_a_workspace_reads_the_mcp_table_of_shelfhand_toml(tmp_path: Path) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand]\nretrieval_mode = "keyword"\n\n'
        '[mcp.servers."天气"]\ncommand = "weather-mcp"\nargs = ["--city", "上海"]\n'
        'env = { TOKEN = "${WEATHER_TOKEN}" }\ntimeout = 5\n',
        encoding="utf-8",
    )
    [entry] = load_mcp_config(tmp_path, env={"WEATHER_TOKEN": "t-1"})
    assert entry.name == "天气" and entry.args == ("--city", "上海")
    assert entry.env == {"TOKEN": "t-1"} and entry.timeout == 5
    with pytest.raises(ConfigurationError, match="天气"):
        load_mcp_config(tmp_path, service_mode=True, env={"WEATHER_TOKEN": "t-1"})


def test_mcp_json_in_a_workspace_wins_and_no_configuration_means_no_servers(
    tmp_path: Path,
) -> None:
    assert load_mcp_config(tmp_path) == []
    write_json(tmp_path / "mcp.json", {"mcpServers": {"x": {"url": "https://mcp.example/mcp"}}})
    assert [c.name for c in load_mcp_config(tmp_path)] == ["x"]


def test_an_unset_variable_is_an_error_naming_the_entry_and_the_variable(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "mcp.json",
        {"mcpServers": {"orders": {"url": "http://h/mcp", "headers": {"X-Key": "${ORDERS_KEY}"}}}},
    )
    with pytest.raises(ConfigurationError, match=r"'orders'.*ORDERS_KEY"):
        load_mcp_config(path, env={})


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        ({"args": ["x"]}, "either command"),
        ({"command": "a", "url": "http://h/mcp"}, "not both"),
        ({"command": "a", "args": "not-a-list"}, "args"),
        ({"url": "ftp://h/mcp"}, "http"),
        ({"url": "http://h/mcp", "type": "carrier-pigeon"}, "unknown type"),
        ({"command": "a", "timeout": 0}, "timeout"),
        ({"command": "a", "comand": "typo"}, "unknown keys comand"),
    ],
)
def test_malformed_entries_are_configuration_errors(
    tmp_path: Path, entry: dict[str, object], complaint: str
) -> None:
    path = write_json(tmp_path / "mcp.json", {"mcpServers": {"bad": entry}})
    with pytest.raises(ConfigurationError, match=complaint):
        load_mcp_config(path)


def test_disabled_entries_are_skipped_and_bad_json_is_reported(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "mcp.json", {"mcpServers": {"off": {"command": "x", "disabled": True}}}
    )
    assert load_mcp_config(path, service_mode=True) == []
    broken = tmp_path / "broken.json"
    broken.write_text("{ not json", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        load_mcp_config(broken)
