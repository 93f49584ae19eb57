"""Tool calling and cited answers of a real (local) model, per tool mode (issue 9, docs/design.md P6).

Runs the bundled 20 tool-call cases (``shelfhand eval-tools``' suite) in each tool mode —
``plain``, ``native``, ``constrained`` — and ``ask`` (the chat agent over the bundled samples)
on 6 sample questions, English and Chinese, checking that each answer cites at least one
passage from a document that holds the answer. Needs an OpenAI-compatible server, e.g.::

    python scripts/local_model.py serve --port 8080 &          # Qwen2.5-Coder-0.5B, 1 thread
    python bench/tool_calls.py --base-url http://127.0.0.1:8080/v1 --model qwen2.5-coder-0.5b

The tools carry the reference scenario's routing examples (``shelfhand.tools.demo.TOOL_EXAMPLES``,
``RETRIEVE_EXAMPLES``); ``--no-examples`` measures them without. ``--cases`` runs another case
file, e.g. ``bench/tool_cases_heldout.jsonl`` (12 requests written apart from the examples
and the bundled cases, to check the examples for overfitting).

Resumable: each mode's results are written to ``--out`` as soon as the mode finishes, and
modes already there are skipped (``--force`` reruns them). Bounded: ``--modes``, ``--limit``
(first N cases), ``--ask-limit`` (first N questions, 0 skips ``ask``).

Goals (issue 9): >= 16/20 right tool and arguments in the best mode; 0 raw-JSON answers, 0
empty answers, 0 context overflows in every mode.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.errors import ModelError
from shelfhand.core.settings import Settings
from shelfhand.evals.tool_eval import load_tool_cases, run_tool_eval, sample_tool_cases
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.providers.openai_chat import OpenAIChatModel

MODES = ("plain", "native", "constrained")
QUESTIONS = [  # (question, documents that answer it), from samples/projector-eval.jsonl
    ("E-203 是什么故障？", ["troubleshooting-manual.pdf"]),
    ("投影仪的保修期是多久？", ["warranty-policy-v1.md", "warranty-policy-v2.md"]),
    ("拆封后还能退货吗？", ["returns-policy.md"]),
    ("Is there a restocking fee for opened items?", ["returns-policy.md"]),
    ("What does error E-310 mean?", ["troubleshooting-manual.pdf"]),
    ("How do I clean the lens?", ["faq.html"]),
]


def model_for(args: argparse.Namespace, mode: str) -> OpenAIChatModel:
    return OpenAIChatModel(
        args.model,
        base_url=args.base_url,
        tool_mode=mode,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        context_tokens=args.context_tokens,
        timeout=args.timeout,
        first_token_timeout=args.first_token_timeout,
    )


async def ask_questions(
    model: OpenAIChatModel, kb: KnowledgeBase, workspace: Path, limit: int
) -> dict[str, Any]:
    """``shelfhand ask`` for each question: the app's chat agent, tools and knowledge."""
    app = App(settings=Settings.load(workspace, env={}), model=model)
    agent = app.chat_agent(model, kb)
    agent.max_iters = 4  # bounded like the tool cases: a looping model costs minutes per step
    user = UserContext(tenant_id="default", user_id="bench", roles=["user"])
    rows: list[dict[str, Any]] = []
    for question, relevant in QUESTIONS[:limit]:
        started = time.perf_counter()
        row: dict[str, Any] = {"question": question, "relevant": relevant}
        try:
            result = await agent.run(question, context=user)
        except ModelError as exc:
            row.update(error=f"{type(exc).__name__}: {exc}", cited=[], cited_right=False)
        else:
            cited = sorted({Path(c.source).name for c in result.citations})
            row.update(
                answer=result.output,
                cited=cited,
                cited_right=any(name in relevant for name in cited),
                empty=not result.output.strip(),
                steps=result.iterations,
            )
        row["latency_ms"] = (time.perf_counter() - started) * 1000.0
        mark = "ok " if row["cited_right"] else "NO "
        print(f"  ask {mark} {question} -> {row['cited']}", flush=True)
        rows.append(row)
    app.close()
    return {
        "questions": len(rows),
        "cited_right": sum(r["cited_right"] for r in rows),
        "empty_answers": sum(bool(r.get("empty")) for r in rows),
        "errors": sum("error" in r for r in rows),
        "mean_latency_ms": sum(r["latency_ms"] for r in rows) / len(rows) if rows else 0.0,
        "rows": rows,
    }


async def run_mode(args: argparse.Namespace, mode: str, kb: KnowledgeBase) -> dict[str, Any]:
    all_cases = load_tool_cases(args.cases or sample_tool_cases())
    cases = all_cases[args.start :: max(1, args.stride)][: args.limit]
    model = model_for(args, mode)
    workspace = Path(tempfile.mkdtemp(prefix=f"tool-bench-{mode}-"))

    def progress(r: Any) -> None:
        called = r.calls[0]["name"] if r.calls else "no tool"
        flags = [f for f in ("raw_json", "empty", "overflow") if getattr(r, f)]
        if r.stop_reason not in ("", "final"):
            flags.append(f"fallback:{r.stop_reason}")
        error = f" error: {r.error[:120]}" if r.error else ""
        mark = "ok " if r.arguments_ok else "NO "
        line = f"  {mark} {r.id}: {called} {r.latency_ms / 1000:.1f}s {' '.join(flags)}{error}"
        print(line, flush=True)

    print(f"== {mode}: {len(cases)} tool cases", flush=True)
    t0 = time.perf_counter()
    try:
        report = await run_tool_eval(
            model,
            cases,
            workspace=workspace,
            knowledge=kb,
            max_iters=4,
            on_case=progress,
            examples=not args.no_examples,
        )
        if args.ask_limit > 0:
            print(f"== {mode}: ask on {min(args.ask_limit, len(QUESTIONS))} questions", flush=True)
            report["ask"] = await ask_questions(model, kb, workspace, args.ask_limit)
    finally:
        await model.aclose()
    report["wall_s"] = time.perf_counter() - t0
    report["config"] = {
        k: getattr(args, k)
        for k in (
            "base_url",
            "model",
            "limit",
            "start",
            "stride",
            "ask_limit",
            "temperature",
            "max_tokens",
            "no_examples",
        )
    }
    report["config"]["cases"] = str(args.cases or "bundled 20")
    return report


def print_table(results: dict[str, Any]) -> None:
    head = f"{'mode':<12}{'right':>8}{'routing':>9}{'raw JSON':>10}{'empty':>7}{'overflow':>10}"
    head += f"{'errors':>8}{'steps':>7}{'mean s':>8}{'ask cited':>11}"
    print(head)
    for mode, r in results["modes"].items():
        ask = r.get("ask")
        cited = f"{ask['cited_right']}/{ask['questions']}" if ask else "-"
        print(
            f"{mode:<12}{r['right_calls']:>5}/{r['cases']:<2}{r['routing_accuracy']:>9.0%}"
            f"{r['raw_json_answers']:>10}{r['empty_answers']:>7}{r['context_overflows']:>10}"
            f"{r['errors']:>8}{r['mean_steps']:>7.2f}{r['mean_latency_ms'] / 1000:>8.1f}{cited:>11}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated")
    parser.add_argument("--limit", type=int, default=None, help="first N tool cases")
    parser.add_argument("--stride", type=int, default=1, help="every Nth case (2: 10 of 20)")
    parser.add_argument("--start", type=int, default=0, help="first case index for --stride")
    parser.add_argument("--ask-limit", type=int, default=len(QUESTIONS), help="0: skip ask")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--context-tokens", type=int, default=8192)
    parser.add_argument("--timeout", type=float, default=600.0, help="total per model call")
    parser.add_argument("--first-token-timeout", type=float, default=300.0)
    parser.add_argument("--cases", type=Path, default=None, help="JSONL (default: the 20)")
    parser.add_argument(
        "--no-examples", action="store_true", help="without the demo tools' routing examples"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/tool_calls.json"))
    parser.add_argument("--force", action="store_true", help="rerun modes already in --out")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown mode(s): {', '.join(sorted(unknown))}")

    results: dict[str, Any] = {"modes": {}}
    if args.out.is_file():
        results = json.loads(args.out.read_text(encoding="utf-8"))
    kb_dir = Path(tempfile.mkdtemp(prefix="tool-bench-kb-"))
    kb = KnowledgeBase(kb_dir, None, mode="keyword")  # keyword search: no embedder on the CPU
    kb.ingest([sample_corpus()])
    try:
        for mode in modes:
            if mode in results["modes"] and not args.force:
                print(f"== {mode}: already in {args.out}, skipped (--force reruns)")
                continue
            results["modes"][mode] = asyncio.run(run_mode(args, mode, kb))
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, ensure_ascii=False, indent=1), "utf-8")
    finally:
        kb.close()
    print_table(results)
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
