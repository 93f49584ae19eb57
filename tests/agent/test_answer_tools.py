"""Only the tools a question needs: chat answers (``ask``, the service without declared tools)
are offered ``retrieve`` alone; built-ins are opted in per workspace or per agent file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from shelfhand import KnowledgeBase, UserContext
from shelfhand.app import App
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.settings import Settings
from shelfhand.testing import ScriptedModel, text
from support.knowledge import sample_kb

pytestmark = pytest.mark.anyio

ACME = UserContext(tenant_id="acme", user_id="u1", roles=["user"])


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with sample_kb(tmp_path) as base:
        yield base


def offered(model: ScriptedModel) -> set[str]:
    return {t["function"]["name"] for t in model.tool_schemas[0]}


async def test_a_chat_answer_is_offered_retrieve_alone_by_default(
    tmp_path: Path, kb: KnowledgeBase
) -> None:
    app = App(settings=Settings(workspace=tmp_path / "w"))
    # (explaining the code without a search is a guess: the documents are searched and the
    # model asked again, see test_search_for_guesses.py)
    model = ScriptedModel([text("E-203 means lamp overheating."), text("灯泡过热 [1]。")])
    await app.chat_agent(model, kb, retrieval="tool").run("E-203?", context=ACME)

    assert offered(model) == {"retrieve"}
    assert {t.name for t in app.toolkit(kb).tools} == {"retrieve"}


async def test_built_ins_are_offered_when_the_workspace_opts_in(
    tmp_path: Path, kb: KnowledgeBase
) -> None:
    settings = Settings.load(tmp_path / "w", env={"SHELFHAND_BUILTIN_TOOLS": "calculator"})
    model = ScriptedModel([text("Forty-two.")])
    await App(settings=settings).chat_agent(model, kb, retrieval="tool").run("6*7", context=ACME)

    assert offered(model) == {"retrieve", "calculator"}


def test_an_unknown_built_in_fails_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="builtin_tools"):
        Settings.load(tmp_path, env={"SHELFHAND_BUILTIN_TOOLS": "calculator, shell"})


def test_the_toml_list_opts_in_too(tmp_path: Path) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand]\nbuiltin_tools = ["http_get", "current_time"]\n', encoding="utf-8"
    )

    assert Settings.load(tmp_path, env={}).builtin_tools == ("http_get", "current_time")


async def test_an_agent_file_naming_a_built_in_opts_its_supervisor_in(
    tmp_path: Path, kb: KnowledgeBase
) -> None:
    workspace = tmp_path / "w"
    (workspace / "agents").mkdir(parents=True)
    (workspace / "agents" / "pricing.md").write_text(
        "---\nname: Pricing\ndescription: Totals and discounts.\ntools: [calculator]\n---\n"
        "Compute totals.\n",
        encoding="utf-8",
    )
    app = App(settings=replace(Settings.load(workspace, env={}), answer_retrieval="tool"))
    supervisor = app.supervisor(ScriptedModel([text("ok")]), kb)

    assert {"retrieve", "calculator"} <= {t.name for t in supervisor.toolkit.tools}
    assert "http_get" not in {t.name for t in supervisor.toolkit.tools}
