"""How long shelfhand takes over text with one long run in it (a word, a number row, a line of
dots), in each tree given: the inputs that made a regex quadratic, each in a child process
with ``PYTHONPATH=<tree>/src``, at sizes the old code still finishes (seconds to a minute),
and at twice the size to show how the time grows (4 × when quadratic, 2 × when linear).

    python bench/hostile_text.py --trees <before worktree> .

Each cell is the wall time of the call alone (the imports before it are not counted); a
cell over ``--limit`` seconds is cut and shown as ``> limit``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

CASES = {
    "redact_text: a word of N characters and api_key=": (
        "from shelfhand.core.secrets import redact_text",
        "redact_text('E' * N + ' api_key=sk-live-1')",
        10_000,
    ),
    "misses_amount: an answer of N characters of numbers": (
        "from shelfhand.agent.answer_topic import misses_amount\n"
        "row = ','.join(f'{i / 7:.4f}' for i in range(N // 7))",
        "misses_amount('How long is the warranty?', row)",
        11_000,
    ),
    "extractive answer: a passage of N characters of numbers": (
        "from shelfhand.agent.extractive import extractive_answer\n"
        "from shelfhand.core.messages import Citation\n"
        "row = ','.join(f'{i / 7:.4f}' for i in range(N // 7))\n"
        "ps = [Citation(index=1, source='v.csv', title='price list', text='Price list: ' + row)]\n"
        # (warm-up: jieba's dictionary; another question, as the answer is cached)
        "extractive_answer('保修多久？', [Citation(index=1, source='w', text='保修 24 个月。')])",
        "extractive_answer('What is the price?', ps)",
        11_000,
    ),
    "chunking: a line of N dots, then a letter": (
        "from shelfhand.knowledge.ingest.chunking import chunk_document\n"
        "from shelfhand.knowledge.types import Document, Section\n"
        "doc = Document(doc_id='d', source='d.md', title='Dots', doc_type='markdown',"
        " sections=(Section(section_path=('Dots',), text='.' * N + 'x'),), content_hash='h')",
        "chunk_document(doc)",
        20_000,
    ),
    "tokenize_query: a run of N Chinese characters jieba does not know": (
        "from shelfhand.knowledge.analysis import tokenize_query\ntokenize_query('热身')",
        "tokenize_query('中' * N)",
        16_000,
    ),
    "extractive answer: a question of N rare characters jieba cuts one by one": (
        "import random\n"
        "from shelfhand.agent.extractive import extractive_answer\n"
        "from shelfhand.core.messages import Citation\n"
        "random.seed(1)\n"
        "rare = lambda n: ''.join(chr(random.randint(0x3400, 0x4DB5)) for _ in range(n))\n"
        "ps = [Citation(index=i, source='h.md', title='手册', section=f'手册 > 第{i}节',"
        " text=rare(600)) for i in range(1, 6)]\n"
        "extractive_answer('保修多久？', [Citation(index=1, source='w', text='保修 24 个月。')])",
        "extractive_answer(rare(N) + '怎么办？', ps)",
        3_000,
    ),
    "grounding check: an answer and a passage of N digits with no unit": (
        "from shelfhand.agent.grounding_check import check_grounding\n"
        "from shelfhand.core.messages import Citation\n"
        "ps = [Citation(index=1, source='h.md',"
        " text='享有婚假 3 天。' + '1' * N + '。女员工生育享受 158 天产假。')]",
        "check_grounding('产假是 3 天，' + '1' * N + '。', ps, question='产假多少天？')",
        5_000,
    ),
    "misses_amount: an answer of a hyphenated run of N characters": (
        "from shelfhand.agent.answer_topic import misses_amount",
        "misses_amount('How much does it cost?', 'a-' * (N // 2))",
        10_000,
    ),
    "agent run: a tool returns N characters (the answer check on)": (
        "import asyncio, resource\n"
        "from shelfhand import Agent, Toolkit, UserContext, tool\n"
        "from shelfhand.agent.answer_check import AGENT_SCAFFOLDS, AnswerCheck\n"
        "from shelfhand.testing import ScriptedModel, text, tool_call\n"
        "line = '1,2,3 token=abc ' + 'E' * 1000 + ' '\n"
        "big = line * (N // len(line))\n"
        "dump = tool(lambda day: big, name='dump', description='The log.', read_only=True)\n"
        "agent = Agent(model=ScriptedModel([tool_call('dump', {'day': '1'}), text('Done.')]),"
        " toolkit=Toolkit([dump]), answer_check=AnswerCheck(scaffolds=AGENT_SCAFFOLDS))",
        "asyncio.run(agent.run('what happened?', context=UserContext(tenant_id='t', user_id='u')))",
        25_000_000,
    ),
}


def timed(tree: Path, setup: str, call: str, n: int, limit: float) -> float | None:
    code = textwrap.dedent(
        f"""
        import time
        N = {n}
        {setup.replace(chr(10), chr(10) + "        ")}
        t = time.perf_counter()
        {call}
        print(time.perf_counter() - t)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(tree.resolve() / "src")}
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=limit
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode:
        raise SystemExit(done.stderr)
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(".")])
    parser.add_argument("--limit", type=float, default=300.0, help="seconds a cell may take")
    parser.add_argument("--only", default="", help="the inputs whose name holds this")
    args = parser.parse_args()
    print("| input | N | " + " | ".join(str(t) for t in args.trees) + " |")
    print("|---|---:|" + "---:|" * len(args.trees))
    for name, (setup, call, n) in CASES.items():
        if args.only not in name:
            continue
        for size in (n, 2 * n):
            cells = []
            for tree in args.trees:
                took = timed(tree, setup, call, size, args.limit)
                cells.append(f"> {args.limit:g} s" if took is None else f"{took:.4f} s")
            print(f"| {name} | {size:,} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
