"""The extractive answer over a manual of entries, each a bilingual heading, what the code
means and the steps to take (the layout of the bundled troubleshooting manual): the entry the
question names is quoted from its heading, in the question's language, with its steps when
the question asks what to do, and never into the next entry."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shelfhand.agent.extractive import extractive_answer
from shelfhand.agent.grounding_check import split_sentences
from shelfhand.core.messages import Citation

MANUAL = Citation(
    index=1,
    source="manual.pdf",
    text=(
        "Codes starting with E-1 concern cooling.\n"
        "以 E-1 开头的代码与散热有关。\n"
        "E-105 Fan failure / 风扇故障\n"
        "The cooling fan does not spin or spins too slowly. The projector shuts down after "
        "60 seconds.\n"
        "1. Switch the projector off and unplug the power cord.\n"
        "2. Check that nothing blocks the air vents.\n"
        "3. Plug in again after 5 minutes. If E-105 returns, the fan needs replacing.\n"
        "风扇故障：散热风扇不转或转速过低，投影仪会在 60 秒后自动关机。请关机并拔下电源；"
        "检查进风口和出风口是否被遮挡；5 分钟后重新开机。\n"
        "E-203 Lamp overheating / 灯泡过热\n"
        "The lamp temperature is above the safe limit.\n"
        "Still need help? / 仍需帮助？\n"
        "Call 400-800-1234."
    ),
)


def _quoted(question: str) -> list[str]:
    found = extractive_answer(question, [MANUAL])
    assert found is not None
    return [sentence for sentence, _ in found.sentences]


def test_what_a_code_means_is_quoted_from_its_heading() -> None:
    # the heading, "E-105 Fan failure / 风扇故障", read as Chinese, sent the answer to the
    # English sentence scoring next: "If E-105 returns, the fan needs replacing." with the
    # sentence before it, and not what E-105 means
    assert _quoted("What does error E-105 mean?") == [
        "E-105 Fan failure / 风扇故障",
        "The cooling fan does not spin or spins too slowly.",
        "The projector shuts down after 60 seconds.",
    ]


@pytest.mark.parametrize(
    ("question", "steps"),
    [
        (
            "How do I fix error E-105?",
            [
                "Switch the projector off and unplug the power cord.",
                "Check that nothing blocks the air vents.",
                "Plug in again after 5 minutes.",
                "If E-105 returns, the fan needs replacing.",
            ],
        ),
        ("显示 E-105 怎么办？", ["请关机并拔下电源；", "5 分钟后重新开机。"]),
    ],
)
def test_a_question_asking_what_to_do_gets_the_steps(question: str, steps: list[str]) -> None:
    quoted = _quoted(question)
    assert quoted[0] == "E-105 Fan failure / 风扇故障"
    assert all(step in quoted for step in steps), quoted
    # the other language's sentences, the entry before and the next entry stay out
    assert not any("E-1 " in s or "E-203" in s or "灯泡" in s for s in quoted), quoted
    chinese = question.startswith("显示")
    assert all(("风扇" in s or "。" in s or "；" in s) == chinese for s in quoted[1:]), quoted


def test_an_entry_ends_at_the_next_heading() -> None:
    quoted = _quoted("What should I do about E-203?")
    assert quoted == [
        "E-203 Lamp overheating / 灯泡过热",
        "The lamp temperature is above the safe limit.",
    ]


def test_a_bilingual_heading_split_at_its_question_mark_is_one_sentence() -> None:
    assert split_sentences("Still need help? / 仍需帮助？\nCall us.") == [
        "Still need help? / 仍需帮助？",
        "Call us.",
    ]


FIRST = Citation(
    index=1,
    source="manual.pdf",
    doc_id="manual.pdf",
    start=0,
    end=60,
    text="E-105 Fan failure / 风扇故障\n请关机并拔下电源；5 分钟后重新开机。",
)
NEXT = replace(
    FIRST,
    index=2,
    start=40,
    end=120,
    text="5 分钟后重新开机。如果仍然显示 E-105，需要更换风扇。\nE-203 Lamp overheating / 灯泡过热",
)


def test_the_steps_go_on_into_the_next_chunk_of_the_entry() -> None:
    # the E-105 entry's last step was in the next chunk, found by the same search, and left out
    quoted = extractive_answer("显示 E-105 怎么办？", [FIRST, NEXT])
    assert quoted is not None
    lines = [sentence for sentence, _ in quoted.sentences]
    assert lines[-1] == "如果仍然显示 E-105，需要更换风扇。", lines
    assert lines.count("5 分钟后重新开机。") == 1 and not any("E-203" in s for s in lines)
    # another section's chunk (the next FAQ entry) is not the entry going on
    other = extractive_answer("显示 E-105 怎么办？", [FIRST, replace(NEXT, section="Other")])
    assert other is not None and all(n == 1 for _, n in other.sentences), other.sentences


@pytest.mark.parametrize(
    "question", ["E-105 和 E-203 有什么区别？", "What is the difference between E-105 and E-203?"]
)
def test_a_question_comparing_two_codes_gets_both_entries(question: str) -> None:
    # the entry ranking first was quoted alone: E-203's, for a question about two codes
    quoted = _quoted(question)
    assert (
        "E-105 Fan failure / 风扇故障" in quoted and "E-203 Lamp overheating / 灯泡过热" in quoted
    )
    assert quoted.index("E-105 Fan failure / 风扇故障") < quoted.index(
        "E-203 Lamp overheating / 灯泡过热"
    )


def test_a_question_naming_two_codes_without_comparing_them_gets_the_best_entry() -> None:
    quoted = _quoted("What does E-105 mean? I also saw E-203 once.")
    assert quoted[0] in ("E-105 Fan failure / 风扇故障", "E-203 Lamp overheating / 灯泡过热")
    assert not (
        "E-105 Fan failure / 风扇故障" in quoted and "E-203 Lamp overheating / 灯泡过热" in quoted
    )
