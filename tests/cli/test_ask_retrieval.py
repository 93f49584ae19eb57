"""``shelfhand ask --retrieval context|tool|both`` through the real openai SDK against a
chat-completions server on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_cli_with_a_model import run

from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from support.chat_server import Reply, completion  # see conftest.py


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample corpus, indexed once as ``SHELFHAND_EMBEDDER=hashing`` would index it."""
    path = tmp_path_factory.mktemp("ask-retrieval")
    with KnowledgeBase(path, EmbeddingRouter({"any": HashingEmbedder()})) as kb:
        kb.ingest([sample_corpus()])
    return path


def offered(request: Any) -> set[str]:
    return {t["function"]["name"] for t in request.body.get("tools") or ()}


def tool_contents(request: Any) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]


def question_text(request: Any) -> str:
    last = request.body["messages"][-1]
    assert last["role"] == "user"
    return str(last["content"])


@pytest.mark.parametrize(
    ("mode", "question", "expected", "answer"),
    [
        ("context", "E-203 是什么故障？", "灯泡过热", "E-203 表示灯泡过热 [1]。"),
        # (answered in the question's language: a Chinese answer to it would be replaced)
        ("both", "What does error E-203 mean?", "E-203", "E-203 means lamp overheating [1]."),
        ("tool", "E-203 是什么故障？", None, "E-203 表示灯泡过热 [1]。"),
    ],
)
def test_ask_retrieval_flag_decides_what_the_first_request_holds(
    workspace: Path, server: Any, mode: str, question: str, expected: str | None, answer: str
) -> None:
    server.add(Reply(body=completion(answer)))
    if expected is None:  # tool: the answer cites [1] without a search, so one is made
        server.add(Reply(body=completion(answer)))
    out = run(["ask", "--retrieval", mode, question], workspace, server)
    assert out.returncode == 0, out.stderr
    request = server.requests[0]
    assert tool_contents(request) == []  # up-front passages are text, not a tool exchange
    if expected is None:  # tool: nothing up front, the model may call retrieve
        assert question_text(request) == question and "retrieve" in offered(request)
        # it did not, and cited [1] all the same: the documents were searched for the
        # question and the model asked again, the passages before the question
        searched = server.requests[1]
        assert tool_contents(searched) == [] and "灯泡过热" in question_text(searched)
        assert answer in out.stdout and "no passage has" not in out.stdout
        return
    assert len(server.requests) == 1  # no tool round trip was needed
    shown = question_text(request)
    assert "\n[1] " in shown and expected in shown and shown.endswith(question)
    assert ("retrieve" in offered(request)) is (mode == "both")
    assert answer in out.stdout
    assert "\n[1] " in out.stdout and "no passage has" not in out.stdout


def test_ask_flags_a_cited_number_no_passage_has(workspace: Path, server: Any) -> None:
    server.add(Reply(body=completion("灯泡过热 [1]，另见 [9]。")))
    out = run(["ask", "--retrieval", "context", "E-203 是什么故障？"], workspace, server)
    assert out.returncode == 0, out.stderr
    assert "回答引用了 [9]，但没有这样的段落" in out.stdout  # (the question is Chinese)


def test_ask_refuses_an_unknown_retrieval_mode_before_asking_the_model(
    tmp_path: Path, server: Any
) -> None:
    out = run(["ask", "--retrieval", "sometimes", "E-203?"], tmp_path, server)
    assert out.returncode == 2
    assert "context, tool, both" in out.stderr and "Traceback" not in out.stderr
    assert server.requests == []


def test_a_bad_answer_retrieval_setting_fails_at_start_up(tmp_path: Path, server: Any) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand]\nanswer_retrieval = "never"\n', encoding="utf-8"
    )
    out = run(["ask", "E-203?"], tmp_path, server)
    assert out.returncode != 0
    assert "'never'" in out.stderr and "answer_retrieval" in out.stderr
    assert "Traceback" not in out.stderr and server.requests == []
