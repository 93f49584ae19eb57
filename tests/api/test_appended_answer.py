"""What the append-only streams (OpenAI-compatible chat and Responses, A2A) send of a turn's
answer: one reading of the turn's events for all three (``AppendedAnswer``)."""

from __future__ import annotations

from typing import Any

from shelfhand.service.completions import AppendedAnswer

CITATION = {"index": 1, "source": "t1/warranty.md", "text": "整机保修 12 个月。", "title": "保修"}


def sent(*events: dict[str, Any]) -> str:
    answer = AppendedAnswer()
    pieces = []
    for event in events:
        pieces.append(answer.add(event))
        # read between pieces as the A2A stream does: what was appended so far
        assert answer.started == bool("".join(pieces))
        assert answer.sent == "".join(pieces)
    return answer.sent


def final(output: str, citations: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"type": "final", "output": output, "citations": list(citations)}


def test_the_deltas_then_the_sources() -> None:
    text = sent(
        {"type": "text_delta", "text": "保修 12 个月 [1]。"},
        final("保修 12 个月 [1]。", (CITATION,)),
    )
    assert text.startswith("保修 12 个月 [1]。\n\n来源：\n[1] ")


def test_a_withdrawn_guess_is_said_so_and_the_answer_follows() -> None:
    text = sent(
        {"type": "text_delta", "text": "99 年。"},
        {"type": "text_withdrawn", "text": "99 年。", "reason": "guessed", "notice": "Withdrawn"},
        {"type": "text_delta", "text": "12 个月。"},
        final("12 个月。"),
    )
    assert text == "99 年。\n\n---\nWithdrawn…\n\n12 个月。"


def test_a_replaced_answer_follows_the_deltas_under_the_notice() -> None:
    replaced = {
        "type": "answer_replaced",
        "reason": "ungrounded",
        "output": "x",
        "notice": "Replaced",
    }
    text = sent({"type": "text_delta", "text": "36 个月。"}, replaced, final("12 个月。"))
    assert text == "36 个月。\n\n---\nReplaced:\n\n12 个月。"


def test_nothing_streamed_sends_the_answer_itself() -> None:
    assert sent(final("12 个月。")) == "12 个月。"
    replaced = {"type": "answer_replaced", "reason": "model_error", "output": "x", "notice": "R"}
    assert sent(replaced, final("12 个月。")) == "12 个月。"
