"""The command line's rough edges, each filed off: help that is whole at 80 columns, one line
naming a missing extra, numeric options checked as the API checks them, one spelling of
"error:"."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer import _click as click

from shelfhand.cli import main as cli_main
from shelfhand.cli.common import app, tidy_help


def run_cli(
    *args: str, cwd: Path, extra_path: Path | None = None, columns: int = 80
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env["COLUMNS"] = str(columns)
    env["SHELFHAND_EMBEDDER"] = "hashing"
    if extra_path is not None:  # a folder put before everything else on the import path
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def every_command() -> list[tuple[str, Any, Any]]:
    """(full name, command, parent group) of every registered command, sub-apps included."""
    for name in cli_main.COMMAND_MODULES:
        importlib.import_module(f"shelfhand.cli.{name}")
    root = typer.main.get_command(app)
    tidy_help(root)
    found: list[tuple[str, Any, Any]] = []

    def walk(prefix: str, group: Any) -> None:
        for name, command in sorted(getattr(group, "commands", {}).items()):
            found.append((f"{prefix} {name}", command, group))
            walk(f"{prefix} {name}", command)

    walk("shelfhand", root)
    return found


COMMANDS = every_command()


def help_text(command: Any, name: str) -> str:
    ctx = click.Context(command, info_name=name, terminal_width=80, max_content_width=80)
    return str(command.get_help(ctx))


def squash(text: str) -> str:
    """``text`` on one line: a line break between two Chinese characters (where Chinese is
    wrapped) is dropped, other runs of spaces become one."""
    return " ".join(_CJK_BREAK.sub("", text).split())


_CJK_BREAK = re.compile(r"(?<=[\u3000-\u9fff\uff00-\uffef])\n\s*(?=[\u3000-\u9fff\uff00-\uffef])")


def test_every_command_is_walked_including_the_mcp_sub_commands() -> None:
    names = {name for name, _, _ in COMMANDS}
    assert {"shelfhand search", "shelfhand mcp serve", "shelfhand mcp list"} <= names


@pytest.mark.parametrize(("name", "command", "parent"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_help_at_80_columns_shows_every_description_whole(
    name: str, command: Any, parent: Any
) -> None:
    listing = squash(help_text(parent, name.rsplit(" ", 1)[0]))
    own = help_text(command, name)

    # the parent's list shows the command's whole first sentence, never cut with "..."
    assert command.short_help and squash(command.short_help) in listing
    assert not squash(command.short_help).endswith("...")
    # every line fits, and every option says what it does in whole words
    assert all(len(line) <= 80 for line in own.splitlines()), own
    for param in command.params:
        if param.param_type_name == "option" and not param.hidden:
            assert param.help, f"{name} {param.opts[0]} has no help"
            # whole: click may wrap a line after a hyphen, so compare without spaces
            assert "".join(param.help.split()) in "".join(own.split())
        if param.param_type_name == "option":  # metavars name the value's type plainly
            shown = param.get_help_record(click.Context(command))[0]
            assert "list[" not in shown and " range>" not in shown, shown


def test_top_level_help_cuts_no_description_at_80_columns(tmp_path: Path) -> None:
    out = run_cli("--help", cwd=tmp_path)

    assert out.returncode == 0
    commands = out.stdout.split("Commands:", 1)[1]
    assert "..." not in commands
    assert "Search the knowledge base and print cited passages (no model involved)." in squash(
        out.stdout
    )


def _blocked(tmp_path: Path, *packages: str) -> Path:
    """A folder whose packages shadow ``packages`` and fail to import, as when the optional
    extra that installs them is missing."""
    folder = tmp_path / "blocked"
    for package in packages:
        (folder / package).mkdir(parents=True)
        (folder / package / "__init__.py").write_text(
            f"raise ModuleNotFoundError({f'No module named {package!r}'!r}, name={package!r})\n",
            encoding="utf-8",
        )
    return folder


@pytest.mark.parametrize(
    ("args", "packages", "extra"),
    [
        (["mcp", "list"], ["mcp"], "shelfhand[mcp]"),
        (["mcp", "serve"], ["mcp"], "shelfhand[mcp]"),
        (["serve", "--allow-anonymous"], ["fastapi", "uvicorn"], "shelfhand[server]"),
        # with only shelfhand[mcp]: the MCP SDK brings fastapi's kin, not the rest (a traceback)
        (["serve", "--allow-anonymous"], ["orjson"], "shelfhand[server]"),
    ],
)
def test_a_missing_extra_is_one_line_naming_it_and_exit_2(
    tmp_path: Path, args: list[str], packages: list[str], extra: str
) -> None:
    out = run_cli(
        *args, "-w", str(tmp_path / "ws"), cwd=tmp_path, extra_path=_blocked(tmp_path, *packages)
    )

    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and extra in lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["search", "保修", "-k", "0"], "greater than or equal to 1"),
        (["search", "保修", "-k", "-1"], "greater than or equal to 1"),
        (["search", "保修", "-k", "21"], "less than or equal to 20"),
        (["audit", "--limit", "0"], "greater than or equal to 1"),
        (["ask", "保修", "--temperature", "3"], "less than or equal to 2"),
        (["serve", "--port", "70000"], "less than or equal to 65535"),
    ],
)
def test_numeric_options_out_of_range_exit_2_with_the_bound(
    tmp_path: Path, args: list[str], message: str
) -> None:
    out = run_cli(*args, "-w", str(tmp_path / "ws"), cwd=tmp_path)

    assert out.returncode == 2
    assert message in out.stderr
    assert not (tmp_path / "ws").exists()


def test_usage_errors_and_command_errors_are_spelled_the_same(tmp_path: Path) -> None:
    usage = run_cli("search", "x", "--bogus", cwd=tmp_path)
    missing = run_cli("sources", "-w", str(tmp_path / "nowhere"), cwd=tmp_path)

    assert usage.returncode == missing.returncode == 2
    assert "\nerror: No such option: --bogus" in usage.stderr and "Error:" not in usage.stderr
    assert missing.stderr.startswith("error: workspace")


# --- the workspace commands ------------------------------------------------------------


def _audit_log_with_a_timeout(workspace: Path) -> None:
    from shelfhand.tools.audit import AuditLog

    calls = [
        ("create_return", {"order_id": "SO-1001", "reason": "the lamp overheats after an hour"},
         "timeout", 5003.5, "ToolTimeoutError"),
        ("lookup_order_status", {"order_id": 7}, "invalid_arguments", 0.2, "InvalidArgumentError"),
    ]  # fmt: skip
    with AuditLog.for_workspace(workspace) as log:
        for n, (tool, arguments, outcome, ms, error) in enumerate(calls, 1):
            log.record(
                tool=tool, tenant="acme", user="bob", trace_id="t1", request_id=f"r{n}",
                call_id=f"c{n}", arguments=arguments, canonical=None, decision="allow",
                outcome=outcome, duration_ms=ms, error_class=error,
            )  # fmt: skip


def test_audit_refuses_an_unknown_outcome_and_names_the_known_ones(tmp_path: Path) -> None:
    _audit_log_with_a_timeout(tmp_path / "ws")

    out = run_cli("audit", "--outcome", "bogus", "-w", str(tmp_path / "ws"), cwd=tmp_path)

    assert out.returncode == 2
    assert "--outcome must be one of ok, error, timeout" in out.stderr and "'bogus'" in out.stderr


def test_the_audit_table_keeps_its_key_columns_whole_at_80_columns(tmp_path: Path) -> None:
    _audit_log_with_a_timeout(tmp_path / "ws")

    out = run_cli("audit", "-w", str(tmp_path / "ws"), cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    assert "(2 calls)" in out.stdout and "arguments: --jsonl" in out.stdout
    row = next(line for line in out.stdout.splitlines() if "create_return" in line)
    for cell in ("create_return", "acme/bob", "allow", "timeout", "5003.5"):
        assert cell in row, row
    # the longest outcome whole, beside its time (a long tool name folds instead)
    assert any("invalid_arguments" in r and "0.2" in r for r in out.stdout.splitlines())
    assert all(len(line) <= 80 for line in out.stdout.splitlines())
    wide = run_cli("audit", "-w", str(tmp_path / "ws"), cwd=tmp_path, columns=140)
    assert "timeout (ToolTimeoutError)" in wide.stdout and "SO-1001" in wide.stdout


def test_audit_lists_the_model_calls_a_budget_refused_and_what_each_was_for(
    tmp_path: Path,
) -> None:
    from shelfhand.core.context import UserContext
    from shelfhand.core.errors import BudgetExceededError
    from shelfhand.service.turn_budgets import Budgets
    from shelfhand.tools.audit import AuditLog
    from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, LocalBudgetBook

    _audit_log_with_a_timeout(tmp_path / "ws")
    alice = UserContext(tenant_id="acme", user_id="alice")
    policy = BudgetPolicy(user=BudgetLimits(model_calls_per_day=1))
    with AuditLog.for_workspace(tmp_path / "ws") as log:
        budgets = Budgets(policy=policy, book=LocalBudgetBook(), audit=log)
        meter = budgets.meter(alice, "t2")
        meter.reserve(100)
        with pytest.raises(BudgetExceededError) as refused:
            meter.reserve(100)
        meter.refused(refused.value, "rerank")  # (as a side call does)
        budgets.refused(refused.value.to_dict(), alice, "t2")  # (as the loop's refusal is)

    out = run_cli("audit", "--outcome", "budget_exceeded", "-w", str(tmp_path / "ws"), cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if "budget_exceeded" in line]
    assert len(rows) == 2 and "(2 calls)" in out.stdout
    assert "(model: rerank)" in rows[0] and "acme/alice" in rows[0]
    assert "(model)" in rows[1] and "rerank" not in rows[1]


def test_a_writer_command_on_a_served_workspace_says_what_to_do_for_that_command(
    tmp_path: Path,
) -> None:
    from shelfhand.knowledge.stores.workspace_lock import WorkspaceLock

    assert run_cli("ingest", "--samples", "-w", "ws", cwd=tmp_path).returncode == 0
    with WorkspaceLock(tmp_path / "ws", "serve").acquire():
        forget = run_cli("forget", "projector/faq.html", "-w", "ws", cwd=tmp_path)
        reindex = run_cli("reindex", "-w", "ws", cwd=tmp_path)

    assert forget.returncode == reindex.returncode == 75
    assert "DELETE /v1/knowledge/sources/" in forget.stderr
    assert "stop the server first" in reindex.stderr
    assert "upload" not in forget.stderr + reindex.stderr


def test_sources_shows_tenant_and_tags_and_forget_takes_a_folder_without_its_slash(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "mixed"
    (docs / "hr").mkdir(parents=True)
    (docs / "hr" / "pay.md").write_text("# 薪资\n\n每月十日发放工资。\n", encoding="utf-8")
    (docs / "a.exe").write_bytes(b"MZ\x90\x00")
    empty = tmp_path / "empty"
    empty.mkdir()

    ingest = run_cli(
        "ingest", "mixed", "--tenant", "acme", "--tag", "hr", "-w", "ws", cwd=tmp_path, columns=200
    )
    nothing = run_cli("ingest", "empty", "-w", "ws", cwd=tmp_path, columns=200)
    listed = run_cli("sources", "-w", "ws", cwd=tmp_path, columns=120)
    forget = run_cli("forget", "mixed", "-w", "ws", cwd=tmp_path)

    assert ingest.returncode == 0, ingest.stderr
    assert "not read in mixed: 1 file of an unsupported type (a.exe)" in ingest.stdout
    assert "empty holds no file of a type shelfhand reads" in nothing.stdout
    row = next(line for line in listed.stdout.splitlines() if "pay.md" in line)
    assert "acme" in row and "hr" in row
    assert forget.returncode == 0, forget.stderr
    assert "removed mixed/ (1 document)" in forget.stdout


def test_counts_read_in_the_singular_for_one(tmp_path: Path) -> None:
    (tmp_path / "one.md").write_text("# One\n\nA single short passage.\n", encoding="utf-8")

    out = run_cli("ingest", "one.md", "-w", "ws", cwd=tmp_path, columns=200)

    assert out.returncode == 0, out.stderr
    assert "1 chunk " in out.stdout and "1 chunks" not in out.stdout


def test_search_shows_a_long_passage_around_its_matched_term(tmp_path: Path) -> None:
    # four-letter words: about five characters a token, so a 400-token chunk is ~2,000 chars
    filler = " ".join("lamp fans heat dust wall" for _ in range(70))
    (tmp_path / "long.md").write_text(
        f"# Log\n\n{filler} The final line holds the tailmarker.\n", encoding="utf-8"
    )
    assert run_cli("ingest", "long.md", "-w", "ws", cwd=tmp_path).returncode == 0

    out = run_cli("search", "tailmarker", "--mode", "keyword", "-w", "ws", cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    assert "holds the tailmarker" in squash(out.stdout)
    assert "… " in out.stdout  # the start is left out, and says so


def test_an_excerpt_centres_on_the_first_chinese_or_english_term() -> None:
    from shelfhand.knowledge.evidence.citations import excerpt

    zh = "投影仪说明。" * 300 + "整机保修期限为十二个月。"
    en = "Nothing here. " * 200 + "Error E-203 means the lamp overheats."

    assert "保修期限为十二个月" in excerpt(zh, 120, "保修期多久")
    assert "E-203 means the lamp overheats" in excerpt(en, 200, "what is E-203?")
    assert excerpt(en, 200, "no such words").startswith("Nothing here.")
    assert excerpt("short", 200, "short") == "short"


@pytest.mark.parametrize("gone", ["projector/faq.html", "projector/warranty-policy-v2.md"])
def test_after_forget_the_section_heading_still_weighs_without_a_reindex(
    tmp_path: Path, gone: str
) -> None:
    from shelfhand.knowledge import KnowledgeBase, sample_corpus

    with KnowledgeBase(tmp_path / "ws", None, mode="keyword") as kb:
        kb.ingest([sample_corpus()])
        assert kb.forget(gone) == 1
        top = kb.search("保修期多久", k=3)[0]

    assert top.chunk.section_path[-1] == "保修期限", top.chunk.section_path


def test_chat_without_a_model_answers_with_passages_as_ask_does(tmp_path: Path) -> None:
    assert run_cli("ingest", "--samples", "-w", "ws", cwd=tmp_path).returncode == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(SHELFHAND_EMBEDDER="hashing", COLUMNS="120")

    out = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "chat", "-w", "ws"],
        input="E-203 是什么故障？\n\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )

    assert out.returncode == 0, out.stderr
    assert "SHELFHAND_MODEL" in out.stdout and "cited passages" in out.stdout
    assert "摘录式回答" in out.stdout  # said as `ask` says it, in the question's language
    assert "E-203" in out.stdout and "troubleshooting-manual.pdf" in out.stdout


def test_a_broken_pdf_is_skipped_with_its_reason_and_no_parser_chatter_on_stderr(
    tmp_path: Path,
) -> None:
    (tmp_path / "broken.pdf").write_bytes(
        b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n"
    )

    out = run_cli("ingest", "broken.pdf", "-w", "ws", cwd=tmp_path, columns=200)

    assert out.returncode == 3
    assert "broken.pdf: not a valid PDF" in out.stdout
    assert out.stderr == ""  # pypdf's "EOF marker not found" stays in the parser


@pytest.mark.slow
def test_the_ablation_table_keeps_its_columns_and_says_why_a_stage_was_skipped_at_80_columns(
    tmp_path: Path,
) -> None:
    from shelfhand.knowledge import sample_corpus

    cases = sample_corpus().parent / "projector-cases.jsonl"
    assert run_cli("ingest", "--samples", "-w", "ws", cwd=tmp_path).returncode == 0

    out = run_cli("eval", str(cases), "--ablation", "-w", "ws", cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    header = next(line for line in lines if "nDCG@10" in line and "stage" in line)
    for column in ("mode", "R@5", "R@10", "MRR@10", "p50 ms", "p95 ms"):
        assert column in header
    # rerank is off by default: its row says "skipped" and a line under the table says why
    assert any("+ rerank" in line and "skipped" in line for line in lines)
    assert any(line.startswith("+ rerank: skipped: ") for line in lines)


def test_the_conflict_note_of_search_names_the_newer_versions_effective_date(
    tmp_path: Path,
) -> None:
    assert run_cli("ingest", "--samples", "-w", "ws", cwd=tmp_path).returncode == 0

    out = run_cli("search", "保修期多久", "-k", "3", "--mode", "keyword", "-w", "ws", cwd=tmp_path)

    assert out.returncode == 0, out.stderr
    note = squash(out.stdout.split("注意：", 1)[1])  # asked in Chinese: the note is too
    # the date is stated in the v2 policy's opening passage, which did not match the query
    assert "较新（第 2 版，2025-01-01 生效）" in note
