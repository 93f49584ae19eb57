"""Answers from the reference scenario's tools through the chat path (``ask --demo-tools``:
up-front retrieval, the shop's tools, the answer check), against the configured chat model.

For each bundled tool case with facts (``samples/tool-cases.jsonl``: stock, prices, the
caller's orders, a return) the request is run once as ``shelfhand ask --demo-tools`` runs it,
with the answer check taken off, and the same run is then checked twice:

* ``with tools``: the answer check as it is (the run's tool results are evidence);
* ``passages only``: the same check with no tool result as evidence (as it was before).

It reports, for the model's own answer and after each check, how many answers state the
case's facts, why the check replaced the others, and what the user reads (``outcomes``: the
model's answer, the passages' sentences, "the documents do not cover this", or the tools that
did not answer). The model is asked once per case, so the two checks see the same answers (the
model's output varies between runs).

With ``--shop-down`` the shop's database is closed before the first call: every shop tool
fails (``ProgrammingError: Cannot operate on a closed database``), as when the order system
is down; then no answer should state an order's or a stock's facts, and what the user reads
should say the tools did not answer.

    python bench/tool_answers.py --workspace /tmp/tool-answers [--shop-down] [--json]

Needs a chat model (SHELFHAND_MODEL, OPENAI_BASE_URL, ...); the samples are indexed into the
workspace on first use.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

from shelfhand.agent import answer_check
from shelfhand.agent.fallbacks import says_not_covered
from shelfhand.app import DEMO_SHOP, App
from shelfhand.core.context import UserContext
from shelfhand.core.errors import ModelError
from shelfhand.core.results import RunResult
from shelfhand.evals.case_files import states
from shelfhand.evals.tool_eval import load_tool_cases, sample_tool_cases
from shelfhand.knowledge.base import sample_corpus
from shelfhand.tools import demo
from shelfhand.tools.approvals import Approvals
from shelfhand.tools.demo import DEMO_USER

CHECKS = ("with_tools", "passages_only")


def _outcome(result: RunResult) -> str:
    """What the user reads: ``model`` (the model's answer), ``passages`` (the extractive
    answer), ``passages_and_tools_failed`` (it, with the tools that did not answer under it),
    ``not_covered``, ``tools_failed`` (the tools that did not answer), ``tools_told``
    (what they returned) or ``other`` (a loop-guard or empty-reply text)."""
    leads = {
        "tools_failed": (
            getattr(answer_check, "TOOLS_FAILED_LEAD", "\0"),
            getattr(answer_check, "TOOLS_FAILED_LEAD_ZH", "\0"),
        ),
        "tools_told": (answer_check.TOOLS_LEAD, answer_check.TOOLS_LEAD_ZH),
    }
    if not result.fallback_reason:
        return "model"
    if result.extractive:
        failed = leads["tools_failed"]
        told_failed = any(f"\n\n{lead}\n" in result.output for lead in failed)
        return "passages_and_tools_failed" if told_failed else "passages"
    if says_not_covered(result.output):
        return "not_covered"
    return next((k for k, lead in leads.items() if result.output.startswith(lead)), "other")


def _row(result: RunResult, facts: tuple[str, ...]) -> dict[str, Any]:
    sentences = result.grounding.sentences if result.grounding is not None else ()
    return {
        "facts_stated": all(states(result.output, f) for f in facts),
        "outcome": _outcome(result),
        "fallback_reason": result.fallback_reason,
        "resting_on_tools": sorted({s.tool for s in sentences if s.tool}),
        "output": result.output,
    }


_OPEN_SHOP = demo.demo_database


def _closed(path: str | Path) -> sqlite3.Connection:
    db = _OPEN_SHOP(path)
    db.close()  # the shop is down: every call fails
    return db


async def run(workspace: Path, *, shop_down: bool = False) -> dict[str, Any]:
    app = App.from_settings(workspace)
    (workspace / DEMO_SHOP).unlink(missing_ok=True)  # every run starts from the same shop
    if shop_down:
        with mock.patch.object(demo, "demo_database", _closed):
            app.use_demo_tools()
    else:
        app.use_demo_tools()
    model = app.chat_model()
    if model is None:
        raise SystemExit("no chat model configured (SHELFHAND_MODEL)")
    if not app.knowledge_exists():
        with app.open_knowledge() as kb:
            kb.ingest([sample_corpus()])
    kb = app.open_knowledge()
    agent = app.chat_agent(model, kb)
    check = agent.answer_check
    assert check is not None
    agent.answer_check = None  # the model's own answer; checked below, both ways
    customer = UserContext(tenant_id="default", user_id=DEMO_USER, roles=["user"])
    rows = []
    for case in load_tool_cases(sample_tool_cases()):
        if not case.facts:
            continue
        approvals = Approvals(handler=lambda request, tool=case.tool: request.tool == tool)
        started = time.perf_counter()
        try:
            raw = await agent.run(case.request, context=customer, approvals=approvals)
        except ModelError as exc:
            rows.append({"id": case.id, "error": f"{type(exc).__name__}: {exc}"})
            continue
        seconds = time.perf_counter() - started
        row: dict[str, Any] = {
            "id": case.id,
            "called": [c.name for m in raw.messages for c in m.tool_calls],
            "seconds": round(seconds, 1),
            "model": _row(raw, case.facts),
        }
        row["with_tools"] = _row(await check.review(raw, case.request), case.facts)
        with mock.patch.object(answer_check, "tool_evidence", lambda messages: []):
            row["passages_only"] = _row(await check.review(raw, case.request), case.facts)
        rows.append(row)
    kb.close()
    answered = [r for r in rows if "error" not in r]
    summary: dict[str, Any] = {"cases": len(rows), "errors": len(rows) - len(answered)}
    for key in ("model", *CHECKS):
        summary[key] = {
            "facts_stated": sum(bool(r[key]["facts_stated"]) for r in answered),
            "replaced": dict(
                Counter(r[key]["fallback_reason"] for r in answered if r[key]["fallback_reason"])
            ),
            "outcomes": dict(Counter(r[key]["outcome"] for r in answered)),
        }
    return {"summary": summary, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--json", action="store_true", help="Print every case as JSON.")
    parser.add_argument(
        "--shop-down", action="store_true", help="Close the shop's database: every tool fails."
    )
    args = parser.parse_args()
    report = asyncio.run(run(args.workspace, shop_down=args.shop_down))
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return
    for row in report["rows"]:
        if "error" in row:
            print(f"{row['id']:<18} {row['error']}")
            continue
        cells = [
            f"{key} {'yes' if row[key]['facts_stated'] else 'no'}"
            f"{' (' + row[key]['fallback_reason'] + ')' if row[key]['fallback_reason'] else ''}"
            f" [{row[key]['outcome']}]"
            for key in ("model", *CHECKS)
        ]
        print(f"{row['id']:<18} " + ", ".join(cells))
    print(json.dumps(report["summary"], ensure_ascii=False))


if __name__ == "__main__":
    main()
