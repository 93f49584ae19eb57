"""What one grounding check costs on sample questions whose passages hold the spec sheet's
price table (the row check's case) and ones that do not.

Three questions on the bundled samples, their top-5 passages from a keyword search, one
model-like answer each (the first states another row's price); 7 rounds of 200 checks of
the three, the minimum and the median per check. Run it in two trees one after the other,
alternating, to compare them::

    PYTHONPATH=/tmp/before/src python bench/grounding_rows.py before
    PYTHONPATH=src python bench/grounding_rows.py after
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from shelfhand.agent.grounding_check import check_grounding
from shelfhand.knowledge import KnowledgeBase, sample_corpus
from shelfhand.knowledge.evidence.citations import to_citations
from shelfhand.testing import hashing_router

CASES = [
    (
        "What is the list price of the Lumen X1 Pro?",
        "The list price of the Lumen X1 Pro is 3,999 CNY [4]. It has 3,600 ANSI lumens.",
    ),
    ("投影仪保修多久？", "整机保修期为 24 个月 [1]。灯泡保修 6 个月或 1000 小时。"),
    ("E-203 是什么故障？", "E-203 是灯泡过热 [1]，请等待 30 分钟。"),
]


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "this tree"
    with KnowledgeBase(Path(tempfile.mkdtemp()), hashing_router(), mode="keyword") as kb:
        kb.ingest([sample_corpus()])
        cases = [(q, a, list(to_citations(kb.search(q, k=5)))) for q, a in CASES]
    rounds = []
    for _ in range(7):
        started = time.perf_counter()
        for _ in range(200):
            for question, answer, citations in cases:
                check_grounding(answer, citations, question=question)
        rounds.append((time.perf_counter() - started) / (200 * len(cases)) * 1e6)
    rounds.sort()
    print(f"{label}: {rounds[0]:.1f} us per check (min of 7 rounds), median {rounds[3]:.1f}")


if __name__ == "__main__":
    main()
