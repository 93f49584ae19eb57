"""How ``shelfhand ask`` shows an answer: the text, the passages it uses, the grounding flags,
the notes, and the exit code that says whether it is an answer.

Exit codes: 0 an answer (the model's, grounded or flagged; the passages' own sentences in its
place; "the documents do not cover this"); 3 the model gave no answer (a blank reply, a run the
loop guard or ``max_iters`` stopped: the passages' best sentences are printed when there are
some, so a script can tell and a person still reads them); 1 the chat model failed (the
passages found are printed first).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.markup import escape

from shelfhand.agent.answer_check import REASONS, REASONS_ZH, relevant_citations
from shelfhand.agent.fallbacks import RETRIEVE_TOOL, found_nothing, in_chinese
from shelfhand.cli.common import NO_MODEL_HINT, NO_MODEL_HINT_ZH
from shelfhand.cli.prose import Prose
from shelfhand.core.messages import Citation
from shelfhand.core.results import RunResult
from shelfhand.knowledge.evidence.citations import NOTE, NOTE_ZH, conflict_notes, label

__all__ = [
    "CHINESE",
    "ENGLISH",
    "NO_ANSWER_EXIT_CODE",
    "REASONS",
    "Words",
    "exit_code",
    "print_answer",
    "print_json",
    "print_notes",
    "shown_citations",
    "tools_used",
    "words_for",
]

NO_ANSWER_EXIT_CODE = 3
"""`shelfhand ask` exits with this when there is no answer (see the module docstring)."""
_NON_ANSWERS = frozenset({"empty", "max_iters", "repeated_call", "human_needed", "budget_exceeded"})


@dataclass(frozen=True, slots=True)
class Words:
    """What ``ask`` and ``chat`` write under an answer, in one language (rich markup, but
    :attr:`no_model`; the ``{…}`` fields are filled in escaped)."""

    not_found: str
    extractive: str
    no_passage: str
    unsupported: str
    missing: str
    misplaced: str
    unknown: str
    tools: str
    failed: str
    not_run: str
    separator: str
    no_model: str
    reasons: dict[str, str]


ENGLISH = Words(
    not_found="[yellow]not found:[/] no passage of the documents matches this question; "
    "the answer above is not from them",
    extractive="[dim]extractive answer: sentences of the documents, not written by a model "
    "({why})[/]",
    no_passage="[yellow]note:[/] {why}; no passage answers it",
    unsupported="[yellow]unsupported:[/] {text}",
    missing=" ({items} not in the passages)",
    misplaced=" ({items} is another row's in the passages' table)",
    unknown="[yellow]note:[/] the answer cites {numbers}, which no passage has: not evidence",
    tools="[dim]tools: {used}[/]",
    failed="{name} (failed)",
    not_run="{name} (not run)",
    separator=", ",
    no_model=NO_MODEL_HINT,
    reasons=REASONS,
)
CHINESE = Words(
    not_found="[yellow]未找到：[/]文档中没有与这个问题相符的段落；上面的回答并非出自文档",
    extractive="[dim]摘录式回答：文档的原句，并非模型所写（{why}）[/]",
    no_passage="[yellow]注意：[/]{why}；没有段落回答这个问题",
    unsupported="[yellow]无依据：[/]{text}",
    missing="（段落中没有 {items}）",
    misplaced="（{items} 在段落的表格中属于另一行）",
    unknown="[yellow]注意：[/]回答引用了 {numbers}，但没有这样的段落：不算依据",
    tools="[dim]工具：{used}[/]",
    failed="{name}（失败）",
    not_run="{name}（未执行）",
    separator="、",
    no_model=NO_MODEL_HINT_ZH,
    reasons=REASONS_ZH,
)


def words_for(question: str) -> Words:
    """The words under an answer to ``question``: Chinese for a question asked in Chinese
    (:func:`~shelfhand.agent.fallbacks.in_chinese`), else English."""
    return CHINESE if in_chinese(question) else ENGLISH


def exit_code(result: RunResult) -> int:
    """0 for an answer, :data:`NO_ANSWER_EXIT_CODE` for a run the model ended without one
    (even when the extractive answer stands in)."""
    return NO_ANSWER_EXIT_CODE if result.stop_reason in _NON_ANSWERS else 0


def shown_citations(result: RunResult) -> list[Citation]:
    """The passages shown as the answer's evidence: those it cites, else those the
    grounding check found supporting it; none for a refusal or a non-answer."""
    cited = relevant_citations(result.citations, result.output)
    if cited or result.grounding is None:
        return cited
    by_index = {c.index: c for c in result.citations}
    numbers = dict.fromkeys(
        s.passage for s in result.grounding.sentences if s.supported and s.passage is not None
    )
    return [by_index[n] for n in numbers if n is not None and n in by_index]


def print_answer(console: Console, result: RunResult, question: str = "") -> int:
    """Print ``result`` for a person and return the exit code of :func:`exit_code`; the
    lines under it are in ``question``'s language (:func:`words_for`)."""
    words = words_for(question)
    console.print(Prose(result.output))
    used = tools_used(result, words)
    if used:  # where an answer resting on no passage came from
        console.print(words.tools.format(used=escape(used)), highlight=False)
    return print_notes(console, result, question)


def tools_used(result: RunResult, words: Words = ENGLISH) -> str:
    """The tools other than ``retrieve`` the run called, each once, in order; a tool none of
    whose calls answered is marked: ``(failed)`` when one of them failed (the tool raised,
    timed out, was unavailable, returned an error), else ``(not run)`` (every call was the
    model's mistake: an unknown tool, invalid arguments, not permitted). "" for none."""
    ok: dict[str, bool] = {}
    failed: set[str] = set()
    for message in result.messages:
        for r in message.tool_results:
            if r.name != RETRIEVE_TOOL:
                ok[r.name] = ok.get(r.name, False) or not r.is_error
                if r.failure:
                    failed.add(r.name)
    shown = (
        name if fine else (words.failed if name in failed else words.not_run).format(name=name)
        for name, fine in ok.items()
    )
    return words.separator.join(shown)


def print_notes(console: Console, result: RunResult, question: str = "") -> int:
    """What :func:`print_answer` prints under the answer (its evidence, the grounding
    flags, why it was replaced), in ``question``'s language; for a terminal that has shown
    the answer already (``chat`` streams it). Returns the exit code of :func:`exit_code`."""
    words = words_for(question)
    if not result.citations and found_nothing(result.messages):
        console.print(words.not_found, highlight=False)
    evidence = shown_citations(result)
    if evidence:
        console.print()
        for c in evidence:
            console.print(Prose(f"[{c.index}] {label(c)}", style="dim"))
    for note in conflict_notes(evidence):  # passages that disagree: never hidden
        text = note if note.startswith(NOTE_ZH) else "note: " + note.removeprefix(NOTE)
        console.print(Prose(text, style="yellow"))
    reason = result.fallback_reason
    why = escape(words.reasons.get(reason, reason))
    if result.extractive:
        console.print(words.extractive.format(why=why), highlight=False)
    elif reason in ("ungrounded", "prompt_echo", "posed_as_quoted"):
        console.print(words.no_passage.format(why=why), highlight=False)
    grounding = result.grounding
    if grounding is not None and not result.extractive:
        for s in grounding.unsupported:
            line = words.unsupported.format(text=escape(s.text))
            if s.missing:
                line += escape(words.missing.format(items=", ".join(s.missing)))
            if s.misplaced:
                line += escape(words.misplaced.format(items=", ".join(s.misplaced)))
            console.print(line, highlight=False)
    if result.unknown_citations:
        numbers = escape(", ".join(f"[{n}]" for n in result.unknown_citations))
        console.print(words.unknown.format(numbers=numbers), highlight=False)
    return exit_code(result)


def print_json(result: RunResult) -> int:
    """``ask --json``: the answer, its citations, the grounding check and what the run used,
    as one object; returns the exit code of :func:`exit_code`."""
    grounding = result.grounding.to_dict() if result.grounding is not None else None
    body = {
        "output": result.output,
        "citations": [c.to_dict() for c in result.citations],
        "unknown_citations": list(result.unknown_citations),
        "grounding": grounding,
        "extractive": result.extractive,
        "fallback_reason": result.fallback_reason,
        "budget": dict(result.budget) if result.budget is not None else None,
        "usage": result.usage.to_dict(),
        "stop_reason": result.stop_reason,
        "trace_id": result.trace_id,
        "tool_steps": tool_steps(result),
    }
    typer.echo(json.dumps(body, ensure_ascii=False))
    return exit_code(result)


def tool_steps(result: RunResult) -> list[dict[str, object]]:
    """The run's tool calls in order, each with what it returned (as the service's
    ``tool_steps``, without durations): which of your tools the model called, and how."""
    results = {r.call_id: r for m in result.messages for r in m.tool_results}
    steps: list[dict[str, object]] = []
    for message in result.messages:
        for call in message.tool_calls:
            done = results.get(call.id)
            steps.append(
                {
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                    "content": done.content if done is not None else "",
                    "is_error": done.is_error if done is not None else False,
                    "failure": done.failure if done is not None else "",
                }
            )
    return steps
