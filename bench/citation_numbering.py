"""What numbering passages in a run costs: ``retrieve``'s eight new passages numbered in the
run's ledger, and (where the tree has it) an MCP server's eight passages numbered in the run
with the ``[n]`` opening each in its text. Each passage holds 600 Chinese characters, as a
retrieved chunk does. Prints the minimum µs per call of five blocks. Compare two trees with
``PYTHONPATH``:

    python bench/citation_numbering.py
    PYTHONPATH=/tmp/before/src python bench/citation_numbering.py
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from shelfhand.core import citations as numbering
from shelfhand.core.citations import CitationLedger
from shelfhand.core.messages import Citation

PASSAGES = 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--number", type=int, default=2000, help="calls per block")
    a = ap.parse_args()
    local = [
        Citation(index=0, source=f"s{i}.md", chunk_id=f"s{i}.md::0", text="文本" * 300)
        for i in range(PASSAGES)
    ]

    def best(fn: Callable[[], object]) -> float:
        number: int = a.number
        return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6

    print(f"ledger, {PASSAGES} new passages: {best(lambda: CitationLedger().number(local)):.1f} us")
    if not hasattr(numbering, "number_here"):
        print("an MCP server's passages: not numbered in this tree")
        return
    sent = [
        Citation(
            index=i,
            source=f"MCP server d: s{i}.md",
            chunk_id=f"MCP server d: s{i}.md::0",
            text="文本" * 300,
        )
        for i in range(1, PASSAGES + 1)
    ]
    content = "\n\n".join(f"[{i}] t (s{i}.md)\n" + "文本" * 300 for i in range(1, PASSAGES + 1))

    def server_result() -> None:
        numbers, _ = numbering.number_here(sent, CitationLedger())
        numbering.renumber_passages(content, numbers)

    print(f"an MCP server's {PASSAGES} passages and their lines: {best(server_result):.1f} us")


if __name__ == "__main__":
    main()
