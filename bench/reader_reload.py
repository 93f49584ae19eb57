"""A reading process's hybrid search with the keyword index reloaded once per search (the
default) against once per look (the keyword side and the exact-identifier step each), in
one process, interleaved round by round.

A reading process is one that opens a workspace another process writes (the ingest CLI, a
worker): its keyword index reloads tantivy's files before searching so that it sees the
writer's commits.

    python bench/reader_reload.py                  # the bundled sample corpus
    python bench/reader_reload.py --rounds 9 --searches 500
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge import sample_corpus
from shelfhand.knowledge.stack import open_embedded_store
from shelfhand.knowledge.stores.tantivy import TantivyKeywordIndex
from shelfhand.knowledge.stores.workspace_lock import WorkspaceLock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--searches", type=int, default=300, help="per way and round")
    ap.add_argument("--query", default="E-203 退货政策", help="an identifier and words")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        lock = WorkspaceLock(ws, "ingest").acquire()  # the writing process
        writer = open_embedded_store(ws, None)
        writer.ingestor.ingest([sample_corpus()])
        reader = App(Settings(workspace=ws, embedder="hashing")).open_knowledge()
        index = reader._stack.keyword
        assert isinstance(index, TantivyKeywordIndex) and index.access != "write"
        ways = {"once per search": index._reload, "every look": index._reload_now}
        times: dict[str, list[float]] = {name: [] for name in ways}
        per_search: dict[str, float] = {}
        for _ in range(a.rounds):
            for name, reload in ways.items():
                index._reload = reload  # type: ignore[method-assign]
                before = index.reloads
                t0 = time.perf_counter()
                for _ in range(a.searches):
                    reader.search(a.query, k=5, mode="hybrid")
                times[name].append((time.perf_counter() - t0) / a.searches * 1e6)
                per_search[name] = (index.reloads - before) / a.searches
        base = statistics.median(times["every look"])
        for name, values in times.items():
            m = statistics.median(values)
            print(
                f"{name:16s} {m:7.0f} µs per hybrid search ({m / base:.2f} ×), "
                f"{per_search[name]:.1f} reloads per search"
            )
        reader.close()
        writer.close()
        lock.release()


if __name__ == "__main__":
    main()
