"""``shelfhand chat`` shows the answer that counts, as ``ask`` does: the real CLI, the real
openai SDK and a chat-completions server on 127.0.0.1 that plays a script.

A terminal can only append: an answer the check replaced is said so, then the checked answer
follows; the passages listed are those the answer uses; a model that fails mid-turn still
leaves the passages' answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shelfhand.knowledge.base import sample_corpus
from support.chat_server import Reply, chunk, completion  # see conftest.py
from support.cli import cli_env, run_cli

QUESTION = "What does error code E-203 mean and how do I fix it?"


def streamed(text: str) -> Reply:
    pieces = [text[i : i + 6] for i in range(0, len(text), 6)]
    return Reply(sse=[chunk({"role": "assistant", "content": ""})] + [
        chunk({"content": p}) for p in pieces
    ])  # fmt: skip


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    out = run_cli(["ingest", str(sample_corpus())], tmp_path)
    assert out.returncode == 0, out.stderr
    return tmp_path


def test_an_answer_the_check_replaced_is_said_so_and_the_checked_one_follows(
    workspace: Path, server: Any
) -> None:
    server.add(streamed("Sorry, I cannot help with that."))

    out = run_cli(["chat"], workspace, server, stdin=f"{QUESTION}\n\n")

    assert out.returncode == 0, out.stderr
    said = out.stdout
    refusal = said.index("Sorry, I cannot help with that.")
    notice = said.index("replaced")
    # the passages' own sentences, after the notice, marked as such
    assert refusal < notice < said.index("E-203", notice)
    assert "extractive answer" in said and "declined" in said


def test_only_the_passages_the_answer_cites_are_listed(workspace: Path, server: Any) -> None:
    server.add(streamed("E-203 means the lamp is overheating [1]."))

    out = run_cli(["chat"], workspace, server, stdin=f"{QUESTION}\n\n")

    assert out.returncode == 0, out.stderr
    assert "E-203 means the lamp is overheating [1]." in out.stdout
    assert "[1] " in out.stdout and "[2] " not in out.stdout


def test_an_unsupported_sentence_is_flagged_under_the_streamed_answer(
    workspace: Path, server: Any
) -> None:
    server.add(streamed("E-203 means the lamp is overheating; wait 45 minutes [1]."))

    out = run_cli(
        ["chat"], workspace, server, stdin=f"{QUESTION}\n\n", SHELFHAND_ANSWER_CHECK="flag"
    )

    assert out.returncode == 0, out.stderr
    assert out.stdout.count("wait 45 minutes [1].") == 2  # the answer, then the flag
    assert "unsupported: wait 45 minutes [1]. (45 not in the passages)" in out.stdout


def test_a_model_failing_mid_turn_leaves_the_passages_answer_and_the_next_line_works(
    workspace: Path, server: Any
) -> None:
    server.add(
        Reply(status=400, body={"error": {"message": "the stream was cut"}}),
        streamed("E-203 means the lamp is overheating [1]."),
    )

    out = run_cli(["chat"], workspace, server, stdin=f"{QUESTION}\nAnd E-203?\n\n")

    assert out.returncode == 0, out.stderr
    said = out.stdout
    failed = said.index("model error:")
    assert "the stream was cut" in said
    assert "From the documents:" in said[failed:] and "the chat model failed" in said[failed:]
    assert said.index("E-203 means the lamp is overheating [1].") > failed


def test_a_turn_the_passages_answered_after_the_model_failed_is_remembered(
    workspace: Path, server: Any
) -> None:
    # the model down for the first line: its question and the answer shown stay in the
    # conversation, so "how do I fix it?" is searched with it and the model sees both
    server.add(
        Reply(status=400, body={"error": {"message": "the model is down"}}),
        streamed("Clean the air filter [1]."),
    )

    out = run_cli(["chat"], workspace, server, stdin=f"{QUESTION}\nhow do I fix it?\n\n")

    assert out.returncode == 0, out.stderr
    assert f'retrieve({{"query": "{QUESTION} how do I fix it?"' in out.stdout
    seen = json.dumps(server.requests[-1].body["messages"], ensure_ascii=False)
    assert QUESTION in seen and "From the documents:" in seen


def test_a_follow_up_the_passages_answer_is_read_with_the_question_it_points_back_to(
    workspace: Path, server: Any
) -> None:
    # the model down for both lines: "它的光源能用多久？" was searched with "Lumen X1 Pro 多少
    # 钱？" and is answered from that search as the search read it, not as the warranty's
    # sentence about light sources ("保修 6 个月或累计使用 1000 小时")
    down = Reply(status=400, body={"error": {"message": "the model is down"}})
    server.add(down, down)

    out = run_cli(
        ["chat"], workspace, server, stdin="Lumen X1 Pro 多少钱？\n它的光源能用多久？\n\n"
    )

    assert out.returncode == 0, out.stderr
    second = out.stdout[out.stdout.index("它的光源能用多久？") :]
    assert "Laser, 20,000 h" in second and "1000 小时" not in second, second


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def test_ask_answers_a_failed_run_from_the_passages_it_found_with_no_second_search(
    workspace: Path, server: Any
) -> None:
    server.add(
        Reply(body=completion(tool_calls=[call("retrieve", {"query": "E-203 lamp"})])),
        Reply(status=400, body={"error": {"message": "the stream was cut"}}),
    )

    out = run_cli(["ask", QUESTION, "--retrieval", "tool", "--json"], workspace, server)

    assert out.returncode == 1
    shown = json.loads(out.stdout)
    assert shown["fallback_reason"] == "model_error" and "E-203" in shown["output"]
    assert shown["usage"]["retrievals"] == 1  # the run's own search, not one more


def test_ask_searches_when_the_model_failed_before_any_search(workspace: Path, server: Any) -> None:
    server.add(Reply(status=400, body={"error": {"message": "the stream was cut"}}))

    out = run_cli(["ask", QUESTION, "--retrieval", "tool", "--json"], workspace, server)

    assert out.returncode == 1
    shown = json.loads(out.stdout)
    assert shown["fallback_reason"] == "model_error" and "E-203" in shown["output"]
    assert shown["usage"]["retrievals"] == 1 and shown["usage"]["model_calls"] == 0


def test_markup_in_a_model_written_argument_is_printed_as_text(
    workspace: Path, server: Any
) -> None:
    # Rich reads "[/]" as a closing tag: printed as markup, it raised MarkupError
    arguments = json.dumps({"query": "[/] E-203 [bold]"})
    server.add(
        Reply(sse=[chunk({"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function",
             "function": {"name": "retrieve", "arguments": arguments}},
        ]})]),
        streamed("E-203 means the lamp is overheating [1]."),
    )  # fmt: skip

    out = run_cli(["chat"], workspace, server, stdin=f"{QUESTION}\n\n")

    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    assert '"[/] E-203 [bold]"' in out.stdout
    assert "E-203 means the lamp is overheating [1]." in out.stdout


def test_status_prints_a_workspace_path_with_brackets_as_it_is(tmp_path: Path) -> None:
    # Rich took "[draft]" for a style tag and dropped it from the path
    workspace = tmp_path / "notes [draft]"
    assert run_cli(["ingest", str(sample_corpus())], workspace).returncode == 0

    out = run_cli(["status"], workspace)

    assert out.returncode == 0, out.stderr
    assert f"workspace: {workspace}" in out.stdout


GBK_QUESTION = os.fsdecode("保修多久 E-203".encode("gbk"))  # typed in a GBK terminal


def test_a_question_that_is_not_utf8_is_refused_with_the_reason(
    workspace: Path, server: Any
) -> None:
    # it ended in a traceback (UnicodeEncodeError) once a tool call's audit stored it
    out = run_cli(["ask", GBK_QUESTION], workspace, server)

    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "is not UTF-8 text" in out.stderr and "\\xb1\\xa3" in out.stderr
    assert server.requests == []  # nothing was sent to the model


def chat_typing(typed: bytes, workspace: Path, server: Any) -> subprocess.CompletedProcess[bytes]:
    """``shelfhand chat`` (the real CLI, its own process) with ``typed`` at its prompt."""
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "chat"],
        input=typed,
        capture_output=True,
        env=cli_env(workspace, server),
        timeout=120,
        check=False,
    )


def test_a_chat_line_that_is_not_utf8_is_refused_and_the_next_answered(
    workspace: Path, server: Any
) -> None:
    server.add(streamed("E-203 means the lamp is overheating [1]."))
    typed = os.fsencode(GBK_QUESTION) + b"\n" + QUESTION.encode() + b"\n\n"

    out = chat_typing(typed, workspace, server)

    said = out.stdout.decode("utf-8", "backslashreplace")
    assert out.returncode == 0, out.stderr
    assert "is not UTF-8 text" in said
    assert "E-203 means the lamp is overheating [1]." in said
    assert len(server.requests) == 1


@pytest.mark.parametrize("word", ["/exit", "quit", "退出"])
def test_a_quit_word_ends_the_chat_and_is_never_asked(
    workspace: Path, server: Any, word: str
) -> None:
    """Before, "/exit" was a question: searched for, and sent to the model."""
    server.add(streamed("E-203 means the lamp is overheating [1]."))
    typed = f"{QUESTION}\n{word}\n{QUESTION}\n".encode()

    out = chat_typing(typed, workspace, server)

    assert out.returncode == 0, out.stderr
    assert len(server.requests) == 1  # the first question only


def test_ask_and_chat_with_nothing_indexed_say_the_model_answers_alone(
    tmp_path: Path, server: Any
) -> None:
    # run from another folder: the default workspace holds no documents, and the model's
    # answer looked like one from the documents
    server.add(Reply(body=completion("Returns are accepted within 30 days.")), streamed("Hello."))

    asked = run_cli(["ask", "What is the return policy?"], tmp_path, server)
    chatted = run_cli(["chat"], tmp_path, server, stdin="hi\n\n")

    assert asked.returncode == 0, asked.stderr
    hint = f"nothing is indexed in {tmp_path}"
    assert hint in asked.stderr and "the model answers without them" in asked.stderr
    assert hint in chatted.stdout
    # and `retrieve` is not offered: it could only answer "not configured", and the local
    # model called it again and again until the loop guard ended the run
    offered = [[t["function"]["name"] for t in r.body.get("tools", [])] for r in server.requests]
    assert len(offered) == 2 and not any("retrieve" in names for names in offered)


@pytest.mark.parametrize("command", [["ask", "  "], ["search", ""]])
def test_an_empty_question_exits_2_and_asks_nothing(
    workspace: Path, server: Any, command: list[str]
) -> None:
    # the model was asked an empty question, and answered it
    out = run_cli(command, workspace, server)

    assert out.returncode == 2 and "is empty" in out.stderr
    assert server.requests == []
