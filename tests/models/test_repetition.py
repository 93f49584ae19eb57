"""A reply caught in a loop is stopped, and one round of the loop kept (``.repetition``).
Qwen2.5-Coder-0.5B, asked for twenty tips, wrote one item over and over with a new number
until ``max_tokens``. The rules on text, then the adapter against a real loopback server: a
streamed loop ends the request (the client hangs up), a reply cut by
``max_tokens`` inside a loop is cut after its first round."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import pytest

from shelfhand.core.messages import Message
from shelfhand.models import StreamDone, StreamText
from shelfhand.providers.openai_chat import OpenAIChatModel
from shelfhand.providers.repetition import loop_cut
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
    ],
)
def test_text_that_is_not_a_loop_is_left_whole(text: str) -> None:
    assert loop_cut(text) is None


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
