"""Retrieval commands: search (cited passages, no model) and ask (an answer from the
documents)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.markup import escape

from shelfhand.cli.prose import Prose

if TYPE_CHECKING:
    from shelfhand.knowledge.types import SearchMode, SearchResult

from shelfhand.cli.common import (
    NO_MODEL_HINT,
    DemoToolsOpt,
    RolesOpt,
    TenantOpt,
    UserOpt,
    WorkspaceOpt,
    app,
    caller_context,
    fail,
    make_console,
    no_documents_hint,
    not_indexed,
    open_app,
    plural,
    require_index,
)
from shelfhand.cli.model_flags import (
    MaxTokensOpt,
    TemperatureOpt,
    ToolChoiceOpt,
    ToolModeOpt,
    apply_model_flags,
)

ModeOpt = Annotated[str, typer.Option("--mode", help="Retrieval: hybrid, keyword or vector.")]
MAX_K = 20
"""The most passages one search returns (the API's ``top_k`` bound)."""


@app.command()
def search(
    query: str,
    workspace: WorkspaceOpt = None,
    k: Annotated[
        int, typer.Option("-k", min=1, max=MAX_K, help="How many passages (as the API: 1-20).")
    ] = 5,
    mode: ModeOpt = "hybrid",
    tenant: TenantOpt = "default",
    user: UserOpt = "cli",
    role: RolesOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the hits as JSON (with their citations).")
    ] = False,
) -> None:
    """Search the knowledge base and print cited passages (no model involved)."""
    from shelfhand.knowledge.analysis import in_chinese
    from shelfhand.knowledge.evidence.citations import (
        format_passages,
        prepare_evidence,
        to_citations,
    )
    from shelfhand.knowledge.evidence.conflicts import newer_without_date

    if not query.strip():
        raise fail("the query is empty: search for something, e.g. shelfhand search E-203", 2)
    a = open_app(workspace, existing=True)
    require_index(a)
    kb = a.open_knowledge()
    found = kb.search_result(
        query, k=k, user=caller_context(tenant, user, role), mode=check_mode(mode)
    )
    citations = prepare_evidence(to_citations(list(found.hits)), query)  # disagreements flagged
    if any(newer_without_date(n) for c in citations for n in c.conflict_note.splitlines()):
        # the note names the newer version: add its effective date from the documents
        context = effective_context(kb, citations, caller_context(tenant, user, role))
        citations = prepare_evidence(to_citations(list(found.hits)), query, context=context)
    if as_json:
        typer.echo(json.dumps([c.to_dict() for c in citations], ensure_ascii=False, indent=2))
    else:
        chinese = in_chinese(query)  # (cli.answers, with the other words, would load the agent)
        console = make_console()
        if not citations:
            nothing = (
                f"未找到：没有与 {query!r} 相符的段落"
                if chinese
                else f"not found: no passage matches {query!r}"
            )
            console.print(nothing, highlight=False, markup=False)
        else:
            passages = format_passages(citations, query=query)  # each shown where it matched
            console.print(Prose(passages))
        for line in search_notes(found, chinese=chinese):
            console.print(line, highlight=False)
    kb.close()


def search_notes(found: SearchResult, *, chinese: bool) -> list[str]:
    """The lines under a search's passages (rich markup): chunks found by keywords only, for
    want of their vectors, and why the search did less than asked (the reason's own words
    are the knowledge layer's, technical, in English); in Chinese for a Chinese query."""
    lines = []
    pending = found.pending_chunks
    if pending and chinese:
        lines.append(
            f"[dim]{pending} 个段落尚未嵌入（只能按关键词找到）；`shelfhand embed` 会嵌入"
            f"{'它' if pending == 1 else '它们'}[/]"
        )
    elif pending:
        one = pending == 1
        lines.append(
            f"[dim]{plural(pending, 'chunk')} {'is' if one else 'are'} not embedded yet "
            f"(found by keywords only); `shelfhand embed` embeds {'it' if one else 'them'}[/]"
        )
    label = "[yellow]注意：[/]" if chinese else "[yellow]note:[/] "
    lines += [label + escape(note) for note in (found.degraded_reason, found.rerank_reason) if note]
    return lines


def effective_context(kb: Any, citations: Sequence[Any], user: Any) -> list[Any]:
    """Passages of the cited documents that say when they take effect (searched within each
    document, with the caller's permissions), for the version notes of conflicts."""
    from shelfhand.knowledge.evidence.citations import to_citations

    hits = []
    for source in dict.fromkeys(c.source for c in citations):
        hits += kb.search(
            "生效 生效日期 effective", k=2, user=user, mode="keyword", filters={"source": source}
        )
    return list(to_citations(hits))


def check_mode(mode: str) -> SearchMode:
    """``--mode`` as a search mode; anything else exits with a usage error (2)."""
    if mode in ("hybrid", "keyword", "vector"):
        return cast("SearchMode", mode)
    raise fail(f"--mode must be hybrid, keyword or vector, not {mode!r}", 2)


@app.command()
def ask(
    question: str,
    workspace: WorkspaceOpt = None,
    tenant: TenantOpt = "default",
    user: UserOpt = "cli",
    role: RolesOpt = None,
    retrieval: Annotated[
        str | None,
        typer.Option(
            "--retrieval",
            help="Where the answer's passages come from: context (retrieved before the model "
            "is asked), tool (the model calls retrieve) or both (default: answer_retrieval "
            "setting, else both).",
        ),
    ] = None,
    max_tokens: MaxTokensOpt = None,
    temperature: TemperatureOpt = None,
    tool_mode: ToolModeOpt = None,
    tool_choice: ToolChoiceOpt = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object: output, citations, grounding, usage, stop_reason, "
            "trace_id, tool_steps (each call and what it returned).",
        ),
    ] = False,
    demo_tools: DemoToolsOpt = False,
) -> None:
    """Answer from the documents (chat model if configured, else the passages' sentences).

    Every answer is checked against its passages: unsupported sentences are flagged, and an
    answer that cannot be trusted is replaced by the passages' own sentences (setting
    ``answer_check``). Exits 3 when the model gave no answer (blank, loop guard, step limit)
    and 1 when it failed; the passages found are printed either way.
    """
    from dataclasses import replace

    from shelfhand.cli.answers import print_answer, print_json, words_for
    from shelfhand.cli.rescue import Found, answer_of_failed_run
    from shelfhand.core.errors import ConfigurationError, ModelError
    from shelfhand.core.settings import check_answer_retrieval
    from shelfhand.core.step_counts import count_steps, stop_counting
    from shelfhand.usage.by_model import ModelTally

    if not question.strip():  # (a model would be asked nothing, and answer anyway)
        raise fail("the question is empty: ask something, e.g. shelfhand ask 'E-203?'", 2)
    try:
        mode = None if retrieval is None else check_answer_retrieval(retrieval)
    except ConfigurationError as exc:
        raise fail(f"--retrieval: {exc}", 2) from None
    a = open_app(workspace, existing=True)
    if demo_tools:
        a.use_demo_tools()
    apply_model_flags(
        a,
        max_tokens=max_tokens,
        temperature=temperature,
        tool_mode=tool_mode,
        tool_choice=tool_choice,
    )
    console = make_console()
    kb = a.open_knowledge() if a.knowledge_exists() else None
    model = a.chat_model()
    ctx = caller_context(tenant, user, role)
    if model is None:
        if kb is None:
            raise not_indexed(a.settings.workspace, also=NO_MODEL_HINT)
        result = a.knowledge_agent(kb).run_sync(question, context=ctx)
        if as_json:
            code = print_json(result)
        else:
            code = print_answer(console, result, question)
            console.print()
            console.print(Prose(words_for(question).no_model, style="dim"))
        kb.close()
        raise typer.Exit(code)
    if kb is None:  # (a model alone: say so, on stderr, so that --json stays one object)
        typer.echo(f"note: {no_documents_hint(a.settings.workspace)}", err=True)
    agent = a.chat_agent(model, kb, retrieval=mode)
    # the run's steps tallied as the service tallies a turn's: a run that fails after some
    # model calls has no result to carry its usage
    tally = ModelTally(prices=a.settings.prices)
    _, counting = count_steps(tally)
    found = Found()
    try:
        from shelfhand.agent.runs import run_closing
        from shelfhand.cli.chat import console_approvals

        approvals = console_approvals(console)
        result = run_closing(
            agent,
            lambda: found.final(
                agent.stream(question, text_deltas=False, context=ctx, approvals=approvals)
            ),
        )
    except ModelError as exc:
        # the passages are still worth reading: the model was cut off (those the run found)
        answer = answer_of_failed_run(a, kb, question, ctx, found, exc)
        if answer is not None:
            # what the failed run used (and a search of the question's, if one was needed)
            answer = replace(answer, usage=tally.total())
            if as_json:
                print_json(answer)
            else:
                print_answer(console, answer, question)
        if kb is not None:
            kb.close()
        raise fail(f"the chat model failed: {exc}", 1) from None
    finally:
        stop_counting(counting)
    code = print_json(result) if as_json else print_answer(console, result, question)
    if kb is not None:
        kb.close()
    raise typer.Exit(code)
