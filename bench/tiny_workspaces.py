"""Searching a new user's first few documents: CMRC 2018 passages in groups of SIZE, each
group in a workspace of its own, keyword-only (as right after an upload, embeddings still
pending), each passage's questions searched at the app's default ``min_relevance``. Prints how
many questions got no hit and how many found their passage in the top 5.

In a workspace of one passage every word's document frequency is 1, so the relevance of a
hit rests on how much of the question's words it holds: a question word no chunk holds (a
name jieba glued to the next character) counts against it.

    python bench/tiny_workspaces.py --beir ../shared/data/cmrc2018 --size 1 --groups 40
    PYTHONPATH=<tree>/src python bench/tiny_workspaces.py ...   # another checkout
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path

from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge.types import Document, Section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beir", type=Path, required=True, help="the CMRC 2018 folder")
    parser.add_argument("--size", type=int, default=1, help="passages a workspace")
    parser.add_argument("--groups", type=int, default=40, help="workspaces")
    parser.add_argument("--show", action="store_true", help="print each question with no hit")
    args = parser.parse_args()

    passages = [json.loads(line) for line in (args.beir / "corpus.jsonl").open(encoding="utf-8")]
    passages.sort(key=lambda p: int(p["_id"].split("_")[1]))
    questions: dict[str, list[str]] = {}
    for line in (args.beir / "queries.jsonl").open(encoding="utf-8"):
        query = json.loads(line)
        questions.setdefault(query["_id"].rsplit("_QUERY", 1)[0], []).append(query["text"])

    asked = no_hit = found = 0
    for g in range(args.groups):
        group = passages[g * args.size : (g + 1) * args.size]
        app = App(settings=Settings.load(Path(tempfile.mkdtemp()), env={}))
        kb = app.open_knowledge()  # (the app's defaults: min_relevance 0.25)
        kb.ingest_documents(
            Document(
                doc_id=p["_id"],
                source=p["_id"],
                title=p.get("title", ""),
                doc_type="markdown",
                sections=(Section(text=p["text"]),),
                content_hash=hashlib.sha256(p["text"].encode()).hexdigest(),
            )
            for p in group
        )
        for p in group:
            for question in questions.get(p["_id"], []):
                asked += 1
                hits = kb.search_result(question, k=5, mode="keyword").hits
                no_hit += not hits
                if args.show and not hits:
                    print(f"no hit: {question} ({p['_id']})")
                found += any(h.chunk.doc_id == p["_id"] for h in hits)
        kb.close()
        app.close()
    print(
        json.dumps(
            {
                "size": args.size,
                "workspaces": args.groups,
                "questions": asked,
                "no_hit": no_hit,
                "passage_in_top5": found,
            }
        )
    )


if __name__ == "__main__":
    main()
