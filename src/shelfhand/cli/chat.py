"""Commands to talk to the agent and see its tools: ``tools`` and ``chat``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shelfhand.cli.common import (
    NO_MODEL_HINT,
    DemoToolsOpt,
    RolesOpt,
    TenantOpt,
    UserOpt,
    WorkspaceOpt,
    app,
    caller_context,
    make_console,
    no_documents_hint,
    not_indexed,
    open_app,
)
from shelfhand.cli.model_flags import (
    MaxTokensOpt,
    TemperatureOpt,
    ToolChoiceOpt,
    ToolModeOpt,
    apply_model_flags,
)

if TYPE_CHECKING:
    from shelfhand.agent.retrieve import KnowledgeAgent
    from shelfhand.core.context import UserContext
    from shelfhand.core.messages import Message


@app.command()
def tools(
    workspace: WorkspaceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the schemas as JSON.")] = False,
) -> None:
    """List the tools the model can call, with their JSON schemas."""
    a = open_app(workspace)
    # the schemas do not depend on the documents: no need to open the knowledge base
    kit = a.toolkit(None, governed=False)
    schemas = kit.schemas()
    if as_json:
        typer.echo(json.dumps(schemas, ensure_ascii=False, indent=2))
        return
    from rich.table import Table

    table = Table(title="tools")
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("attributes")
    table.add_column("parameters")
    table.add_column("description", ratio=1)
    for t in kit.visible_tools():
        params = t.schema()["function"]["parameters"].get("properties", {})
        attrs = [
            k for k in ("read_only", "concurrency_safe", "external", "confirm") if getattr(t, k)
        ]
        attrs.append(f"permission={t.permission}")
        table.add_row(t.name, ", ".join(attrs), ", ".join(params), t.description.split("\n")[0])
    make_console().print(table)


@app.command()
def chat(
    workspace: WorkspaceOpt = None,
    tenant: TenantOpt = "default",
    user: UserOpt = "cli",
    role: RolesOpt = None,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    tool_mode: ToolModeOpt = None,
    tool_choice: ToolChoiceOpt = None,
    demo_tools: DemoToolsOpt = False,
) -> None:
    """Chat with the configured model (streaming), using the tools and the knowledge base."""
    a = open_app(workspace)
    if demo_tools:
        a.use_demo_tools()
    apply_model_flags(
        a,
        max_tokens=max_tokens,
        temperature=temperature,
        tool_mode=tool_mode,
        tool_choice=tool_choice,
    )
    model = a.chat_model()
    console = make_console()
    kb = a.open_knowledge() if a.knowledge_exists() else None
    ctx = caller_context(tenant, user, role)
    if model is None:  # as `ask`: the cited passages answer, and the hint says why
        if kb is None:
            raise not_indexed(a.settings.workspace, also=NO_MODEL_HINT)
        _passages_chat(a.knowledge_agent(kb), ctx, console)
        kb.close()
        return
    import asyncio

    from rich.markup import escape

    from shelfhand.agent.memory import ConversationMemory
    from shelfhand.cli.answers import print_answer
    from shelfhand.cli.rescue import Found, answer_of_failed_run
    from shelfhand.core.errors import ModelError

    agent = a.chat_agent(model, kb, memory=ConversationMemory())
    if kb is None:
        hint = no_documents_hint(a.settings.workspace)
        console.print(f"[yellow]note:[/] {escape(hint)}", highlight=False)
    console.print(f"[dim]model {escape(model.name)}; empty line, /exit or Ctrl-D to quit[/]")
    for line in _lines(console):
        found = Found()
        try:
            asyncio.run(_stream_turn(agent, line, ctx, console, found))
        except ModelError as exc:
            console.print()
            console.print(f"[bold red]model error:[/] {escape(str(exc))}", highlight=False)
            # the passages the turn had found still answer (as `ask` does)
            past = agent.memory.messages if agent.memory is not None else []
            answer = answer_of_failed_run(a, kb, line, ctx, found, exc, history=past)
            if answer is not None:
                print_answer(console, answer, line)
                if agent.memory is not None:
                    # remembered as the service remembers a rescued turn: the next line
                    # ("how do I fix it?") follows this question and the answer shown
                    agent.memory.add(answer.messages)


QUIT_WORDS = frozenset({"/exit", "/quit", "/bye", "exit", "quit", "退出"})
"""A line of one of these ends the chat as an empty line does (what other chat prompts take:
before, "/exit" was asked as a question, and searched for)."""


def _lines(console: Any) -> Iterator[str]:
    """What the user types, line by line, until an empty line, a quit word
    (:data:`QUIT_WORDS`), Ctrl-D or Ctrl-C; a line that is not UTF-8 text is refused, and the
    next one read."""
    from rich.markup import escape

    from shelfhand.cli.common import not_text_argument

    while True:
        try:
            line = console.input("[bold green]you> [/]")
        except (EOFError, KeyboardInterrupt):
            return
        except UnicodeDecodeError as exc:  # (a UTF-8 locale whose stdin is strict)
            shown = exc.object[exc.start : exc.end]
            line = os.fsdecode(shown if isinstance(shown, bytes) else b"\xff")
        if not line.strip() or line.strip().lower() in QUIT_WORDS:
            return
        problem = not_text_argument([line], "line")  # typed in a terminal that is not UTF-8
        if problem:
            console.print(f"[red]{escape(problem)}[/]")
            continue
        yield line


def _passages_chat(agent: KnowledgeAgent, ctx: UserContext, console: Any) -> None:
    """Chat without a model: every question is answered as ``ask`` answers it (the
    passages' own sentences, with the passages they come from), a follow-up pointing back
    searched with the question it follows."""
    from rich.markup import escape

    from shelfhand.agent.rewrite import CARRY_BACK
    from shelfhand.cli.answers import print_answer

    console.print(
        f"[dim]{escape(NO_MODEL_HINT)} Until then, answers are the cited passages' own "
        "sentences; empty line, /exit or Ctrl-D to quit[/]"
    )
    past: list[Message] = []  # the lines typed so far, and their answers
    for line in _lines(console):
        # a follow-up pointing back ("怎么修？" after "E-203 是什么故障？") is searched with
        # the question it follows (each line was searched alone: "怎么修？" found nothing)
        result = agent.run_sync(line, context=ctx, history=past)
        print_answer(console, result, line)
        past = [*past, *result.messages][-2 * CARRY_BACK :]


def console_approvals(console: Any) -> Any:
    """Approvals decided at the terminal: each ``confirm=True`` call asks "run it? [y/N]"."""
    import asyncio
    import json as _json

    from rich.markup import escape

    from shelfhand.tools.approvals import ApprovalRequest, Approvals

    async def ask(request: ApprovalRequest) -> bool:
        args = _json.dumps(dict(request.arguments), ensure_ascii=False)
        prompt = f"[bold yellow]approve[/] {escape(request.tool)}({escape(args)})? \\[y/N] "
        try:
            answer = await asyncio.to_thread(console.input, prompt)
        except (EOFError, KeyboardInterrupt):
            return False
        return answer.strip().lower() in ("y", "yes")

    return Approvals(handler=ask)


async def _stream_turn(agent: Any, line: str, ctx: Any, console: Any, found: Any) -> None:
    """One turn, streamed to the terminal, which can only append: a withdrawn guess and an
    answer the check replaced are said so in words, then the answer that counts; under it,
    what ``ask`` prints under an answer (the passages it uses, the grounding flags)."""
    from rich.markup import escape

    from shelfhand.cli.answers import print_notes
    from shelfhand.cli.prose import Prose
    from shelfhand.core.events import (
        AnswerReplaced,
        Final,
        TextDelta,
        TextWithdrawn,
        ToolFinished,
        ToolStarted,
    )

    mid_line = False  # streamed text without a line end yet: a tool step starts a new line
    shown = ""  # the answer streamed since the last withdrawal
    replaced: AnswerReplaced | None = None
    async for event in agent.stream(line, context=ctx, approvals=console_approvals(console)):
        found.see(event)
        if isinstance(event, TextDelta):
            console.print(event.text, end="", highlight=False, markup=False)
            shown += event.text
            mid_line = not event.text.endswith("\n")
        elif isinstance(event, TextWithdrawn):  # a terminal cannot unprint: said instead
            console.print()
            console.print(f"[dim]({escape(event.notice)}…)[/]", highlight=False)
            mid_line, shown = False, ""
        elif isinstance(event, AnswerReplaced):
            replaced = event
        elif isinstance(event, ToolStarted):
            if mid_line:
                console.print()
                mid_line = False
            # the model wrote both: "[/]" in an argument is text, not markup
            console.print(f"[dim]→ {escape(event.name)}({escape(event.arguments)})[/]")
        elif isinstance(event, ToolFinished):
            status = "[red]error[/]" if event.is_error else "ok"
            step = f"[dim]← {escape(event.name)} {status} {event.duration_ms:.0f} ms"
            if event.is_error:  # what the model was told: the tool's author needs it too
                step += f": {escape(_first_line(event.content))}"
            console.print(step + "[/]")
        elif isinstance(event, Final):
            result = event.result
            if mid_line:
                console.print()
            if replaced is not None and shown.strip():
                console.print(f"[yellow]{escape(replaced.notice)}:[/]", highlight=False)
            if replaced is not None or not shown.strip():  # (nothing streamed: not shown yet)
                console.print(Prose(result.output))
            print_notes(console, result, line)


def _first_line(text: str, width: int = 300) -> str:
    """The first line of ``text``, at most ``width`` characters."""
    first = text.strip().split("\n", 1)[0]
    return first if len(first) <= width else first[: width - 1] + "…"
