"""``shelfhand trace``: the traces of a workspace's service turns (``traces.db``, or
PostgreSQL with ``database_url``).

``shelfhand trace`` lists a tenant's newest turns; ``shelfhand trace ID`` prints one turn's
tree with the time each step took, the tokens of each model call, each tool call's outcome
and governance decisions, and each retrieval's hits with their scores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from shelfhand.cli.common import TenantOpt, WorkspaceOpt, app, fail, make_console, open_app

if TYPE_CHECKING:
    from shelfhand.traces.store import SpanRecord


@app.command()
def trace(
    trace_id: Annotated[str | None, typer.Argument(help="A trace id: print its tree.")] = None,
    workspace: WorkspaceOpt = None,
    tenant: TenantOpt = "default",
    user: Annotated[
        str | None, typer.Option("--user", help="Only this user's turns (default: all users).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="Most traces listed.")] = 20,
    outcome: Annotated[
        str | None,
        typer.Option(
            "--outcome",
            help="Only turns that ended so: a reason (off_topic, refusal, model_timeout...), "
            "or 'any' for every turn not answered with the model's answer as written.",
        ),
    ] = None,
) -> None:
    """List recent traces of a tenant, or print one trace's tree with times."""
    from shelfhand.core.context import UserContext

    a = open_app(workspace, existing=True)
    if a.settings.tracing == "off":
        make_console().print("Tracing is off (tracing = off): no trace is stored.")
        return
    if not a.settings.database_url and not (a.settings.workspace / "traces.db").is_file():
        make_console().print("No traces yet: they are recorded for each service turn.")
        return
    owner = UserContext(tenant_id=tenant, user_id=user or "-")
    store = a.trace_store()
    try:
        if trace_id is None:
            found = store.recent(owner, limit=limit, all_users=user is None, outcome=outcome)
            if not found:
                which = f" ending {outcome}" if outcome else ""
                make_console().print(f"No traces{which} of tenant {tenant}.")
                return
            for t in found:
                d = t.to_dict()
                typer.echo(
                    f"{t.trace_id}  {_when(d['started_at'])}  {_padded(t.user_id, 12)} "
                    f"{d['duration_ms']:>9.1f} ms  {t.status:<5}  "
                    f"tokens {t.input_tokens}/{t.output_tokens}"
                    + (f"  {t.outcome}" if t.outcome else "")
                )
            return
        spans = store.spans(trace_id, owner, all_users=user is None)
    finally:
        store.close()
        a.close()
    if spans is None:
        raise fail(f"no trace {trace_id} in tenant {tenant}", 1)
    for line in tree_lines(spans):
        typer.echo(line)


def _padded(text: str, width: int) -> str:
    """``text`` padded to ``width`` terminal cells (a Chinese character takes two)."""
    from rich.cells import cell_len

    return text + " " * max(0, width - cell_len(text))


def _when(epoch: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def tree_lines(spans: list[SpanRecord]) -> list[str]:
    """The spans as an indented tree (children in start order), one line each."""
    children: dict[str, list[SpanRecord]] = {}
    ids = {s.span_id for s in spans}
    roots: list[SpanRecord] = []
    for s in spans:
        if s.parent_id in ids:
            children.setdefault(s.parent_id, []).append(s)
        else:
            roots.append(s)
    lines: list[str] = []
    start = min((s.start_ns for s in spans), default=0)

    def walk(span: SpanRecord, depth: int) -> None:
        offset = (span.start_ns - start) / 1e6
        mark = ""
        if span.status == "error":
            mark = " ✗ " + str(span.attributes.get("error.type", ""))
            if span.attributes.get("shelfhand.chat.failure"):
                mark += f": {span.attributes['shelfhand.chat.failure']}"
        lines.append(
            f"{offset:>9.1f} ms {'  ' * depth}{span.name}  ({span.duration_ms:.1f} ms)"
            f"{mark}{_details(span.attributes)}"
        )
        resting = span.attributes.get("shelfhand.answer.passages")
        if resting:
            lines.append(f"{'':>12} {'  ' * (depth + 1)}· the answer rests on {', '.join(resting)}")
        for event in span.events:
            attrs = ", ".join(f"{k}={v}" for k, v in event.get("attributes", {}).items())
            lines.append(f"{'':>12} {'  ' * (depth + 1)}· {event['name']} {attrs}".rstrip())
        for hit in span.attributes.get("gen_ai.retrieval.documents", []) or []:
            lines.append(f"{'':>12} {'  ' * (depth + 1)}- {_hit(hit)}")
        for child in children.get(span.span_id, []):
            walk(child, depth + 1)

    for root in roots:
        walk(root, 0)
    return lines


def _hit(hit: dict[str, Any]) -> str:
    """A retrieved passage: its score, its chunk id (which names its document, else the
    document too) and its title."""
    source, chunk, title = hit.get("source", ""), hit.get("id", ""), hit.get("title", "")
    where = chunk if chunk.startswith(source) else f"{source} {chunk}"
    return f"{hit.get('score', 0):.3f} {where}" + (f"  {title}" if title else "")


def _details(a: dict[str, Any]) -> str:
    parts: list[str] = []
    if "gen_ai.usage.input_tokens" in a:
        estimated = " (estimated)" if a.get("shelfhand.usage.estimated") else ""
        parts.append(
            f"tokens {a['gen_ai.usage.input_tokens']}/{a.get('gen_ai.usage.output_tokens', 0)}"
            f"{estimated}"
        )
    if "gen_ai.tool.call.arguments" in a:
        parts.append(f"args {a['gen_ai.tool.call.arguments']}")
    if "shelfhand.tool.outcome" in a:
        parts.append(f"{a.get('shelfhand.tool.decision')}/{a['shelfhand.tool.outcome']}")
    if "gen_ai.retrieval.query.text" in a:
        parts.append(f"query {a['gen_ai.retrieval.query.text']!r}")
        parts.append(f"mode {a.get('shelfhand.retrieval.mode')}")
        if a.get("shelfhand.retrieval.degraded_reason"):
            parts.append(f"degraded: {a['shelfhand.retrieval.degraded_reason']}")
        if a.get("shelfhand.retrieval.rerank_reason"):  # "rerank (…) failed, fused order kept…"
            parts.append(a["shelfhand.retrieval.rerank_reason"])
    parts.extend(_answer(a))
    return ("  " + ", ".join(parts)) if parts else ""


def _answer(a: dict[str, Any]) -> list[str]:
    """How a turn's answer was made (see :mod:`shelfhand.service.turn_spans`)."""
    parts: list[str] = []
    stop = a.get("shelfhand.turn.stop_reason")
    if stop and stop != "final":
        parts.append(f"stop {stop}")
    reason = a.get("shelfhand.answer.fallback_reason")
    if reason and reason != stop:
        parts.append(f"fallback {reason}")  # (why the model's answer was replaced)
    if a.get("shelfhand.answer.extractive"):
        parts.append("extractive")  # (the passages' sentences)
    unsupported = a.get("shelfhand.answer.unsupported_sentences")
    if unsupported:
        parts.append(f"{unsupported} unsupported sentence{'s' if unsupported > 1 else ''}")
    elif a.get("shelfhand.answer.grounded") is False:
        parts.append("not grounded")  # (e.g. a bare name: nothing the check could match)
    return parts
