"""``shelfhand ask`` / ``search`` say plainly when the documents have nothing on a question, and
show the conflict flags. With a model: the real openai SDK against a chat-completions server on
127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_cli import shelfhand
from test_cli_with_a_model import run

from shelfhand.agent.fallbacks import NOT_COVERED_ZH
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from support.chat_server import Reply, completion  # see conftest.py

NOT_FOUND_LINE = "未找到：文档中没有与这个问题相符的段落"
"""What ``ask`` prints under an answer when nothing was found (the questions are Chinese)."""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample corpus, indexed once as ``SHELFHAND_EMBEDDER=hashing`` would index it."""
    path = tmp_path_factory.mktemp("ask-not-found")
    with KnowledgeBase(path, EmbeddingRouter({"any": HashingEmbedder()})) as kb:
        kb.ingest([sample_corpus()])
    return path


def test_ask_with_nothing_found_tells_the_model_and_the_user(workspace: Path, server: Any) -> None:
    server.add(Reply(body=completion("文档中没有这方面的内容。")))
    # another tenant: the search runs and finds nothing it may read
    out = run(
        ["ask", "--tenant", "elsewhere", "--retrieval", "context", "整机保修期多久？"],
        workspace,
        server,
    )
    assert out.returncode == 0, out.stderr
    (request,) = server.requests
    shown = request.body["messages"][-1]["content"]
    assert "No relevant passages were found" in shown and "do not cover this" in shown
    assert "文档中没有这方面的内容。" in out.stdout
    assert NOT_FOUND_LINE in out.stdout


def test_ask_without_a_model_says_the_documents_do_not_cover_it(workspace: Path) -> None:
    env = {"SHELFHAND_EMBEDDER": "hashing"}
    out = shelfhand(
        "ask", "--tenant", "elsewhere", "整机保修期多久？", workspace=workspace, env=env
    )
    assert out.returncode == 0, out.stderr
    assert NOT_COVERED_ZH in out.stdout and "[1]" not in out.stdout


@pytest.mark.slow
def test_search_prints_a_not_found_line_and_the_conflict_notes(workspace: Path) -> None:
    env = {"SHELFHAND_EMBEDDER": "hashing"}
    out = shelfhand("search", "--tenant", "elsewhere", "整机保修期", workspace=workspace, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "未找到：没有与 '整机保修期' 相符的段落"
    flagged = shelfhand(
        "search", "整机保修期", "--mode", "keyword", "-k", "5", workspace=workspace, env=env
    )
    assert flagged.returncode == 0, flagged.stderr
    assert "注意：[" in flagged.stdout and "不一致：12 个月 vs 24 个月" in flagged.stdout


@pytest.mark.slow
def test_ask_prints_the_disagreement_of_the_passages_under_the_answer(
    tmp_path: Path, server: Any
) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand]\nretrieval_mode = "keyword"\n', encoding="utf-8"
    )
    with KnowledgeBase(tmp_path, None) as kb:
        kb.ingest([sample_corpus()])
    server.add(Reply(body=completion("2025 年起购买的整机保修 24 个月 [3]，之前为 12 个月 [1]。")))
    out = run(["ask", "--retrieval", "context", "整机保修期"], tmp_path, server)
    assert out.returncode == 0, out.stderr
    (request,) = server.requests
    shown = request.body["messages"][-1]["content"]
    assert "注意：[" in shown and "不一致：12 个月 vs 24 个月" in shown  # the model read it
    notes = [line for line in out.stdout.splitlines() if line.startswith("注意：[")]
    assert len(notes) == 1 and "不一致：12 个月 vs 24 个月" in notes[0] and "较新" in notes[0]
