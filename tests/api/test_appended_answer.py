"""What the append-only streams (OpenAI-compatible chat and Responses, A2A) send of a turn's
answer: one reading of the turn's events for all three (``AppendedAnswer``)."""

from __future__ import annotations

from typing import Any

from shelfhand.service.completions import AppendedAnswer, whole_answer

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


def test_text_taken_back_is_told_for_a_stream_that_can_replace_what_it_sent() -> None:
    """An A2A artifact can be replaced: it ends with the answer alone (``whole_answer``) when
    the turn took back text it streamed, its notice beside it."""
    events = (
        [
            {"type": "text_delta", "text": "99 年。"},
            {"type": "text_withdrawn", "text": "99 年。", "reason": "guessed", "notice": "W"},
            {"type": "text_delta", "text": "12 个月 [1]。"},
        ],
        [
            {"type": "text_delta", "text": "36 个月。"},
            {"type": "answer_replaced", "reason": "ungrounded", "output": "x", "notice": "R"},
        ],
    )
    for notice, before in zip(("W", "R"), events, strict=True):
        answer = AppendedAnswer()
        for event in [*before, final("12 个月 [1]。", (CITATION,))]:
            answer.add(event)
        assert (answer.rewritten, answer.notice) == (True, notice)
        assert whole_answer(final("12 个月 [1]。", (CITATION,))).startswith(
            "12 个月 [1]。\n\n来源："
        )
    plain = AppendedAnswer()
    for event in ({"type": "text_delta", "text": "12 个月。"}, final("12 个月。")):
        plain.add(event)
    assert (plain.rewritten, plain.notice) == (False, "")
    nothing_shown = AppendedAnswer()  # replaced before anything streamed: nothing taken back
    for event in ({"type": "answer_replaced", "output": "x", "notice": "R"}, final("12 个月。")):
        nothing_shown.add(event)
    assert not nothing_shown.rewritten


def test_nothing_streamed_sends_the_answer_itself() -> None:
    assert sent(final("12 个月。")) == "12 个月。"
    replaced = {"type": "answer_replaced", "reason": "model_error", "output": "x", "notice": "R"}
    assert sent(replaced, final("12 个月。")) == "12 个月。"


def checked(*sentences: tuple[bool, int | None, str | None]) -> dict[str, Any]:
    """A ``final`` event's grounding: (supported, passage, tool) per sentence."""
    return {
        "grounded": all(s[0] for s in sentences),
        "sentences": [{"supported": s, "passage": p, "tool": t} for s, p, t in sentences],
    }


OTHER = {"index": 2, "source": "t1/faq.md", "text": "Keep your invoice.", "title": "FAQ"}


def test_an_answer_resting_on_a_tool_result_lists_no_passage_as_its_source() -> None:
    output = "Your order SO-1001 has shipped."
    event = {**final(output, (CITATION, OTHER)), "grounding": checked((True, None, "order"))}
    assert sent(event) == output


def test_an_answer_citing_nothing_lists_the_passages_that_support_it() -> None:
    output = "整机保修 12 个月。"
    event = {**final(output, (CITATION, OTHER)), "grounding": checked((True, 1, None))}
    text = sent(event)
    assert "[1] 保修" in text and "[2]" not in text
    unchecked = sent(final(output, (CITATION, OTHER)))  # answer check off: every passage
    assert "[1] 保修" in unchecked and "[2] FAQ" in unchecked


def test_an_answer_the_check_replaced_by_something_else_than_passages_lists_none() -> None:
    """ "The documents do not cover this", what the tools returned, the tools that did not
    answer: no passage is their source, so none is listed under them."""
    for output in (
        "The documents do not cover this: no passage in the knowledge base matches it.",
        "The tools called for this did not answer:\n- order_status: failed: timed out after 3 s",
    ):
        event = {**final(output, (CITATION, OTHER)), "fallback_reason": "ungrounded"}
        assert sent(event) == output
    # the passages' own sentences in its place cite them: those are listed
    extract = "From the documents:\n- 整机保修 12 个月。 [1]"
    event = {
        **final(extract, (CITATION, OTHER)),
        "fallback_reason": "ungrounded",
        "extractive": True,
    }
    assert sent(event) == f"{extract}\n\nSources:\n[1] 保修 (t1/warranty.md)"
    # an answer nobody checked still lists every passage the turn found
    assert sent(final("Keep it.", (CITATION, OTHER))).count("\n[") == 2
