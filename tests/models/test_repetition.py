"""A reply caught in a loop is stopped, and one round of the loop kept (``.repetition``).
Qwen2.5-Coder-0.5B, asked for twenty tips, wrote one item over and over with a new number
until ``max_tokens``. The rules on text, then the adapter against a real loopback server: a
streamed loop ends the request (the client hangs up), a reply cut by
``max_tokens`` inside a loop is cut after its first round."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shelfhand import Agent, Toolkit, tool
from shelfhand.agent.streaming import REPETITION_NOTICE
from shelfhand.core.events import Final, TextDelta, TextWithdrawn
from shelfhand.core.messages import Message, TextBlock, ToolCallBlock
from shelfhand.models import StreamDone, StreamText
from shelfhand.models.base import FINISH_REPETITION, ModelResponse
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.providers.repetition import Repetition, loop_cut
from support.chat_server import HOLD, ChatServer, Reply, chunk, completion

ITEM = (
    "{n}. **Check for Air**: After applying the solution, check for air. This can be done "
    "by using a damp cloth or a soft cloth.\n\n"
)
HEAD = (
    "Tips:\n\n4. **Check for Moisture**: After applying the solution, check for moisture. "
    "This can be done by using a damp cloth or a soft cloth.\n\n"
)
LOOP = HEAD + "".join(ITEM.format(n=n) for n in range(5, 9))
FIRST_ROUND = HEAD + ITEM.format(n=5).rstrip()
LOOKUP = {
    "type": "function",
    "function": {"name": "lookup", "description": "Look it up.", "parameters": {}},
}
CODE_LINE = 'GPIO.output(LED_PIN, GPIO.HIGH)  # "on"\n'


def kept(text: str) -> str | None:
    cut = loop_cut(text)
    return None if cut is None else text[:cut]


def test_a_list_item_written_again_with_new_numbers_is_kept_once_and_whole() -> None:
    # the loop's first round begins mid-item (item 4's second sentence is item 5's too):
    # the cut still ends at item 5's end, not after its first sentence
    assert kept(LOOP) == FIRST_ROUND
    assert kept(LOOP + "9. **Check") == FIRST_ROUND  # an unfinished unit is not read


def test_a_chinese_sentence_and_an_english_one_repeated_in_one_line() -> None:
    sentence = "保修期为两年，从购买之日起计算。"
    assert kept("答：\n" + sentence * 3) == "答：\n" + sentence
    english = "The warranty lasts two years from the date of purchase. "
    assert kept(english * 4) == english.rstrip()


def test_a_lead_in_written_over_and_over_on_one_line_is_a_loop() -> None:
    """Qwen2.5-Coder-0.5B answered a CMRC 2018 question with "The answer to the user is: "
    until ``max_tokens``: 1,940 characters with no sentence's end in them."""
    lead = "The answer to the user is: "
    assert kept(lead * 60) == lead.rstrip()
    raw = json.dumps({"tool": "none", "answer": lead * 60})[:-10]  # a constrained reply
    assert kept(raw) == '{"tool": "none", "answer": "' + lead.rstrip()
    assert kept("答案是：" * 20) is not None


def test_a_line_said_again_citing_another_passage_is_a_loop() -> None:
    """Qwen2.5-Coder-0.5B, imitating an earlier extractive answer of its session, wrote "- E-105
    Fan failure / 风扇故障 [3]", then [4], [5] and on to ``max_tokens`` (512 tokens, a minute of
    one thread), each line another citation."""
    lines = "".join(f"- E-105 Fan failure / 风扇故障 [{n}]\n" for n in range(3, 40))
    assert kept("摘自文档：\n" + lines) == "摘自文档：\n- E-105 Fan failure / 风扇故障 [3]"
    # the same words citing other passages once each, two times: not yet a loop
    assert kept("- The lamp is overheating [1].\n- The lamp is overheating [2].\n") is None


def test_a_constrained_reply_is_read_with_its_escaped_newlines() -> None:
    raw = json.dumps({"tool": "none", "answer": LOOP}, ensure_ascii=False)[:-12]
    cut = loop_cut(raw)
    assert cut is not None
    assert raw[:cut].endswith("soft cloth.") and raw[:cut].count("Check for Air") == 1


@pytest.mark.parametrize(
    "text",
    [
        "| X1 | 2,999 |\n| X1 | 3,999 |\n| X1 | 4,999 |\n",  # rows that differ by a number
        "Step 1: open the box.\nStep 2: open the box.\nStep 3: open the box.\n",
        "OK.\nOK.\nOK.\nOK.\n",  # short: repeated on purpose
        "是的。是的。是的。是的。",
        "First, unplug it. Then wipe the lens. Then wipe the lens. Let it dry.",
        LOOP[: LOOP.index("7.")],  # two rounds only
        # code repeats lines on purpose: read as it streams, up to the third line
        f"The script:\n\n```python\n{CODE_LINE * 3}",
        # the read window (the reply's last 4,000 characters) starts inside the code
        "```\n" + "x = 1\n" * 700 + CODE_LINE * 3,
        # a constrained reply: its code's line ends are JSON escapes
        json.dumps({"answer": f"~~~\n{CODE_LINE * 3}"})[:-2],
        # colons end units too: labels that differ, and a time, are not a loop
        "Model: Lumen X1. Model: Lumen X1 Pro. Model: Lumen Mini M2. Time: 10:30:00",
        "注意：保修两年。注意：保修三年。注意：保修四年。",
    ],
    ids=[
        "rows",
        "steps",
        "ok",
        "shi",
        "sentence",
        "two-rounds",
        "code",
        "window",
        "json",
        "labels",
        "notes",
    ],
)
def test_text_that_is_not_a_loop_is_left_whole(text: str) -> None:
    assert loop_cut(text) is None


def test_a_loop_after_a_block_of_code_is_still_one() -> None:
    text = f"```\n{CODE_LINE * 3}```\n\n" + "Run it again and wait for the light. " * 3
    cut = loop_cut(text)
    assert cut is not None and text[:cut].endswith("```\n\nRun it again and wait for the light.")


def streamed(text: str, size: int = 5) -> tuple[int | None, int]:
    """Feed ``text`` to a :class:`Repetition` ``size`` characters at a time, as the adapter
    does: where it says to cut, and how much had streamed when it said so."""
    watch, parts = Repetition(), []
    for i in range(0, len(text), size):
        parts.append(text[i : i + size])
        if watch.looping(parts[-1], parts):
            return watch.cut, i + len(parts[-1])
    return None, len(text)


SENTENCES = [
    "Clean the lens with a soft cloth.",
    "Check the fan filter every month!",
    "Use alcohol wipes sparingly; they dry fast.",
    "请先关闭电源。",
    "保修期为两年，请保留发票。",
    "OK.",
]


@st.composite
def replies(draw: st.DrawFn) -> str:
    """Replies of a few hundred to a few thousand characters: sentences, some repeated, in
    lines and list items, some blocks of code, some as a constrained reply's JSON."""
    pieces = []
    for n in range(draw(st.integers(2, 40))):
        if draw(st.integers(0, 9)) == 0:
            pieces.append(f"```\n{CODE_LINE * 3}```\n")
            continue
        block = " ".join(draw(st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=3)))
        for _ in range(draw(st.sampled_from([1, 1, 1, 1, 2, 3, 4]))):
            marker = draw(st.sampled_from(["", "- ", f"{n}. "]))
            pieces.append(marker + block + draw(st.sampled_from(["\n", " ", "\n\n"])))
    text = "".join(pieces)
    if draw(st.booleans()):
        text = '{"answer": "' + text.replace("\n", "\\n")
    return text


@settings(max_examples=300, deadline=None)
@given(replies(), st.integers(1, 9))
def test_a_streamed_reply_is_cut_where_its_whole_text_would_be(text: str, size: int) -> None:
    """Read line by line as it streams (each complete line once), a reply is cut where
    reading all it had streamed then, at once, cuts it."""
    cut, at = streamed(text, size)
    assert cut == loop_cut(text[:at])


def test_a_loop_in_one_long_paragraph_is_cut_after_its_first_round() -> None:
    # no line ends: the paragraph's whole sentences are read once, as it streams
    prose = " ".join(f"Step {n} of the cleaning takes {n} minutes." for n in range(1, 60))
    loop = " Wipe the lens again with the same soft cloth." * 4
    cut, _ = streamed(prose + loop)
    assert cut == len(prose) + len(" Wipe the lens again with the same soft cloth.")
    assert loop_cut(prose + loop) == cut


def test_a_loop_after_a_long_reply_and_code_opened_long_before() -> None:
    lines = "".join(f"{n}. Line {n} of the report says nothing new.\n" for n in range(1, 400))
    cut, _ = streamed(lines + LOOP)
    assert cut is not None and (lines + LOOP)[:cut] == lines + FIRST_ROUND
    # inside a block of code opened 18,000 characters before, the same lines are not read
    code = "```\n" + lines + CODE_LINE * 5
    assert streamed(code) == (None, len(code))


@pytest.fixture
async def model(chat_server: ChatServer) -> AsyncIterator[OpenAIChatModel]:
    chat_model = OpenAIChatModel("m", base_url=chat_server.url, api_key="k", max_retries=0)
    yield chat_model
    await chat_model.aclose()


@pytest.mark.anyio
async def test_a_streamed_loop_ends_the_request_and_keeps_one_round(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    pieces = [LOOP[i : i + 7] for i in range(0, len(LOOP), 7)]
    # the server holds the stream open for 10 s after these: a client that reads on waits
    # for it, so ending within 8 s shows the adapter stopped and hung up (the server counts
    # a disconnect only if it got to the hold before the client left, which load decides)
    chat_server.add(Reply(sse=[*(chunk({"content": p}) for p in pieces), HOLD]))

    with anyio.fail_after(8):
        items = [item async for item in model.stream([Message.user("twenty tips")])]

    done = items[-1]
    assert isinstance(done, StreamDone)
    assert done.response.message.text == FIRST_ROUND
    assert done.response.finish_reason == "repetition"
    shown = "".join(i.text for i in items if isinstance(i, StreamText))
    assert shown.count("Check for Air") == 3  # streamed up to the third round


@pytest.mark.anyio
async def test_a_reply_cut_by_max_tokens_inside_a_loop_keeps_one_round(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    cut_off = completion(LOOP + "9. **Check for")
    cut_off["choices"][0]["finish_reason"] = "length"
    chat_server.add(Reply(body=cut_off), Reply(body=completion(LOOP)))

    response = await model.request([Message.user("twenty tips")])
    assert (response.message.text, response.finish_reason) == (FIRST_ROUND, "repetition")

    # a reply the model ended itself is the model's: left whole
    response = await model.request([Message.user("twenty tips")])
    assert (response.message.text, response.finish_reason) == (LOOP, "stop")


@pytest.mark.anyio
async def test_a_runs_stream_withdraws_the_rounds_its_answer_does_not_keep(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    """What a client shows (the deltas, less what is withdrawn) is the answer that counts:
    before, it showed three rounds and the stored answer kept one."""
    pieces = [LOOP[i : i + 7] for i in range(0, len(LOOP), 7)]
    chat_server.add(Reply(sse=[*(chunk({"content": p}) for p in pieces), HOLD]))

    with anyio.fail_after(8):
        events = [e async for e in Agent(model=model).stream("twenty tips")]

    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    (withdrawn,) = [e for e in events if isinstance(e, TextWithdrawn)]
    assert (withdrawn.reason, withdrawn.notice) == ("repetition", REPETITION_NOTICE)
    assert deltas.endswith(withdrawn.text) and withdrawn.text.count("Check for Air") == 2
    final = events[-1]
    assert isinstance(final, Final)
    assert deltas[: len(deltas) - len(withdrawn.text)] == final.result.output == FIRST_ROUND


class LoopingModel:
    """A model whose second step streams ``sent`` and keeps ``kept`` (an adapter that
    stopped it in a loop); its first step calls ``lookup``."""

    name = "looping"

    def __init__(self, sent: list[str], kept: str) -> None:
        self.sent, self.kept, self.steps = sent, kept, 0

    async def request(self, messages: Any, *, tools: Any = None) -> ModelResponse:
        raise AssertionError("streamed only")

    async def stream(self, messages: Any, *, tools: Any = None) -> AsyncIterator[Any]:
        self.steps += 1
        if self.steps == 1:
            yield StreamText(text="Looking it up.")
            call = ToolCallBlock(id="c1", name="lookup", arguments="{}")
            message = Message(role="assistant", content=(TextBlock(text="Looking it up."), call))
            yield StreamDone(response=ModelResponse(message=message, finish_reason="tool_calls"))
            return
        for piece in self.sent:
            yield StreamText(text=piece)
        reply = Message.assistant(self.kept)
        yield StreamDone(response=ModelResponse(message=reply, finish_reason=FINISH_REPETITION))


@tool(read_only=True, inline=True)
def lookup() -> str:
    """Look it up."""
    return "found"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("sent", "kept", "withdrawn", "again"),
    [
        # the answer keeps the beginning of what streamed: the rest is withdrawn
        (["Step A. Step A. ", "Step A."], "Step A.", " Step A. Step A.", ""),
        # it does not (the adapter's cut ends elsewhere): all of the step goes, and the
        # answer is shown again, after the separator from the step before
        (["Step A!", " Step A!"], "Step B.", "\n\nStep A! Step A!", "\n\nStep B."),
    ],
)
async def test_a_second_steps_loop_is_withdrawn_after_the_first_steps_text(
    sent: list[str], kept: str, withdrawn: str, again: str
) -> None:
    agent = Agent(model=LoopingModel(sent, kept), toolkit=Toolkit([lookup]))
    events = [e async for e in agent.stream("look it up")]
    (event,) = [e for e in events if isinstance(e, TextWithdrawn)]
    assert event.text == withdrawn
    after = events[events.index(event) + 1 :]
    assert "".join(e.text for e in after if isinstance(e, TextDelta)) == again
    shown = "".join(e.text for e in events[: events.index(event)] if isinstance(e, TextDelta))
    assert shown[: len(shown) - len(withdrawn)] + again == "Looking it up.\n\n" + kept
    final = events[-1]
    assert isinstance(final, Final) and final.result.output == kept


@pytest.mark.anyio
async def test_a_constrained_loop_keeps_its_first_round_without_an_ellipsis(
    chat_server: ChatServer,
) -> None:
    """The cut-answer recovery marks an answer cut by ``max_tokens`` with "…"; a loop's cut
    ends after a whole round, so it gets none."""
    raw = json.dumps({"tool": "none", "answer": LOOP}, ensure_ascii=False)
    pieces = [raw[i : i + 7] for i in range(0, len(raw), 7)]
    chat_server.add(Reply(sse=[*(chunk({"content": p}) for p in pieces), HOLD]))
    model = OpenAIChatModel(
        "m", base_url=chat_server.url, api_key="k", max_retries=0, tool_mode="constrained"
    )
    try:
        with anyio.fail_after(8):
            items = [i async for i in model.stream([Message.user("tips")], tools=[LOOKUP])]
    finally:
        await model.aclose()
    done = items[-1]
    assert isinstance(done, StreamDone)
    assert (done.response.message.text, done.response.finish_reason) == (
        FIRST_ROUND,
        FINISH_REPETITION,
    )
