"""What ranking each caller by its own tenant's statistics costs the embedded keyword index.

    python bench/tenant_statistics.py --trees <before worktree> . [--chunks 300000]

Two tantivy indexes are bulk-loaded once (``--dir``), from the synthetic Zipf corpus of
``bench/retrieval_latency.py``: ``one`` holds one tenant, ``three`` the same chunks in three
tenants (by document: ``default`` 70 %, ``acme`` 20 %, ``globex`` 10 %). Queries: 300 sets
of 3-6 words drawn by Zipf frequency, skipping the 100 most frequent (as
``bench/keyword_filters.py``). Each tree searches both indexes in a child process with its
``src`` first on the path, trees alternating over ``--rounds``; CPU time per search of 30 hits
(what a hybrid search of k = 10 asks for), per caller:

* ``warm``: the index unchanged since the last search (the tenant's counts kept);
* ``after a commit``: the searcher reloaded before each search, as after every sync of the
  writing process (the tenant's counts taken anew);
* ``reading``: a reading process's index (``access="read-only"``: ``shelfhand mcp serve`` or
  ``shelfhand chat`` while ``shelfhand serve`` holds the workspace), the writer committing nothing meanwhile. Until 2026-12-07 (late) it reloaded, and
  so counted anew, before every search; since, only when the writer has committed.

With ``--pg-chunks N``, the first N chunks of the same corpus are also stored in a local
PostgreSQL (started in a temporary folder, the same three tenants), one database per tree
written by that tree's own code (their schemas differ), and each tree's ``PgKeywordIndex``
searches its own (``pg``: wall ms per search, the database's time included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CALLERS = [  # (index, tenant, the share of the chunks it reads)
    ("one", "default", "100 %"),
    ("three", "default", "70 %"),
    ("three", "acme", "20 %"),
    ("three", "globex", "10 %"),
]

WAYS = ("warm", "after a commit", "reading")


def _tenant(doc: int) -> str:
    r = doc % 10
    return "default" if r < 7 else "acme" if r < 9 else "globex"


def _build(directory: Path, chunks: int) -> None:
    sys.path.insert(0, str(HERE))
    import retrieval_latency as rl

    corpus = rl.make_corpus(chunks, seed=0, n_queries=10)
    for name, tenant_of in (("one", None), ("three", _tenant)):
        if not (directory / name).exists():
            kw, _, seconds = rl.build_keyword(directory / name, corpus, chunks, 3600, tenant_of)
            kw.close()
            print(f"built {name}: {chunks:,} chunks in {seconds:.0f} s", file=sys.stderr)


def _queries(n: int) -> list[list[str]]:
    sys.path.insert(0, str(HERE))
    import retrieval_latency as rl

    return rl.word_queries(n)


def _build_pg(url: str, chunks: int) -> None:
    """The first ``chunks`` chunks of the corpus in PostgreSQL, tenants by document."""
    sys.path.insert(0, str(HERE))
    import retrieval_latency as rl

    from shelfhand.knowledge.stack import open_pg_store
    from shelfhand.knowledge.stores.pg.store import ImportedDocument

    corpus = rl.make_corpus(chunks, seed=0, n_queries=10)
    kb = open_pg_store(url, None)
    batch = []
    for d in range(chunks // corpus.per_doc):
        doc, parts = rl.document(corpus, d, _tenant(d))
        batch.append(ImportedDocument(doc=doc, chunks=parts, vectors={}, embed_state="pending"))
        if len(batch) == 200:
            kb.store.import_documents(batch)
            batch.clear()
    if batch:
        kb.store.import_documents(batch)
    with kb.store.db.connection() as conn:
        conn.execute("VACUUM ANALYZE")
    kb.close()


def _child_pg(url: str, n_queries: int) -> dict[str, list[float]]:
    from shelfhand.knowledge.stack import open_pg_store
    from shelfhand.knowledge.types import Scope

    queries = _queries(n_queries)
    kb = open_pg_store(url, None)
    out: dict[str, list[float]] = {}
    for tokens in queries[:10]:  # warm-up
        kb.keyword.search(tokens, 30, scope=Scope(tenant_id="default"))
    for tenant in ("default", "acme", "globex"):
        scope = Scope(tenant_id=tenant, roles=["admin"])
        wall = []
        for tokens in queries:
            c = time.perf_counter()
            kb.keyword.search(tokens, 30, scope=scope)
            wall.append((time.perf_counter() - c) * 1000)
        out[f"pg|{tenant}|wall"] = wall
    kb.close()
    return out


def _child(directory: Path, n_queries: int, pg_url: str | None) -> None:
    """In the tree under test: CPU ms per search, per caller and way; one JSON object."""
    from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex
    from shelfhand.knowledge.types import Scope

    queries = _queries(n_queries)
    out: dict[str, list[float]] = _child_pg(pg_url, n_queries) if pg_url else {}
    for name in ("one", "three"):
        index = TantivyKeywordIndex(directory / name, access="write")  # never writes here
        reader = TantivyKeywordIndex(directory / name, access="read-only")
        for tokens in queries[:20]:  # warm-up
            index.search(tokens, 30, scope=Scope(tenant_id="default"))
            reader.search(tokens, 30, scope=Scope(tenant_id="default"))
        for index_name, tenant, _ in CALLERS:
            if index_name != name:
                continue
            scope = Scope(tenant_id=tenant, roles=["admin"])
            for way in WAYS:
                cpu = []
                for tokens in queries:
                    if way == "reading":
                        c = time.process_time()
                        reader.search(tokens, 30, scope=scope)
                        cpu.append((time.process_time() - c) * 1000)
                        continue
                    if way != "warm":
                        reloaded = getattr(index, "_reloaded", None)
                        if reloaded is not None:
                            reloaded()
                        else:  # (the tree before: no tenants' counts to drop)
                            index._index.reload()
                    c = time.process_time()
                    index.search(tokens, 30, scope=scope)
                    cpu.append((time.process_time() - c) * 1000)
                out[f"{name}|{tenant}|{way}"] = cpu
        index.close()
        reader.close()
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/shelfhand-tenant-stats"))
    ap.add_argument("--chunks", type=int, default=300_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pg-chunks", type=int, default=0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pg-url", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--build-pg", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_pg:
        _build_pg(args.pg_url, args.pg_chunks)
        return
    if args.child:
        _child(args.dir, args.queries, args.pg_url)
        return
    _build(args.dir, args.chunks)
    server = None
    args.pg_urls = {}
    if args.pg_chunks:
        from shelfhand.dev.services import start_postgres

        server = start_postgres(Path(tempfile.mkdtemp(prefix="shelfhand-bench-pg-")) / "data")
        for i, tree in enumerate(args.trees):
            url = args.pg_urls[tree] = server.create_database(f"bench{i}")
            cmd = [sys.executable, __file__, "--build-pg", "--pg-url", url]
            cmd += ["--pg-chunks", str(args.pg_chunks)]
            subprocess.run(cmd, env=_env(tree), check=True)
    try:
        cpu = _rounds(args)
    finally:
        if server is not None:
            server.stop()
    _report(args, cpu)


def _rounds(args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    cpu: dict[str, dict[str, list[float]]] = {t: {} for t in args.trees}
    print(f"load {os.getloadavg()[0]:.1f} at the start", file=sys.stderr)
    for r in range(args.rounds):
        for tree in args.trees if r % 2 == 0 else reversed(args.trees):
            cmd = [sys.executable, __file__, "--child", "--dir", str(args.dir)]
            cmd += ["--queries", str(args.queries)]
            if tree in args.pg_urls:
                cmd += ["--pg-url", args.pg_urls[tree]]
            done = subprocess.run(cmd, env=_env(tree), capture_output=True, text=True, check=True)
            for key, values in json.loads(done.stdout.splitlines()[-1]).items():
                cpu[tree].setdefault(key, []).extend(values)
    return cpu


def _env(tree: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(tree).resolve() / "src")}


def _report(args: argparse.Namespace, cpu: dict[str, dict[str, list[float]]]) -> None:
    print(
        f"\nload {os.getloadavg()[0]:.1f} at the end; CPU ms per search of 30 (pg: wall ms), p50 / p95\n"
    )
    print("| index | caller's tenant (reads) | way | " + " | ".join(args.trees) + " |")
    print("|---|---|---|" + "---:|" * len(args.trees))
    pg = [("pg", t, s, "wall") for _, t, s in CALLERS[1:]] if args.pg_urls else []
    cells_of = [(n, t, s, w) for n, t, s in CALLERS for w in WAYS] + pg
    for name, tenant, share, way in cells_of:
        cells = []
        for tree in args.trees:
            values = sorted(cpu[tree][f"{name}|{tenant}|{way}"])
            p95 = values[int(0.95 * (len(values) - 1))]
            cells.append(f"{statistics.median(values):.3f} / {p95:.3f}")
        print(f"| {name} | {tenant} ({share}) | {way} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
