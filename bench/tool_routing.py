"""The first routing decision of a (local) model in constrained mode, per case (issue 9).

An iteration aid for ``bench/tool_calls.py``: it asks only for the first decision of each of
the 20 bundled cases — which tool, or ``none`` — with the same system prompt and tool
descriptions as ``OpenAIChatModel`` in constrained mode (``prompted_messages``), but a schema
that admits only ``{"tool": <a name or "none">}``. With greedy decoding the decision is made
at the same token as in the full call-or-answer schema (``response_format``), so it routes
the same way at a fraction of the time; arguments are not judged here.

What it measures:

- ``--order``: the tools listed in the toolkit's order (``base``), reversed, or rotated by N
  (``rotate:N``): how much the listing order decides;
- ``--samples N --temperature T``: self-consistency, the majority of N sampled decisions
  (ties: the first reached);
- ``--no-examples``: the tools without their routing examples (``shelfhand.tools.demo``);
  ``--cases``: another case file (e.g. ``bench/tool_cases_heldout.jsonl``);
- ``--top``: the model's probabilities of the first token of the decision (llama.cpp
  reports them before the grammar masks tokens), e.g. ``none`` 0.51 / ``retrieve`` 0.28.

::

    python scripts/local_model.py serve --cache /tmp/localmodel --port 8091 &
    python bench/tool_routing.py --base-url http://127.0.0.1:8091/v1 --order reversed
    python bench/tool_routing.py --base-url http://127.0.0.1:8091/v1 --samples 5 --temperature 0.7
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from shelfhand.agent.agent import DEFAULT_SYSTEM_PROMPT
from shelfhand.agent.retrieve import make_retrieve_tool
from shelfhand.core.messages import Message
from shelfhand.evals.tool_eval import load_tool_cases, sample_tool_cases
from shelfhand.providers.tool_modes import NO_TOOL, prompted_messages
from shelfhand.tools.demo import RETRIEVE_EXAMPLES, demo_database, make_tools
from shelfhand.tools.toolkit import Toolkit


def ordered(tools: list[dict[str, Any]], order: str) -> list[dict[str, Any]]:
    if order == "base":
        return tools
    if order == "reversed":
        return tools[::-1]
    if order.startswith("rotate:"):
        n = int(order.split(":", 1)[1]) % len(tools)
        return tools[n:] + tools[:n]
    raise SystemExit(f"unknown --order {order!r} (base, reversed, rotate:N)")


def routing_schema(names: list[str]) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "route",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"tool": {"enum": [*names, NO_TOOL]}},
                "required": ["tool"],
                "additionalProperties": False,
            },
        },
    }


def decision_probs(choice: dict[str, Any], top: int) -> dict[str, float]:
    """The probabilities at the first token of the tool's name (after ``"tool": "``)."""
    tokens = (choice.get("logprobs") or {}).get("content") or []
    for i in range(2, len(tokens)):
        if tokens[i - 2]["token"].endswith("tool") and tokens[i - 1]["token"].startswith('":'):
            at = i + 1 if tokens[i]["token"].strip() == '"' else i
            if at < len(tokens):
                alts = tokens[at].get("top_logprobs") or []
                return {a["token"]: round(math.exp(a["logprob"]), 3) for a in alts[:top]}
    return {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--order", default="base", help="base, reversed or rotate:N")
    parser.add_argument("--samples", type=int, default=1, help="majority of N decisions")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top", type=int, default=6, help="first-token probabilities shown")
    parser.add_argument("--cases", type=Path, default=None, help="JSONL (default: the 20)")
    parser.add_argument(
        "--no-examples", action="store_true", help="without the demo tools' routing examples"
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON results")
    args = parser.parse_args()

    db: sqlite3.Connection = demo_database(Path(tempfile.mkdtemp()) / "shop.db")
    examples = not args.no_examples
    retrieve = make_retrieve_tool(None, examples=RETRIEVE_EXAMPLES if examples else ())
    toolkit = Toolkit([retrieve, *make_tools(db, examples=examples)])
    tools = ordered(toolkit.schemas(), args.order)
    names = [t["function"]["name"] for t in tools]
    print(f"tools listed: {', '.join(names)}", flush=True)
    client = httpx.Client(base_url=args.base_url, timeout=600.0)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for case in load_tool_cases(args.cases or sample_tool_cases()):
        messages = [Message.system(DEFAULT_SYSTEM_PROMPT), Message.user(case.request)]
        body: dict[str, Any] = {
            "model": args.model,
            "messages": prompted_messages(messages, tools, "constrained"),
            "response_format": routing_schema(names),
            "temperature": args.temperature,
            "max_tokens": 24,
            "logprobs": True,
            "top_logprobs": max(args.top, 1),
        }
        t0 = time.perf_counter()
        votes: list[str] = []
        probs: dict[str, float] = {}
        for i in range(max(1, args.samples)):
            reply = client.post("/chat/completions", json={**body, "seed": 1000 + i})
            reply.raise_for_status()
            choice = reply.json()["choices"][0]
            votes.append(str(json.loads(choice["message"]["content"])["tool"]))
            probs = probs or decision_probs(choice, args.top)
        chosen = Counter(votes).most_common(1)[0][0]
        expected = case.tool or NO_TOOL
        row = {
            "id": case.id,
            "expected": expected,
            "chosen": chosen,
            "right": chosen == expected,
            "votes": dict(Counter(votes)),
            "first_token_probs": probs,
            "latency_s": round(time.perf_counter() - t0, 2),
        }
        rows.append(row)
        mark = "ok " if row["right"] else "NO "
        shown = row["votes"] if args.samples > 1 else probs
        print(f"  {mark} {case.id:<17} {chosen:<14} {row['latency_s']:>5.1f}s {shown}", flush=True)
    right = sum(r["right"] for r in rows)
    wall = time.perf_counter() - started
    print(f"{right}/{len(rows)} routed right; {wall / len(rows):.1f} s per case")
    if args.out is not None:
        summary = {
            "right": right,
            "cases": len(rows),
            "config": vars(args) | {"out": str(args.out), "cases": str(args.cases)},
        }
        args.out.write_text(json.dumps({**summary, "rows": rows}, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
