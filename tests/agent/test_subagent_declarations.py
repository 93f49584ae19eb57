"""Subagent declarations in code and as Markdown files (docs/design.md S1), and each declaration error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shelfhand import Toolkit, tool
from shelfhand.agent.subagents import (
    DeclarationError,
    Subagent,
    load_subagent_file,
    load_subagent_files,
    merge_declarations,
)
from shelfhand.agent.supervisor import Supervisor
from shelfhand.testing import ScriptedModel


@tool(read_only=True)
def query_stock(sku: str) -> str:
    """Stock of a product.

    Args:
        sku: The product code.
    """
    return f"{sku}: 12"


ADVISOR = """---
name: 产品顾问
description: Answers questions about products, stock and prices.
model: qwen-plus
max_iters: 4
tools: [query_stock]
memory: shared
---
You are the product advisor. 回答要简洁。
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_markdown_file_declares_a_subagent_named_after_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "agents", "product-advisor.md", ADVISOR)
    sub = load_subagent_file(path)
    assert sub.id == "product-advisor"
    assert sub.name == "产品顾问"
    assert sub.description == "Answers questions about products, stock and prices."
    assert sub.model == "qwen-plus"
    assert sub.max_iters == 4
    assert sub.tools == ("query_stock",)
    assert sub.memory == "shared"
    assert sub.system_prompt == "You are the product advisor. 回答要简洁。"
    assert sub.origin == str(path)


def test_a_code_declaration_records_the_line_that_made_it() -> None:
    sub = Subagent("summarizer", "Summarises a text.", max_iters=2)
    line = _line_of('Subagent("summarizer"')
    assert sub.origin.endswith(f"{Path(__file__).name}:{line}")
    assert sub.tools == () and sub.name == "summarizer" and sub.memory == "isolated"


def _line_of(snippet: str) -> int:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i + 1 for i, line in enumerate(lines) if snippet in line and "sub =" in line)


def test_a_folder_of_files_loads_sorted_and_a_missing_folder_is_empty(tmp_path: Path) -> None:
    folder = tmp_path / "agents"
    write(folder, "writer.md", "---\ndescription: Writes.\n---\nWrite well.")
    write(folder, "troubleshooter.md", "---\ndescription: Fixes.\ntools: []\n---\n")
    write(folder, "notes.txt", "not a declaration")
    assert [s.id for s in load_subagent_files(folder)] == ["troubleshooter", "writer"]
    assert load_subagent_files(tmp_path / "nowhere") == []


def test_the_same_id_in_code_and_in_a_file_names_both_places(tmp_path: Path) -> None:
    path = write(tmp_path / "agents", "writer.md", "---\ndescription: Writes.\n---\n")
    in_code = Subagent("writer", "Writes differently.")
    with pytest.raises(DeclarationError) as err:
        merge_declarations([in_code], load_subagent_files(tmp_path / "agents"))
    message = str(err.value)
    assert "'writer' is declared twice" in message
    assert str(path) in message and in_code.origin in message


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("no front matter\n", 1, "starts with YAML front matter"),
        ("---\ndescription: x\n", 1, "not closed"),
        ("---\ndescription: x\ntools: [a, b\n---\n", 3, "bad YAML"),
        ("---\ndescription: x\nname: a\n  bad: indent\nmax_iters: 2\n---\n", 4, "bad YAML"),
        ("---\ndescription: x\ncolour: blue\n---\n", 3, "unknown key 'colour'"),
        ("---\ndescription: x\nmax_iters: many\n---\n", 3, "max_iters must be a whole number"),
        ("---\ndescription: x\n\ntools: retrieve\n---\n", 4, "tools must be a list"),
        ("---\nname: x\n---\n", 2, "description is required"),
        ("---\n- a\n- b\n---\n", 2, "'key: value' lines"),
    ],
)
def test_a_bad_front_matter_names_the_file_and_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = write(tmp_path, "bad.md", text)
    with pytest.raises(DeclarationError) as err:
        load_subagent_file(path)
    assert f"{path}:{line}:" in str(err.value)
    assert words in str(err.value)


def test_front_matter_is_read_safely_never_building_python_objects(tmp_path: Path) -> None:
    path = write(
        tmp_path, "evil.md", "---\ndescription: !!python/object/apply:os.system [id]\n---\n"
    )
    with pytest.raises(DeclarationError, match=rf"{path.name}:2: bad YAML"):
        load_subagent_file(path)


def test_an_unknown_tool_in_a_file_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "advisor.md", "---\ndescription: Advises.\ntools: [query_stok]\n---\n")
    with pytest.raises(DeclarationError) as err:
        Supervisor(
            model=ScriptedModel([]),
            toolkit=Toolkit([query_stock]),
            subagents=[load_subagent_file(path)],
        )
    assert "unknown tool 'query_stok'" in str(err.value)
    assert str(path) in str(err.value) and "query_stock" in str(err.value)


def test_an_unknown_tool_in_code_names_the_code_line() -> None:
    sub = Subagent("advisor", "Advises.", tools=["quote"])
    with pytest.raises(DeclarationError, match=rf"{Path(__file__).name}:\d+\): unknown tool"):
        Supervisor(model=ScriptedModel([]), toolkit=Toolkit([query_stock]), subagents=[sub])


def test_an_unknown_model_name_is_an_error_and_a_given_one_is_used() -> None:
    sub = Subagent("advisor", "Advises.", model="qwen-max")
    with pytest.raises(DeclarationError, match="unknown model 'qwen-max'"):
        Supervisor(model=ScriptedModel([]), toolkit=Toolkit(), subagents=[sub])
    other = ScriptedModel([], name="qwen-max")
    sup = Supervisor(
        model=ScriptedModel([]), toolkit=Toolkit(), subagents=[sub], models={"qwen-max": other}
    )
    assert sup.subagent("advisor").model is other  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"id": "has space", "description": "x"}, "the id must be"),
        ({"id": "ok", "description": " "}, "a description is required"),
        ({"id": "ok", "description": "x", "max_iters": 0}, "max_iters must be at least 1"),
        ({"id": "ok", "description": "x", "memory": "global"}, "memory must be"),
        ({"id": "ok", "description": "x", "tools": "retrieve"}, "tools must be a list"),
    ],
)
def test_bad_code_declarations_fail_with_the_reason(kwargs: dict, words: str) -> None:
    ident, description = kwargs.pop("id"), kwargs.pop("description")
    with pytest.raises(DeclarationError, match=words):
        Subagent(ident, description, **kwargs)


def test_a_subagent_may_not_take_the_name_of_a_tool() -> None:
    with pytest.raises(DeclarationError, match="has the name of a tool"):
        Supervisor(
            model=ScriptedModel([]),
            toolkit=Toolkit([query_stock]),
            subagents=[Subagent("query_stock", "Clashes.")],
        )


def shelfhand_cli(*args: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(SHELFHAND_WORKSPACE=str(workspace), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_agents_command_lists_the_workspace_subagents(tmp_path: Path) -> None:
    write(tmp_path / "agents", "product-advisor.md", ADVISOR.replace("query_stock", "retrieve"))
    write(tmp_path / "agents", "writer.md", "---\ndescription: Writes.\ntools: [calculator]\n---\n")
    out = shelfhand_cli("agents", "--json", workspace=tmp_path)
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert [(a["id"], a["tools"], a["max_iters"]) for a in listed] == [
        ("product-advisor", ["retrieve"], 4),
        ("writer", ["calculator"], 6),
    ]
    table = shelfhand_cli("agents", workspace=tmp_path)
    assert "product-advisor" in table.stdout and "Answers questions about products" in table.stdout


def test_an_unknown_tool_is_an_error_without_a_model_and_the_known_list_leaves_out_itself(
    tmp_path: Path,
) -> None:
    path = write(tmp_path / "agents", "product-advisor.md", ADVISOR)  # query_stock: no such tool
    write(tmp_path / "agents", "writer.md", "---\ndescription: Writes.\ntools: [writer]\n---\n")

    out = shelfhand_cli("agents", workspace=tmp_path)

    assert out.returncode == 2 and "Traceback" not in out.stderr
    said = out.stderr.replace("\n", "")
    assert f"'product-advisor' ({path}): unknown tool 'query_stock'" in said
    known = said.split("known: ", 1)[1]
    assert "retrieve" in known and "writer" in known and "product-advisor" not in known
    (tmp_path / "agents" / "product-advisor.md").unlink()
    itself = shelfhand_cli("agents", workspace=tmp_path)
    assert itself.returncode == 2
    assert "unknown tool 'writer' (a subagent cannot delegate to itself)" in itself.stderr.replace(
        "\n", ""
    )


def test_the_agents_command_reports_a_bad_file_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path / "agents", "bad.md", "---\ndescription: x\ncolour: blue\n---\n")
    out = shelfhand_cli("agents", workspace=tmp_path)
    assert out.returncode == 2
    assert f"{path}:3: unknown key 'colour'" in out.stderr.replace("\n", "")
    assert "Traceback" not in out.stderr


def test_the_app_builds_a_supervisor_from_workspace_files_and_code(tmp_path: Path) -> None:
    from shelfhand.app import App
    from shelfhand.core.settings import Settings

    write(
        tmp_path / "agents",
        "troubleshooter.md",
        "---\ndescription: Fixes.\ntools: [retrieve]\n---\nFix.",
    )
    app = App(settings=Settings(workspace=tmp_path))
    code = Subagent("summarizer", "Summarises.", tools=["calculator"])
    sup = app.supervisor(ScriptedModel([]), None, subagents=[code])
    names = {s["function"]["name"] for s in sup.toolkit.schemas()}
    assert {"troubleshooter", "summarizer", "retrieve", "calculator"} <= names
    assert [t.name for t in sup.subagent("troubleshooter").toolkit.tools] == ["retrieve"]  # type: ignore[attr-defined]
    with pytest.raises(DeclarationError, match="declared twice"):
        app.supervisor(ScriptedModel([]), None, subagents=[Subagent("troubleshooter", "Dup.")])
    app.close()
