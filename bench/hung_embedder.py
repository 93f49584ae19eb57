"""How long ``shelfhand ingest`` waits on an embeddings endpoint that accepts connections and
never answers, before it stores the chunks as pending (keyword-searchable).

A socket on 127.0.0.1 accepts every connection and says nothing; ``shelfhand ingest`` of one
small Markdown file runs against it (``SHELFHAND_EMBEDDER=openai:m``, the embedder's default
30 s timeout) in each tree given, and the wall time and the connections it opened are printed.

    python bench/hung_embedder.py --trees <before worktree> .
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def hung_endpoint() -> tuple[int, list[socket.socket]]:
    """A listening port that accepts and never answers; the accepted connections."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            accepted.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    return listener.getsockname()[1], accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(".")])
    args = parser.parse_args()
    port, accepted = hung_endpoint()
    for tree in args.trees:
        with tempfile.TemporaryDirectory() as tmp:
            doc = Path(tmp) / "leave.md"
            doc.write_text("# 年假政策\n\n员工每年有十天年假。\n", encoding="utf-8")
            env = {
                k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))
            }
            env.update(
                PYTHONPATH=str(tree.resolve() / "src"),
                SHELFHAND_EMBEDDER="openai:m",
                OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
                OPENAI_API_KEY="not-a-key",
            )
            before = len(accepted)
            started = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-m", "shelfhand.cli", "ingest", str(doc), "-w", f"{tmp}/ws"],
                capture_output=True,
                text=True,
                env=env,
                timeout=600,
                check=False,
            )
            seconds = time.perf_counter() - started
            pending = "pending" in out.stdout + out.stderr
            print(
                f"{tree}: {seconds:.1f} s, {len(accepted) - before} connections, exit "
                f"{out.returncode}, chunks left pending: {pending}"
            )


if __name__ == "__main__":
    main()
