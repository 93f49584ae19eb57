"""Text that a caller, a tool or a looping model controls goes through shelfhand's regexes: a
tool's error message (redacted before anyone reads it), a model's answer (checked against the
passages), a document's line (split into sentences when it is ingested). Each input below
made one of those regexes quadratic in the length of a run (a word, a number, a row of dots):
minutes to hours of CPU on one call, in the event loop or an ingest worker. Each must now
finish; it runs in a child process, so that a regex that hangs (and holds the GIL) fails the
test at its deadline instead of hanging the suite."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

ROW = "','.join(f'{i / 7:.4f}' for i in range(8000))"  # 60 KB of numbers, no space: a CSV row

CASES = {
    # 10 KB took 2.5 s before; 300 KB: over half an hour
    "a tool error with a long word and a secret": """
        from shelfhand.core.secrets import redact_text
        out = redact_text("E" * 300_000 + " api_key=sk-live-1 and token=" + "t" * 300_000)
        assert out.endswith("api_key=[REDACTED] and token=[REDACTED]"), out[-60:]
    """,
    # 20 KB took 5.4 s before (85 s to ingest 80 KB of dots)
    "a document line of 300,000 dots": """
        from shelfhand.knowledge.ingest.chunking import chunk_document
        from shelfhand.knowledge.types import Document, Section
        text = "." * 300_000 + "x"
        doc = Document(doc_id="d", source="d.md", title="Dots", doc_type="markdown",
                       sections=(Section(section_path=("Dots",), text=text),), content_hash="h")
        assert "".join(c.text for c in chunk_document(doc)).count(".") == 300_000
    """,
    # 11 KB took 38 s before: whether an answer states the price asked for
    "an answer of 60 KB of numbers to a price question": f"""
        from shelfhand.agent.answer_topic import misses_amount
        row = {ROW}
        assert not misses_amount("How much does it cost?", row)  # (a bare number may be one)
        assert misses_amount("How long is the warranty?", row)
        assert not misses_amount("How long is the warranty?", row + " 24 months")
    """,
    # 11 KB took 5.9 s before, 22 KB 25 s: the passage's sentence stating a price
    "a passage of 60 KB of numbers for a price question": f"""
        from shelfhand.agent.extractive import extractive_answer
        from shelfhand.core.messages import Citation
        row = {ROW}
        passage = Citation(index=1, source="v.csv", title="price list", text="Price list: " + row)
        answer = extractive_answer("What is the price?", [passage])
        assert answer is not None and answer.text.endswith("[1]"), answer
    """,
    # 20,000 took 1.9 s before: an answer's names and codes blanked out (a hyphenated run
    # with no digit was tried from each of its letters); 300,000: over seven minutes
    "an answer of a 300,000-character hyphenated run to a price question": """
        from shelfhand.agent.answer_topic import misses_amount, states_nothing_held
        from shelfhand.core.messages import Citation
        run = "a-" * 150_000
        assert misses_amount("How much does it cost?", run)
        assert not misses_amount("How much does it cost?", run + " E-203 costs 499 CNY")
        passage = Citation(index=1, source="p.md", text="The lamp costs 499 CNY.")
        assert states_nothing_held(run + " X1", [passage])
    """,
    # a follow-up's "…呢？" read before the search: 20,000 spaces after 呢 took 2.0 s in the
    # first version, 100,000 fifty seconds (a chat message the service accepts)
    "a follow-up of 呢 and 1,000,000 spaces": """
        from shelfhand.agent.rewrite import asks_the_same, carried, points_back
        from shelfhand.core.messages import Message
        message = "呢" + " " * 1_000_000 + "x"
        assert not points_back(message) and not asks_the_same(message)
        assert carried(message, [Message.user("Lumen X1 多少钱？")]) is None
        assert carried("那 X1 Pro 呢？" + " " * 1_000_000, [Message.user("Lumen X1 多少钱？")])
    """,
    # how many: a run of digits or numerals is tried from its first one only, for so long
    "an answer of 300,000 digits and numerals to a count question": """
        from shelfhand.agent.answer_topic import misses_amount
        question = "鬣齿兽科中有几个属生存到中新世？"
        for run in ("1" * 300_000, "四" * 300_000, "1 " * 150_000, "2001 年" * 50_000):
            assert misses_amount(question, run) is (not run.startswith("1 "))
        assert not misses_amount(question, "四" * 300_000 + "，四个属")
    """,
    # a question of rare characters jieba cuts one by one, read as the pieces the passages
    # hold: 6,000 took 27 s in the first version of that reading; 100,000: hours
    "a question of 100,000 rare characters over passages of such characters": """
        import random
        from shelfhand.agent.extractive import extractive_answer
        from shelfhand.core.messages import Citation
        random.seed(1)
        rare = "".join(chr(random.randint(0x3400, 0x4DB5)) for _ in range(100_000))
        passages = [
            Citation(index=i, source="h.md", title="手册", section=f"手册 > 第{i}节",
                     text=rare[i * 5_000 : i * 5_000 + 600])
            for i in range(1, 6)
        ]
        extractive_answer(rare + "怎么办？", passages)  # (about them or not: it ends)
    """,
    # a number with its unit, read by the grounding check's sentences: 11,000 digits took
    # 15 s in the first version (each digit a start); 300,000: hours
    "an answer and a passage of 300,000 digits with no unit": """
        from shelfhand.agent.grounding_check import check_grounding, measured
        from shelfhand.core.messages import Citation
        run = "1" * 300_000
        assert measured(run) == {} and measured(run + " 天") == {}  # (too long to be one)
        assert measured("婚假 3 天，产假 158 天") == {"3": "天", "158": "天"}
        passage = Citation(index=1, source="d.md", text="享有婚假 3 天。" + run + "。产假 158 天。")
        check_grounding("产假是 3 天，" + run + " 天。", [passage], question="产假多少天？")
    """,
    # 32,000 took 2.4 s before (a query the service accepts); 400,000: over five minutes
    "a run of 400,000 Chinese characters jieba does not know": """
        from shelfhand.knowledge.analysis import tokenize_for_index, tokenize_query
        assert len(tokenize_query("中" * 400_000)) > 300_000
        assert tokenize_for_index("整机保修期") == tokenize_query("整机保修期")
    """,
}


@pytest.mark.parametrize("code", list(CASES.values()), ids=list(CASES))
def test_a_long_run_in_hostile_text_is_read_in_linear_time(code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
