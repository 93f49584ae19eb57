"""``shelfhand ask`` tells an answer from a non-answer: the real CLI, the real openai SDK and a
chat-completions server on 127.0.0.1. Every non-answer exits non-zero and keeps the passages
found; passages are listed as evidence only when the answer uses them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shelfhand.knowledge.base import sample_corpus
from support.chat_server import Reply, completion  # see conftest.py
from support.cli import run_cli

QUESTION = "What does error code E-203 mean and how do I fix it?"


def call(name: str, arguments: dict[str, Any], n: int = 1) -> dict[str, Any]:
    return {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def run(
    args: list[str], workspace: Path, server: Any | None, **env_extra: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(args, workspace, server, **env_extra)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    out = run(["ingest", str(sample_corpus())], tmp_path, None)
    assert out.returncode == 0, out.stderr
    return tmp_path


def test_without_a_model_ask_prints_the_passages_best_sentences_and_exits_0(
    workspace: Path,
) -> None:
    out = run(["ask", "E-203 是什么故障？"], workspace, None)

    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("摘自文档：") and "E-203" in out.stdout
    # what shelfhand says under it is in the question's language too
    assert "摘录式回答" in out.stdout and "没有配置对话模型" in out.stdout
    assert "extractive answer" not in out.stdout


def test_a_loop_guard_stop_exits_3_and_prints_the_passages(workspace: Path, server: Any) -> None:
    wander = call("http_get", {"url": "https://errors.example.com/E-203"})
    server.add(*(Reply(body=completion(tool_calls=[wander])) for _ in range(3)))

    out = run(["ask", QUESTION, "--retrieval", "context"], workspace, server)

    assert out.returncode == 3, out.stderr
    assert out.stdout.startswith("From the documents:") and "E-203" in out.stdout
    assert "kept repeating a failing tool call" in out.stdout


def test_a_failing_model_exits_1_and_still_prints_the_passages(
    workspace: Path, server: Any
) -> None:
    server.add(Reply(status=400, body={"error": {"message": "the stream was cut"}}))

    out = run(["ask", QUESTION], workspace, server)

    assert out.returncode == 1
    assert "From the documents:" in out.stdout and "E-203" in out.stdout
    assert "the chat model failed" in out.stderr


def test_a_failing_model_is_named_as_the_reason_not_a_missing_one(
    workspace: Path, server: Any
) -> None:
    server.add(Reply(status=400, body={"error": {"message": "the stream was cut"}}))

    out = run(["ask", QUESTION, "--json"], workspace, server)

    assert out.returncode == 1
    shown = json.loads(out.stdout)
    assert shown["extractive"] and shown["fallback_reason"] == "model_error"


def test_a_failing_model_is_named_as_the_reason_when_the_documents_do_not_cover_it(
    workspace: Path, server: Any
) -> None:
    """Seen with the local model timing out on a long tool result: the JSON said
    ``no_model`` ("no chat model is configured") under "not covered"."""
    server.add(Reply(status=400, body={"error": {"message": "the stream was cut"}}))

    out = run(["ask", "What is the capital of France?", "--json"], workspace, server)

    assert out.returncode == 1
    shown = json.loads(out.stdout)
    assert shown["fallback_reason"] == "model_error", shown
    assert shown["output"].startswith("The documents do not cover this")


def test_a_model_failing_after_a_search_still_reports_what_the_run_used(
    workspace: Path, server: Any
) -> None:
    search = call("retrieve", {"query": "E-203"})
    server.add(
        Reply(body=completion(tool_calls=[search])),
        Reply(status=400, body={"error": {"message": "the stream was cut"}}),
    )

    out = run(["ask", QUESTION, "--retrieval", "tool", "--json"], workspace, server)

    assert out.returncode == 1
    shown = json.loads(out.stdout)
    assert shown["fallback_reason"] == "model_error" and "E-203" in shown["output"]
    # the model call that answered (12 in, 5 out) and the run's search, whose passages are
    # the ones shown (no second search)
    usage = {k: v for k, v in shown["usage"].items() if k != "cost"}
    assert usage == {
        "input_tokens": 12,
        "output_tokens": 5,
        "model_calls": 1,
        "tool_calls": 1,
        "retrievals": 1,
    }


def test_ask_offers_the_model_retrieve_alone(workspace: Path, server: Any) -> None:
    server.add(Reply(body=completion("E-203 means the lamp is overheating.")))

    run(["ask", QUESTION, "--retrieval", "both"], workspace, server)

    offered = {t["function"]["name"] for t in server.requests[0].body.get("tools", [])}
    assert offered == {"retrieve"}


def test_a_refusal_lists_no_passage_as_its_evidence(workspace: Path, server: Any) -> None:
    server.add(Reply(body=completion("Sorry, I cannot help with that.")))

    out = run(["ask", QUESTION], workspace, server, SHELFHAND_ANSWER_CHECK="flag")

    assert out.returncode == 0
    assert out.stdout.startswith("Sorry, I cannot help with that.")
    assert "troubleshooting-manual.pdf" not in out.stdout


def test_an_unsupported_sentence_is_flagged_under_the_answer(workspace: Path, server: Any) -> None:
    server.add(Reply(body=completion("E-203 means the lamp is overheating; wait 45 minutes [1].")))

    out = run(["ask", QUESTION, "--retrieval", "context"], workspace, server,
              SHELFHAND_ANSWER_CHECK="flag")  # fmt: skip

    assert out.returncode == 0
    assert "unsupported: wait 45 minutes [1]. (45 not in the passages)" in out.stdout
