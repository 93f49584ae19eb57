"""Grounded answers with a real chat model, per answer retrieval mode (issue 9, points 2-3).

Indexes the bundled sample corpus in a temporary workspace, asks six questions (three Chinese,
three English) with ``App.chat_agent(..., retrieval=mode)`` for each mode, and counts:

- ``grounded``: answers that cite at least one passage number the run gave out;
- ``unknown``: answers citing a number no passage had (``RunResult.unknown_citations``);
- ``model_retrieved``: runs in which the model itself called ``retrieve``;
- latency per answer.

The chat model comes from the usual settings (``SHELFHAND_MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``SHELFHAND_MODEL_TIMEOUT``), e.g. a local llama.cpp server::

    SHELFHAND_MODEL=qwen2.5-coder-0.5b OPENAI_BASE_URL=http://127.0.0.1:8097/v1 \\
    OPENAI_API_KEY=none SHELFHAND_MODEL_TIMEOUT=600 \\
    python bench/answer_grounding.py --modes tool,both [--max-tokens 200] [--json out.json]

Replies are capped at ``--max-tokens`` (sent as ``max_tokens``; a small local model can ramble
for thousands of tokens) and sampled at ``--temperature`` (default 0).

Retrieval is keyword-only (no embedder to load): the point is what the model does with the
passages, not which passages come back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from typing import Any

from shelfhand.app import App
from shelfhand.core.citations import cited_numbers
from shelfhand.core.context import UserContext
from shelfhand.core.settings import ANSWER_RETRIEVAL_MODES, Settings
from shelfhand.knowledge.base import sample_corpus
from shelfhand.models.base import ChatModel
from shelfhand.providers.openai_chat import OpenAIChatModel

QUESTIONS = (
    "E-203 是什么故障？",
    "拆封后的投影仪还能退货吗？",
    "灯泡的保修期是多久？",
    "What does error code E-203 mean?",
    "Can I return a projector after opening it?",
    "How long is the lamp warranty?",
)
USER = UserContext(tenant_id="default", user_id="bench")


async def ask(app: App, model: ChatModel, mode: str, question: str) -> dict[str, Any]:
    kb = app.open_knowledge()
    agent = app.chat_agent(model, kb, retrieval=mode)  # type: ignore[arg-type]
    started = time.perf_counter()
    try:
        result = await agent.run(question, context=USER)
    finally:
        kb.close()
    given = {c.index for c in result.citations}
    # the model's own calls: every assistant tool call except the up-front one (message 1)
    upfront = 1 if mode != "tool" else 0
    calls = [
        c.name
        for i, m in enumerate(result.messages)
        if m.role == "assistant" and i != upfront
        for c in m.tool_calls
    ]
    return {
        "mode": mode,
        "question": question,
        "answer": result.output,
        "given": sorted(given),
        "cited": list(cited_numbers(result.output)),
        "grounded": any(n in given for n in cited_numbers(result.output)),
        "unknown": list(result.unknown_citations),
        "model_retrieved": "retrieve" in calls,
        "seconds": round(time.perf_counter() - started, 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="tool,context,both")
    parser.add_argument("--json", help="write every answer to this file")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="only the first N")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for mode in modes:
        if mode not in ANSWER_RETRIEVAL_MODES:
            parser.error(f"unknown mode {mode!r}")
    workspace = tempfile.mkdtemp(prefix="grounding-")
    env = dict(os.environ, SHELFHAND_RETRIEVAL_MODE="keyword")
    settings = Settings.load(workspace, env=env)
    if not settings.model:
        parser.error("configure a chat model (SHELFHAND_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY)")
    model = OpenAIChatModel(
        settings.model,
        base_url=settings.base_url,
        api_key=settings.api_key,
        timeout=settings.model_timeout,
        temperature=args.temperature,
        extra_body={"max_tokens": args.max_tokens},
    )
    app = App(settings=settings, model=model)
    kb = app.open_knowledge()
    kb.ingest([sample_corpus()])
    kb.close()
    rows: list[dict[str, Any]] = []
    for mode in modes:
        for question in QUESTIONS[: args.questions]:
            # one event loop for every run: the model's HTTP client is bound to it
            row = await ask(app, model, mode, question)
            rows.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
    app.close()
    print(
        "\n| mode | answers | grounded | cite an unknown number | model called retrieve | "
        "median s |"
    )
    print("|---|---|---|---|---|---|")
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        print(
            f"| {mode} | {len(mine)} | {sum(r['grounded'] for r in mine)} | "
            f"{sum(bool(r['unknown']) for r in mine)} | "
            f"{sum(r['model_retrieved'] for r in mine)} | "
            f"{statistics.median(r['seconds'] for r in mine):.1f} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
