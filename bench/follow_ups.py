"""Follow-ups without a model: a message pointing back ("它的光源能用多久？", "and its price?")
searched with the earlier question it follows (:func:`~shelfhand.agent.rewrite.carried`),
against the message as typed.

Cases over the bundled sample corpus: the six follow-ups of ``bench/query_rewrite.py``, six
more that name the product only in the earlier question, and six that change the topic
(they point back at nothing, so they must be searched as typed). For each: whether the
relevant file is the first hit and among the top ``k``, as typed and as carried. No chat
model; keyword search by default, or a workspace's own search (``--workspace``, after
``shelfhand ingest --samples``)::

    python bench/follow_ups.py [-k 3] [--workspace WS] [--json out.json]

With ``--answers`` (and ``--workspace``), each follow-up is asked of the configured chat model
through the app's chat agent (the service's and ``shelfhand chat``'s: up-front retrieval,
the answer check), after the earlier exchange, and the answer is checked for the case's
facts (``FACTS``); run it with ``PYTHONPATH=<tree>/src`` for each tree to compare.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from query_rewrite import FOLLOW_UPS

from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message
from shelfhand.knowledge.base import KnowledgeBase, sample_corpus

MORE: list[tuple[str, str, str, str]] = [
    # (earlier question, earlier answer, follow-up, relevant file): the subject only before
    ("Lumen X1 Pro 多少钱？", "5,999 元 [1]。", "它的光源能用多久？", "product-specs.docx"),
    ("Lumen Mini M2 多少钱？", "1,999 元 [1]。", "它的光源能用多久？", "product-specs.docx"),
    ("Lumen Mini M2 多少钱？", "1,999 元 [1]。", "它有多重？", "product-specs.docx"),
    ("Lumen X1 多少钱？", "3,999 元 [1]。", "那 Mini M2 呢？", "product-specs.docx"),
    ("How much is the Lumen Mini M2?", "1,999 CNY [1].", "How heavy is it?", "product-specs.docx"),
    ("What does E-203 mean?", "The lamp is overheating [1].", "Can I keep using it?", "troubleshooting-manual.pdf"),
]  # fmt: skip
NEW_TOPIC: list[tuple[str, str, str, str]] = [
    # a new question after another topic: searched as typed
    ("Lumen X1 多少钱？", "3,999 元 [1]。", "拆封后还能退货吗？", "returns-policy.md"),
    ("Lumen X1 多少钱？", "3,999 元 [1]。", "E-203 是什么故障？", "troubleshooting-manual.pdf"),
    ("How much is the Lumen X1?", "3,999 CNY [1].", "Can I return an opened projector?", "faq.html"),
    ("What does E-203 mean?", "The lamp is overheating [1].", "How do I clean the lens?", "faq.html"),
    # an "it" of the question's own
    ("How much is the Lumen X1?", "3,999 CNY [1].", "Is it possible to return an opened projector?", "faq.html"),
    ("What does E-203 mean?", "The lamp is overheating [1].", "Does it void the warranty if I open the case?", "faq.html"),
]  # fmt: skip
CALLER = UserContext(tenant_id="default", user_id="bench")
FACTS: dict[tuple[str, str], str] = {
    # (earlier question, follow-up): what a right answer states (a regular expression)
    ("What is the brightness of the Lumen X1?", "and its price?"): "3,?999",
    ("What does error E-203 mean?", "how do I fix it?"): "dust|filter|vent|cool|wall",
    ("Can I return a projector after opening it?", "is there a fee?"): "10 ?%|restocking",
    ("Lumen X1 的亮度是多少？", "那价格呢？"): "3,?999",
    ("E-203 是什么故障？", "怎么解决？"): "防尘|灰尘|散热|墙|dust|filter",
    ("拆封后还能退货吗？", "要手续费吗？"): "10 ?%|翻新费",
    ("Lumen X1 Pro 多少钱？", "它的光源能用多久？"): "20,?000",
    ("Lumen Mini M2 多少钱？", "它的光源能用多久？"): "30,?000",
    ("Lumen Mini M2 多少钱？", "它有多重？"): "0\\.9",
    ("Lumen X1 多少钱？", "那 Mini M2 呢？"): "1,?999",
    ("How much is the Lumen Mini M2?", "How heavy is it?"): "0\\.9",
    ("What does E-203 mean?", "Can I keep using it?"): "stop|not|cool|停",
}


def _hits(kb: KnowledgeBase, query: str, k: int) -> list[str]:
    return [Path(h.chunk.source).name for h in kb.search(query, k=k, user=CALLER)]


def run(kb: KnowledgeBase, k: int) -> dict[str, Any]:
    from shelfhand.agent.rewrite import carried  # (not in trees before it: --answers runs there)

    rows: list[dict[str, Any]] = []
    for kind, cases in (("follow-up", FOLLOW_UPS + MORE), ("new topic", NEW_TOPIC)):
        for question, answer, follow_up, relevant in cases:
            history = [Message.user(question), Message.assistant(answer)]
            carry = carried(follow_up, history)
            query = follow_up if carry is None else carry.query
            typed, as_carried = _hits(kb, follow_up, k), _hits(kb, query, k)
            row = {
                "kind": kind,
                "follow_up": follow_up,
                "query": query,
                "carried": carry is not None,
                "first_as_typed": typed[:1] == [relevant],
                "first_carried": as_carried[:1] == [relevant],
                "top_k_as_typed": relevant in typed,
                "top_k_carried": relevant in as_carried,
            }
            print(json.dumps(row, ensure_ascii=False), flush=True)
            rows.append(row)
    summary: dict[str, Any] = {"k": k}
    for kind in ("follow-up", "new topic"):
        mine = [r for r in rows if r["kind"] == kind]
        summary[kind] = {
            "n": len(mine),
            "carried": sum(r["carried"] for r in mine),
            **{
                key: sum(r[key] for r in mine)
                for key in ("first_as_typed", "first_carried", "top_k_as_typed", "top_k_carried")
            },
        }
    return {**summary, "rows": rows}


async def answers(workspace: Path) -> dict[str, Any]:
    """Each follow-up of :data:`FACTS` asked of the configured chat model, after its earlier
    exchange; whether the answer states the case's facts."""
    import re
    import time

    from shelfhand.app import App
    from shelfhand.core.settings import Settings

    app = App(settings=Settings.load(workspace))
    model = app.chat_model()
    if model is None:
        raise SystemExit("--answers needs a chat model (SHELFHAND_MODEL)")
    kb = app.open_knowledge()
    rows: list[dict[str, Any]] = []
    try:
        for question, answer, follow_up, _ in FOLLOW_UPS + MORE:
            agent = app.chat_agent(model, kb)
            history = [Message.user(question), Message.assistant(answer)]
            started = time.perf_counter()
            result = await agent.run(follow_up, history=history, context=CALLER)
            fact = FACTS[(question, follow_up)]
            row = {
                "follow_up": follow_up,
                "after": question,
                "searched": next(
                    (c.arguments for m in result.messages for c in m.tool_calls), None
                ),
                "right": re.search(fact, result.output, re.IGNORECASE) is not None,
                "fallback_reason": result.fallback_reason,
                "s": round(time.perf_counter() - started, 1),
                "output": result.output,
            }
            print(json.dumps(row, ensure_ascii=False), flush=True)
            rows.append(row)
    finally:
        kb.close()
        close = getattr(model, "aclose", None)
        if close is not None:
            await close()
    return {"n": len(rows), "right": sum(r["right"] for r in rows), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-k", type=int, default=3)
    parser.add_argument("--workspace", type=Path, help="search this workspace (hybrid)")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--answers", action="store_true", help="ask the chat model (needs --workspace)"
    )
    args = parser.parse_args()
    if args.answers:
        if args.workspace is None:
            parser.error("--answers needs --workspace")
        import asyncio

        report = asyncio.run(answers(args.workspace))
        print(json.dumps({k: v for k, v in report.items() if k != "rows"}, ensure_ascii=False))
        if args.json:
            args.json.write_text(json.dumps(report, ensure_ascii=False, indent=2), "utf-8")
        return
    if args.workspace is not None:
        from shelfhand.app import App
        from shelfhand.core.settings import Settings

        kb = App(settings=Settings.load(args.workspace)).open_knowledge()
    else:
        kb = KnowledgeBase(Path(tempfile.mkdtemp()) / "ws", None, mode="keyword")
        kb.ingest([sample_corpus()])
    try:
        report = run(kb, args.k)
    finally:
        kb.close()
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
