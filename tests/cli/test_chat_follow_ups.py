"""``shelfhand chat`` without a chat model reads a follow-up with the question it points back
to (docs/knowledge/rerank.md, "Follow-ups without a model"): "怎么修？" after "E-203 是什么故
障？" is searched as "E-203 是什么故障？ 怎么修？", and "它的光源能用多久？" after "Lumen Mini
M2 多少钱？" finds the Mini M2's spec row. Before, each line was searched alone: "怎么修？"
found nothing, and "它的光源能用多久？" got the warranty's sentence about light sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelfhand.knowledge.base import sample_corpus
from support.cli import run_cli

WARRANTY_ON_LIGHT_SOURCES = "光源（灯泡或激光模组）保修"
NOT_COVERED = "文档中没有这方面的内容"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("samples")
    out = run_cli(["ingest", str(sample_corpus())], path)
    assert out.returncode == 0, out.stderr
    return path


def answers(workspace: Path, *lines: str) -> list[str]:
    """What ``shelfhand chat`` (no model) prints for each of ``lines``, typed one by one."""
    out = run_cli(["chat"], workspace, stdin="".join(f"{line}\n" for line in lines) + "\n")
    assert out.returncode == 0, out.stderr
    said = out.stdout.split("you> ")[1:]  # (the last prompt read the empty line)
    assert len(said) == len(lines) + 1, out.stdout
    return said[: len(lines)]


def test_a_follow_up_naming_nothing_is_answered_with_the_code_it_follows(
    workspace: Path,
) -> None:
    first, then = answers(workspace, "E-203 是什么故障？", "怎么修？")

    assert "E-203" in first
    assert NOT_COVERED not in then
    # the manual's E-203 passage, its fix included
    assert "E-203" in then and "清洁防尘网" in then
    assert "troubleshooting-manual.pdf" in then


def test_a_follow_up_with_a_pronoun_finds_the_product_it_follows(workspace: Path) -> None:
    first, then = answers(workspace, "Lumen Mini M2 多少钱？", "它的光源能用多久？")

    assert "Lumen Mini M2" in first
    assert WARRANTY_ON_LIGHT_SOURCES not in then  # the light sources' warranty: the old answer
    assert "Lumen Mini M2" in then and "product-specs.docx" in then


def test_an_english_follow_up_with_a_pronoun_is_answered_with_the_code_it_follows(
    workspace: Path,
) -> None:
    _, then = answers(workspace, "What does E-203 mean?", "How do I fix it?")

    assert "E-203" in then and "Clean the air filter" in then


def test_a_new_topic_is_searched_as_typed(workspace: Path) -> None:
    _, then = answers(workspace, "Lumen Mini M2 多少钱？", "拆封后还能退货吗？")

    # not mixed with the product: the returns policy, and not the spec sheet
    assert "returns-policy.md" in then and "product-specs.docx" not in then


def test_the_knowledge_agents_search_of_a_follow_up_finds_the_spec_row(workspace: Path) -> None:
    """The search itself (the knowledge agent given the conversation, as the CLI and the
    service give it): the passages of "它的光源能用多久？" after the Mini M2's price hold its
    spec row (the answer's sentences are the extractive answer's choice among them)."""
    from shelfhand.app import App
    from shelfhand.core.context import UserContext
    from shelfhand.core.messages import Message
    from shelfhand.core.settings import Settings

    settings = Settings.load(workspace, env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, model=None)
    kb = app.open_knowledge()
    try:
        agent = app.knowledge_agent(kb)
        ctx = UserContext(tenant_id="default", user_id="cli")
        past = [Message.user("Lumen Mini M2 多少钱？"), Message.assistant("1,999 元 [1]。")]
        result = agent.run_sync("它的光源能用多久？", context=ctx, history=past)
    finally:
        kb.close()

    assert any("LED, 30,000 h" in c.text for c in result.citations)
    assert WARRANTY_ON_LIGHT_SOURCES not in result.output
