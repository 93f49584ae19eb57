"""The answer check over recorded answers: a chat model's answers asked once, with the check
off, then checked by each tree's check in turn. A slow local model's answers are the same
run after run at temperature 0, so a change to the check is measured in seconds, not in the
ten minutes the model takes, and on the very same answers.

Record (the configured chat model, through the app's chat agent: the ``ask`` path, with
``answer_check = off``)::

    python bench/answer_replay.py record --workspace WS --out runs.jsonl            # the bundled answer cases
    python bench/answer_replay.py record --workspace WS --beir DATA/cmrc2018 --every 75 --out cmrc.jsonl

The bundled cases need ``shelfhand ingest --samples -w WS``; a BEIR set's passages must be
ingested as files named by their id (``DEV_0.md``: ``# title`` then the text), so a cited
passage's source names the passage the question was written from.

Replay (each tree in its own process, ``PYTHONPATH=<tree>/src``; its app's check, lexical)::

    python bench/answer_replay.py replay runs.jsonl --workspace WS --trees /tmp/before .

For each tree: the bundled cases' measures (``shelfhand eval-answers``: right, grounded,
replaced) when the records carry facts, and for every record the check's verdict: kept,
flagged (a sentence unsupported) or replaced (and why); then the records whose verdict
differs between the trees.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def _beir_cases(data: Path, every: int, offset: int, limit: int | None) -> list[dict[str, Any]]:
    queries = [json.loads(line) for line in (data / "queries.jsonl").open(encoding="utf-8")]
    gold: dict[str, str] = {}
    for line in (data / "qrels" / "test.tsv").open(encoding="utf-8"):
        query, doc, *_ = line.rstrip("\n").split("\t")
        gold.setdefault(query, doc)
    picked = queries[offset::every][:limit]
    return [
        {"id": q["_id"], "question": q["text"], "sources": [f"{gold.get(q['_id'], '')}.md"]}
        for q in picked
    ]


def record(args: argparse.Namespace) -> None:
    os.environ["SHELFHAND_ANSWER_CHECK"] = "off"  # the model's own answers, as it wrote them
    from shelfhand.app import App
    from shelfhand.core.context import UserContext
    from shelfhand.evals.answers import load_answer_cases, sample_answer_cases

    if args.beir:
        cases = _beir_cases(Path(args.beir), args.every, args.offset, args.limit)
    else:
        loaded = load_answer_cases(Path(args.cases) if args.cases else sample_answer_cases())
        cases = [
            {
                "id": c.id,
                "question": c.question,
                "facts": list(c.facts),
                "sources": list(c.sources),
                "not_found": c.not_found,
                "lang": c.lang,
            }
            for c in loaded[: args.limit]
        ]
    app = App.from_settings(workspace=Path(args.workspace))
    model = app.chat_model()
    if model is None:
        sys.exit("no chat model is configured: set SHELFHAND_MODEL (and OPENAI_BASE_URL)")
    kb = app.open_knowledge()
    user = UserContext(tenant_id="default", user_id="eval", roles=["user"])

    async def ask_all() -> None:
        with open(args.out, "w", encoding="utf-8") as out:
            for case in cases:
                result = await app.chat_agent(model, kb).run(case["question"], context=user)
                kept = {
                    "output": result.output,
                    "stop_reason": result.stop_reason,
                    "citations": [c.to_dict() for c in result.citations],
                    "messages": [m.to_dict() for m in result.messages],
                    "usage": result.usage.to_dict(),
                }
                out.write(json.dumps({**case, "result": kept}, ensure_ascii=False) + "\n")
                out.flush()
                print(case["id"], "->", result.output[:100].replace("\n", " "), flush=True)

    try:
        app.warm_up(kb)
        asyncio.run(ask_all())
    finally:
        kb.close()


def check(args: argparse.Namespace) -> None:
    """Run in each tree's process: the tree's check over the records, as JSON lines."""
    from shelfhand.app import App
    from shelfhand.core.messages import Citation, Message
    from shelfhand.core.results import RunResult, Usage
    from shelfhand.evals.answers import AnswerCase, AnswerOutcome, judge, summarise_answers

    os.environ["SHELFHAND_ANSWER_CHECK"] = "fallback"
    os.environ.pop("SHELFHAND_ANSWER_JUDGE", None)
    app = App.from_settings(workspace=Path(args.workspace))
    answer_check = app.answer_check()
    assert answer_check is not None
    verdicts, outcomes = [], []
    for line in Path(args.runs).read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        kept = rec["result"]
        result = RunResult(
            output=kept["output"],
            messages=tuple(Message.from_dict(m) for m in kept["messages"]),
            citations=tuple(Citation.from_dict(c) for c in kept["citations"]),
            stop_reason=kept["stop_reason"],
            usage=Usage(**kept["usage"]),
        )
        checked = answer_check.apply(result, rec["question"])
        grounding = checked.grounding
        if checked.fallback_reason:
            verdict = f"replaced ({checked.fallback_reason})"
        elif grounding is not None and not grounding.grounded and grounding.sentences:
            verdict = "flagged"
        else:
            verdict = "kept"
        verdicts.append({"id": rec["id"], "verdict": verdict, "output": checked.output})
        if "facts" in rec:
            case = AnswerCase(
                id=rec["id"],
                question=rec["question"],
                facts=tuple(rec["facts"]),
                sources=tuple(rec["sources"]),
                not_found=rec["not_found"],
                lang=rec.get("lang", ""),
            )
            outcome = AnswerOutcome(
                id=case.id, question=case.question, not_found_case=case.not_found
            )
            judge(case, checked, outcome)
            outcomes.append(outcome)
    summary = summarise_answers(outcomes) if outcomes else {}
    print(json.dumps({"verdicts": verdicts, "summary": summary}, ensure_ascii=False))


def replay(args: argparse.Namespace) -> None:
    runs = {}
    for tree in args.trees:
        env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve() / "src"))
        done = subprocess.run(
            [sys.executable, __file__, "_check", args.runs, "--workspace", args.workspace],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        runs[tree] = json.loads(done.stdout.strip().splitlines()[-1])
    records = [json.loads(line) for line in Path(args.runs).read_text("utf-8").splitlines()]
    questions = {rec["id"]: rec["question"] for rec in records}
    for tree, run in runs.items():
        counts: dict[str, int] = {}
        for v in run["verdicts"]:
            kind = v["verdict"].split(" ")[0]
            counts[kind] = counts.get(kind, 0) + 1
        s = run["summary"]
        facts = (
            f"; right {s['right_count']}/{s['answerable']}, not found {s['not_found_count']}, "
            f"grounded {s['grounded']}, unflagged {s['unflagged']}"
            if s
            else ""
        )
        print(f"{tree}: {len(run['verdicts'])} answers, {counts}{facts}")
    first, *others = args.trees
    for other in others:
        before = {v["id"]: v for v in runs[first]["verdicts"]}
        print(f"\nchanged, {first} -> {other}:")
        for v in runs[other]["verdicts"]:
            was = before[v["id"]]
            if was["verdict"] != v["verdict"]:
                print(f"- {v['id']} {questions[v['id']]}: {was['verdict']} -> {v['verdict']}")
                if args.show:
                    print("    " + v["output"][:300].replace("\n", "\n    "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--workspace", required=True)
    rec.add_argument("--out", required=True)
    rec.add_argument("--cases", help="JSONL answer cases (default: the bundled ones)")
    rec.add_argument("--beir", help="a BEIR folder: its questions instead of answer cases")
    rec.add_argument("--every", type=int, default=75)
    rec.add_argument("--offset", type=int, default=0)
    rec.add_argument("--limit", type=int)
    rep = sub.add_parser("replay")
    rep.add_argument("runs")
    rep.add_argument("--workspace", required=True)
    rep.add_argument("--trees", nargs="+", default=["."])
    rep.add_argument("--show", action="store_true", help="print each changed answer")
    one = sub.add_parser("_check")
    one.add_argument("runs")
    one.add_argument("--workspace", required=True)
    args = parser.parse_args()
    {"record": record, "replay": replay, "_check": check}[args.command](args)


if __name__ == "__main__":
    main()
