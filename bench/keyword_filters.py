"""What the permission filter costs tantivy at 1M chunks, before and after (issue 14, point 7).

    python bench/keyword_filters.py --index /tmp/shelfhand-kw-1m   # builds it once (~2 min)

The index is ``TantivyKeywordIndex`` bulk-loaded with the synthetic Zipf corpus of
``bench/retrieval_latency.py`` (one tenant; documents tagged public, public, ``sales``,
``hr`` in turn). Queries: 300 sets of 3-6 words drawn by Zipf frequency, skipping the 100 most
frequent. For each caller, CPU time per search of 30 hits (the candidates a hybrid search of
k=10 asks for), interleaved query by query:

* bare: the unfiltered term union (tantivy's block-max WAND), the floor;
* before: the filtered query as it was (tags as a term-set query: a bitset of every chunk of
  the caller's tags, built per query);
* filtered: today's filtered query (``oversample_limit=0``: what runs when too few of the
  ranked hits pass the check);
* now: :meth:`TantivyKeywordIndex.search` (unfiltered ranking of ``k / share * 1.5 + 10``
  hits, then tantivy's check of those against the filter clauses; the filtered query when
  too few pass). Each result is checked equal to the filtered query's.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import tantivy

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, default=Path("/tmp/shelfhand-kw-1m"))
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import retrieval_latency as rl

    from shelfhand.knowledge.stores.keyword_plan import PUBLIC_TAG
    from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex
    from shelfhand.knowledge.types import Scope

    if not args.index.exists():
        corpus = rl.make_corpus(args.chunks, seed=0, n_queries=10)
        kw, built, seconds = rl.build_keyword(args.index, corpus, args.chunks, 3600)
        logging.info("built %d chunks in %.0f s", built, seconds)
        kw.close()
        del corpus
    # "write" as in the serving process (no reload per search); neither instance writes
    now = TantivyKeywordIndex(args.index, access="write")
    filtered = TantivyKeywordIndex(args.index, access="write", oversample_limit=0)
    schema = now._schema
    searcher = now._index.searcher()
    occ, query = tantivy.Occur, tantivy.Query
    queries = rl.word_queries(args.queries)

    def text(tokens: list[str]) -> Any:
        return query.boolean_query(now._should("body", tokens) + now._should("head", tokens))

    def before(tokens: list[str], roles: list[str]) -> Any:
        clauses = [
            (occ.Must, text(tokens)),
            (occ.Must, query.const_score_query(query.term_query(schema, "tenant", "default"), 0)),
        ]
        if "admin" not in roles:
            tags = query.term_set_query(schema, "tags", sorted({*roles, PUBLIC_TAG}))
            clauses.append((occ.Must, query.const_score_query(tags, 0.0)))
        return searcher.search(query.boolean_query(clauses), 30, count=False)

    ways: dict[str, Any] = {
        "bare (no filter)": lambda t, r: searcher.search(text(t), 30, count=False),
        "before (term-set filter)": before,
        "filtered (fallback)": lambda t, r: filtered.search(t, 30, scope=Scope(roles=r)),
        "now (rank, then check)": lambda t, r: now.search(t, 30, scope=Scope(roles=r)),
    }
    print(f"\nload {os.getloadavg()[0]:.1f}, {now.num_docs():,} chunks, CPU ms per search of 30\n")
    print("| caller (reads) | " + " | ".join(f"{w} p50 / p95" for w in ways) + " |")
    print("|---" * (len(ways) + 1) + "|")
    for caller, roles, share in (
        ("admin", ["admin"], "100%"),
        ("anonymous", [], "50%"),
        ("sales", ["sales"], "75%"),
        ("hr", ["hr"], "75%"),
    ):
        cpu: dict[str, list[float]] = {w: [] for w in ways}
        now.paths.clear()
        for tokens in queries:
            for name, fn in ways.items():
                c = time.process_time()
                fn(tokens, roles)
                cpu[name].append((time.process_time() - c) * 1000)
            a = now.search(tokens, 30, scope=Scope(roles=roles))
            assert [r for r, _ in a] == [
                r for r, _ in filtered.search(tokens, 30, scope=Scope(roles=roles))
            ]
        pcts = [rl.percentiles(v) for v in cpu.values()]
        cells = [f"{p['p50_ms']:.2f} / {p['p95_ms']:.2f}" for p in pcts]
        print(f"| {caller} ({share}) | " + " | ".join(cells) + f" | paths {dict(now.paths)}")
    print(f"\nload after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
