"""``shelfhand eval-tools`` against the real openai SDK and a chat-completions server on
127.0.0.1 that plays a script (native tool_calls, constrained JSON, errors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shelfhand.evals.tool_eval import CaseResult, load_tool_cases, sample_tool_cases, summarise
from shelfhand.tools.demo import make_tools
from support.chat_server import Reply, completion  # see conftest.py

CASES = [
    {"id": "stock-zh", "request": "SKU2024-011 有货吗？", "tool": "query_stock",
     "arguments": {"sku": "SKU2024-011"}},
    {"id": "price-en", "request": "Price for 3 units of SKU2024-011?", "tool": "quote_price",
     "arguments": {"sku": "SKU2024-011", "quantity": 3}},
    {"id": "chat-en", "request": "Hello!", "tool": None},
]  # fmt: skip


def native_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


@pytest.fixture
def cases_file(tmp_path: Path) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(c, ensure_ascii=False) for c in CASES), "utf-8")
    return path


def run(args: list[str], workspace: Path, server: Any) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(
        SHELFHAND_WORKSPACE=str(workspace / "ws"),
        SHELFHAND_MODEL="local-model",
        OPENAI_BASE_URL=server.url,
        OPENAI_API_KEY="sk-test-not-a-secret",
        COLUMNS="200",
    )
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "eval-tools", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_native_tool_calls_are_scored_and_the_tools_really_run(
    tmp_path: Path, server: Any, cases_file: Path
) -> None:
    server.add(
        Reply(body=completion(tool_calls=[native_call("query_stock", {"sku": "SKU2024-011"})])),
        Reply(body=completion("有 12 台现货。")),
        # a wrong quantity: routed right, arguments wrong
        Reply(body=completion(tool_calls=[native_call("quote_price", {"sku": "SKU2024-011"})])),
        Reply(body=completion("3999 CNY.")),
        Reply(body=completion("Hello! How can I help?")),
    )

    out = run([str(cases_file), "--json", "--no-docs"], tmp_path, server)

    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["cases"] == 3
    assert report["routing_accuracy"] == 1.0
    assert report["right_calls"] == 2 and report["argument_accuracy"] == pytest.approx(2 / 3)
    assert (report["raw_json_answers"], report["empty_answers"], report["errors"]) == (0, 0, 0)
    assert report["mean_steps"] == pytest.approx((2 + 2 + 1) / 3)
    assert report["tool_mode"] == "native"
    # the demo tool ran against the demo shop for the injected customer
    tool_messages = [m for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert json.loads(tool_messages[0]["content"])["stock"] == 12
    assert "tools" in server.requests[0].body


def test_constrained_mode_sends_a_schema_and_reads_the_json_back(
    tmp_path: Path, server: Any, cases_file: Path
) -> None:
    def says(obj: dict[str, Any]) -> Any:
        return Reply(body=completion(json.dumps(obj, ensure_ascii=False)))

    server.add(
        says({"tool": "query_stock", "arguments": {"sku": "SKU2024-011"}}),
        says({"tool": "none", "answer": "有 12 台现货。"}),
        says({"tool": "quote_price", "arguments": {"sku": "SKU2024-011", "quantity": 3}}),
        says({"tool": "none", "answer": "10797.3 CNY."}),
        says({"tool": "none", "answer": "Hello!"}),
    )

    out = run(
        [str(cases_file), "--json", "--no-docs", "--tool-mode", "constrained"], tmp_path, server
    )

    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["right_calls"], report["raw_json_answers"]) == (3, 0)
    assert report["tool_mode"] == "constrained"
    assert [r["answer"] for r in report["results"]] == ["有 12 台现货。", "10797.3 CNY.", "Hello!"]
    body = server.requests[0].body
    assert "tools" not in body
    # the reference scenario's routing examples (shelfhand.tools.demo) are in the prompt
    system = body["messages"][0]["content"]
    assert 'User: "SKU2023-105 缺货了吗？" -> {"tool": "query_stock"' in system
    consts = [
        c["properties"]["tool"]["const"]
        for c in body["response_format"]["json_schema"]["schema"]["anyOf"]
    ]
    assert consts == [
        "retrieve",
        "query_stock",
        "quote_price",
        "query_order",
        "create_return",
        "none",
    ]


def test_no_examples_leaves_the_routing_examples_out(
    tmp_path: Path, server: Any, cases_file: Path
) -> None:
    server.add(Reply(body=completion('{"tool": "none", "answer": "有货。"}')))

    out = run(
        [str(cases_file), "--json", "--no-docs", "--tool-mode", "constrained", "--limit", "1",
         "--no-examples"],
        tmp_path,
        server,
    )  # fmt: skip

    assert out.returncode == 0, out.stderr
    system = server.requests[0].body["messages"][0]["content"]
    assert "SKU2023-105" not in system and "query_stock" in system


def test_raw_json_answers_and_context_overflows_are_counted(
    tmp_path: Path, server: Any, cases_file: Path
) -> None:
    overflow = {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error"}}  # fmt: skip
    server.add(
        # JSON that is no call (an unknown tool's call would go back to the model as an
        # error): the user would see JSON
        Reply(body=completion('{"sku": "SKU2024-011", "status": "in stock"}')),
        Reply(status=400, body=overflow),
        Reply(body=completion("Hi!")),
    )

    out = run([str(cases_file), "--json", "--no-docs"], tmp_path, server)

    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["raw_json_answers"], report["context_overflows"], report["errors"]) == (1, 1, 1)
    assert report["right_calls"] == 1  # only "no tool" for the greeting


def test_the_table_output_names_the_metrics(tmp_path: Path, server: Any, cases_file: Path) -> None:
    server.add(Reply(body=completion("I cannot check stock.")))

    out = run([str(cases_file), "--limit", "1", "--no-docs"], tmp_path, server)

    assert out.returncode == 0, out.stderr
    for metric in ("routing accuracy", "argument accuracy", "raw-JSON answers", "empty answers",
                   "context overflows", "mean steps", "mean latency"):  # fmt: skip
        assert metric in out.stdout
    assert "wrong stock-zh: no tool" in out.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"request": "hi", "tool": "x"}\nnot json', "line 2: not JSON"),
        ('{"tool": "query_stock"}', 'line 1: "request" must be a non-empty string'),
        ('{"request": "hi", "tool": null, "arguments": {"a": 1}}', '"tool" is null'),
    ],
)
def test_a_bad_case_file_is_refused_naming_the_line(
    tmp_path: Path, server: Any, content: str, message: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content, "utf-8")

    out = run([str(bad)], tmp_path, server)

    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert server.requests == []


def test_an_invalid_tool_mode_flag_fails_fast(tmp_path: Path, server: Any) -> None:
    out = run(["--tool-mode", "xml"], tmp_path, server)
    assert out.returncode == 2 and "tool_mode" in out.stderr and server.requests == []


def test_the_bundled_cases_cover_every_reference_tool_in_both_languages() -> None:
    cases = load_tool_cases(sample_tool_cases())
    assert len(cases) == 20
    names = {t.name for t in make_tools(None)} | {"retrieve"}  # type: ignore[arg-type]
    assert {c.tool for c in cases} == names | {None}
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in c.request) for c in cases)
    assert any(c.request.isascii() for c in cases)


def test_summary_counts_empty_answers_and_percentiles() -> None:
    results = [
        CaseResult(id="a", request="x", expected_tool=None, routed=True, arguments_ok=True,
                   steps=1, latency_ms=100.0),
        CaseResult(id="b", request="y", expected_tool="retrieve", empty=True, steps=3,
                   latency_ms=300.0, stop_reason="empty"),
    ]  # fmt: skip
    summary = summarise(results)
    assert summary["empty_answers"] == 1 and summary["routing_accuracy"] == 0.5
    assert summary["fallback_answers"] == 1
    assert summary["mean_steps"] == 2.0 and summary["p50_latency_ms"] == 200.0
