"""Query rewrite with a real chat model on follow-up questions (issue 13, point 4).

Six follow-ups over the bundled sample corpus (three English, three Chinese), each after one
earlier exchange; for each, keyword search with the follow-up as typed and with the model's
rewrite (:class:`~shelfhand.agent.rewrite.QueryRewriter`), reporting the rewrites, whether a
relevant source is in the top ``k`` either way, fallbacks and latency. The chat model comes
from the usual settings, e.g. a local llama.cpp server::

    SHELFHAND_MODEL=qwen2.5-coder-0.5b OPENAI_BASE_URL=http://127.0.0.1:8091/v1 \\
    OPENAI_API_KEY=none python bench/query_rewrite.py [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from shelfhand.agent.rewrite import QueryRewriter
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus
from shelfhand.providers.openai_chat import OpenAIChatModel

FOLLOW_UPS: list[tuple[str, str, str, str]] = [
    # (earlier question, earlier answer, follow-up, relevant file)
    (
        "What is the brightness of the Lumen X1?",
        "The Lumen X1 has 3000 lumens [1].",
        "and its price?",
        "product-specs.docx",
    ),
    (
        "What does error E-203 mean?",
        "The lamp is overheating [1].",
        "how do I fix it?",
        "troubleshooting-manual.pdf",
    ),
    (
        "Can I return a projector after opening it?",
        "Yes, within 7 days [1].",
        "is there a fee?",
        "returns-policy.md",
    ),
    ("Lumen X1 的亮度是多少？", "3000 流明 [1]。", "那价格呢？", "product-specs.docx"),
    ("E-203 是什么故障？", "灯泡过热 [1]。", "怎么解决？", "troubleshooting-manual.pdf"),
    ("拆封后还能退货吗？", "7 天内可以 [1]。", "要手续费吗？", "returns-policy.md"),
]


def found(kb: KnowledgeBase, query: str, relevant: str, k: int) -> bool:
    return any(Path(h.chunk.source).name == relevant for h in kb.search(query, k=k))


async def run(k: int, timeout: float) -> dict[str, Any]:
    settings = Settings.load(tempfile.mkdtemp())
    model = OpenAIChatModel.from_env(settings, max_tokens=40, temperature=0.0)
    rewriter = QueryRewriter(model, timeout=timeout)
    kb = KnowledgeBase(Path(tempfile.mkdtemp()) / "ws", None, mode="keyword")
    kb.ingest([sample_corpus()])
    rows: list[dict[str, Any]] = []
    try:
        for question, answer, follow_up, relevant in FOLLOW_UPS:
            history = [Message.user(question), Message.assistant(answer)]
            started = time.perf_counter()
            result = await rewriter.rewrite(follow_up, history)
            ms = (time.perf_counter() - started) * 1000
            row = {
                "follow_up": follow_up,
                "query": result.query,
                "reason": result.reason,
                "ms": round(ms),
                "found_as_typed": found(kb, follow_up, relevant, k),
                "found_rewritten": found(kb, result.query, relevant, k),
            }
            print(json.dumps(row, ensure_ascii=False), flush=True)
            rows.append(row)
    finally:
        kb.close()
        await model.aclose()
    return {
        "model": model.name,
        "k": k,
        "n": len(rows),
        "recall_as_typed": sum(r["found_as_typed"] for r in rows),
        "recall_rewritten": sum(r["found_rewritten"] for r in rows),
        "fallbacks": sum(r["reason"] is not None for r in rows),
        "p50_ms": statistics.median(r["ms"] for r in rows),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = asyncio.run(run(args.k, args.timeout))
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
