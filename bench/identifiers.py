"""Exact identifiers on the sample corpus, with and without the exact-first step (issue 13 pt 1).

Ingests the bundled projector samples into a temporary workspace with the packaged embedders
(MiniLM for English, USE for Chinese; ``--keyword-only`` skips them) and, for each mode and
``exact_boost`` off/on, counts the identifier cases of ``samples/projector-cases.jsonl`` whose
rank-1 passage comes from a relevant document and contains the case's ``contains`` text; it also
prints the top-3 sections for ``保修期多久`` (the 保修期限 section should come first)::

    python bench/identifiers.py                # about 30 s on the 2-core machine
    python bench/identifiers.py --keyword-only

Goal (issue 13): 100 % of identifier lookups at rank 1 in every mode.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from shelfhand.knowledge.embeddings.local import default_router
from shelfhand.knowledge.retrieval.hybrid import SearchMode
from shelfhand.knowledge.stack import open_embedded_store

SAMPLES = Path(__file__).resolve().parents[1] / "src" / "shelfhand" / "samples"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keyword-only", action="store_true", help="no embedders")
    args = parser.parse_args()
    lines = (SAMPLES / "projector-cases.jsonl").read_text(encoding="utf-8").splitlines()
    cases = [c for c in map(json.loads, lines) if c["kind"] == "identifier"]
    modes: tuple[SearchMode, ...] = (
        ("keyword",) if args.keyword_only else ("hybrid", "keyword", "vector")
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        kb = open_embedded_store(Path(tmp), None if args.keyword_only else default_router())
        try:
            kb.ingestor.ingest([SAMPLES / "projector"])
            print(f"ingest {time.perf_counter() - t0:.1f} s")
            for exact in (False, True):
                options = replace(kb.retriever.options, exact_boost=exact)
                for mode in modes:
                    missed = []
                    for case in cases:
                        hits = kb.retriever.search(case["query"], k=5, mode=mode, options=options)
                        top = hits[0].chunk if hits else None
                        if (
                            top is None
                            or case["contains"].casefold() not in top.text.casefold()
                            or top.source.rsplit("/", 1)[-1] not in case["relevant"]
                        ):
                            missed.append(case["id"])
                    warranty = kb.retriever.search("保修期多久", k=3, mode=mode, options=options)
                    print(
                        f"exact_boost={exact!s:5} {mode:7} identifier rank-1 "
                        f"{len(cases) - len(missed)}/{len(cases)}"
                        + (f" (missed {', '.join(missed)})" if missed else "")
                        + f"; 保修期多久 → {[h.chunk.section_path[-1] for h in warranty]}"
                    )
        finally:
            kb.close()


if __name__ == "__main__":
    main()
