"""Recovering tool calls that a server returned as message text."""

from __future__ import annotations

import itertools
import json

import pytest

from shelfhand.models.textcalls import recover_tool_calls

TOOLS = {"lookup_order", "retrieve", "quote_price"}


def calls_of(text: str) -> list[tuple[str, object]]:
    _, calls = recover_tool_calls(text, TOOLS)
    return [(c.name, json.loads(c.arguments)) for c in calls]


def test_a_fenced_json_block_is_recovered_and_removed_from_the_text() -> None:
    text = 'Let me check that order.\n\n```json\n{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}\n```\n'

    remaining, calls = recover_tool_calls(text, TOOLS)

    assert remaining == "Let me check that order."
    assert [(c.name, c.parsed_arguments()) for c in calls] == [
        ("lookup_order", {"order_id": "A-1001"})
    ]
    assert calls[0].id.startswith("call_")


def test_bare_json_is_recovered() -> None:
    remaining, calls = recover_tool_calls(
        '{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}', TOOLS
    )

    assert remaining == ""
    assert [c.name for c in calls] == ["lookup_order"]


@pytest.mark.parametrize(
    "text",
    [
        '{"function": "retrieve", "parameters": {"query": "退货政策"}}',
        '{"tool": "retrieve", "args": {"query": "退货政策"}}',
        '{"type": "function", "name": "retrieve", "parameters": {"query": "退货政策"}}',
        '{"name": "retrieve", "arguments": "{\\"query\\": \\"退货政策\\"}"}',
        '{"type": "function", "function": {"name": "retrieve", "arguments": {"query": "退货政策"}}}',
    ],
)
def test_the_usual_key_spellings_are_all_recovered(text: str) -> None:
    assert calls_of(text) == [("retrieve", {"query": "退货政策"})]


def test_qwen_tool_call_tags_are_recovered_with_chinese_text_around() -> None:
    text = (
        "好的，我先查询库存。\n"
        '<tool_call>\n{"name": "quote_price", "arguments": {"sku": "SKU2024-011", "quantity": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "retrieve", "arguments": {"query": "保修期"}}\n</tool_call>\n'
        "请稍等。"
    )

    remaining, calls = recover_tool_calls(text, TOOLS)

    assert remaining == "好的，我先查询库存。\n\n请稍等。"
    assert [(c.name, c.parsed_arguments()) for c in calls] == [
        ("quote_price", {"sku": "SKU2024-011", "quantity": 2}),
        ("retrieve", {"query": "保修期"}),
    ]
    assert calls[0].arguments == '{"sku": "SKU2024-011", "quantity": 2}'  # Chinese kept as is


def test_an_unclosed_qwen_tag_at_the_end_is_still_recovered() -> None:
    assert calls_of('<tool_call>{"name": "retrieve", "arguments": {"query": "E-203"}}') == [
        ("retrieve", {"query": "E-203"})
    ]


def test_a_list_of_calls_is_recovered_in_order() -> None:
    text = (
        '[{"name": "quote_price", "arguments": {"sku": "S-1", "quantity": 1}}, '
        '{"name": "lookup_order", "arguments": {"order_id": "A-7"}}]'
    )

    assert calls_of(text) == [
        ("quote_price", {"sku": "S-1", "quantity": 1}),
        ("lookup_order", {"order_id": "A-7"}),
    ]


def test_json_naming_an_unknown_tool_inside_prose_is_never_recovered() -> None:
    for text in (
        'You could call {"name": "delete_everything", "arguments": {}} but I will not.',
        'Here:\n```json\n{"name": "delete_everything", "arguments": {}}\n```\nDone.',
    ):
        assert recover_tool_calls(text, TOOLS) == (text, [])


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "delete_everything", "arguments": {}}',
        '```json\n{"name": "delete_everything", "arguments": {}}\n```',
        '<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',
        '好的。<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',
        '[{"name": "retrieve", "arguments": {"query": "x"}}, {"name": "delete_everything", '
        '"arguments": {}}]',
    ],
)
def test_a_reply_that_is_only_a_call_to_an_unknown_tool_is_recovered_for_the_toolkit_to_refuse(
    text: str,
) -> None:
    remaining, calls = recover_tool_calls(text, TOOLS)

    assert "delete_everything" in [c.name for c in calls]
    assert "{" not in remaining


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ('{"name": "Order Management", "arguments": {"order_id": "SO-1001"}}', "Order Management"),
        ('{"name": "查询库存", "arguments": {"sku": "SKU2024-011"}}', "查询库存"),
    ],
)
def test_a_whole_reply_calling_a_made_up_tool_name_with_spaces_goes_to_the_toolkit(
    text: str, name: str
) -> None:
    # measured with Qwen2.5-Coder-0.5B in plain mode: these reached the user as raw JSON
    remaining, calls = recover_tool_calls(text, TOOLS)

    assert remaining == "" and [c.name for c in calls] == [name]


def test_arguments_that_are_not_an_object_are_recovered_as_written() -> None:
    remaining, calls = recover_tool_calls('{"name": "retrieve", "arguments": ["x", 1]}', TOOLS)

    assert remaining == ""
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("retrieve", ["x", 1])]


@pytest.mark.parametrize(
    "text",
    [
        "In Python, {x for x in items} builds a set; a dict is {'a': 1}.",
        "保修期为两年 [1]，详见 {保修政策} 第 3 节。",
        'The order record is {"name": "lookup_order", "status": "shipped"}.',
        'Example data: {"name": "Alice", "arguments": {"x": 1}}',
        '```python\nrun({"name": "lookup_order", "arguments": {"order_id": "A-1"}})\n```',
        '<think>maybe {"name": "retrieve", "arguments": {"query": "x"}}</think>The answer is 42.',
        '{"name": "retrieve"} is the tool I would use.',
    ],
)
def test_prose_and_data_that_merely_contain_braces_are_untouched(text: str) -> None:
    assert recover_tool_calls(text, TOOLS) == (text, [])


def test_nothing_is_recovered_when_no_tools_were_offered() -> None:
    text = '{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}'

    assert recover_tool_calls(text, ()) == (text, [])


def test_ids_come_from_make_id_unless_the_json_carries_one() -> None:
    counter = itertools.count(1)
    text = (
        '[{"id": "given", "type": "function", "function": {"name": "retrieve", "arguments": "{}"}},'
        ' {"name": "retrieve", "arguments": {}}]'
    )

    _, calls = recover_tool_calls(text, TOOLS, make_id=lambda: f"c{next(counter)}")

    assert [c.id for c in calls] == ["given", "c1"]


def test_a_mistral_marker_before_the_calls_is_removed_too() -> None:
    remaining, calls = recover_tool_calls(
        'Checking. [TOOL_CALLS] [{"name": "retrieve", "arguments": {"query": "E-203"}}]', TOOLS
    )

    assert remaining == "Checking."
    assert [c.name for c in calls] == ["retrieve"]


@pytest.mark.parametrize(
    ("written", "meant"),
    [("Retrieve", "retrieve"), ("query stock", "query_stock"), ("Query-Stock", "query_stock")],
)
def test_a_misspelt_offered_tool_name_is_given_the_tools_name(written: str, meant: str) -> None:
    reply = json.dumps(
        {"name": written, "arguments": {"query": "E-203 是什么"}}, ensure_ascii=False
    )
    _, calls = recover_tool_calls(reply, ["retrieve", "query_stock"])
    assert [c.name for c in calls] == [meant]
    # a name no offered tool spells stays as written (the toolkit refuses it)
    _, calls = recover_tool_calls(reply.replace(written, "Order Status"), ["retrieve"])
    assert [c.name for c in calls] == ["Order Status"]
    # two tools spelt alike: no guess
    _, calls = recover_tool_calls(json.dumps({"name": "A b", "arguments": {}}), ["a_b", "A-B"])
    assert [c.name for c in calls] == ["A b"]


@pytest.mark.parametrize(
    ("text", "name", "arguments"),
    [
        # measured with Qwen2.5-Coder-0.5B in native mode: shown to the user as the answer
        (
            '{"name": "retrieve", "arguments": {"query": "How often should the air filter be '
            'cleaned?"}]}',
            "retrieve",
            {"query": "How often should the air filter be cleaned?"},
        ),
        ('{"name": "thank you", "arguments": {"message": "merci"}]}', "thank you", None),
        ('{"name": "retrieve", "arguments": {"query": "a ]} \\" b"}]}', "retrieve", None),
        ('{"name": "retrieve", "arguments": {"query": "保修期"}}}', "retrieve", None),
    ],
)
def test_a_whole_reply_call_with_a_stray_closing_bracket_is_recovered(
    text: str, name: str, arguments: dict[str, str] | None
) -> None:
    remaining, calls = recover_tool_calls(text, TOOLS)

    assert remaining == "" and [c.name for c in calls] == [name]
    if arguments is not None:
        assert json.loads(str(calls[0].arguments)) == arguments


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "retrieve", "arguments": {"query": "x"}',  # still open: not a call
        'The filter {"name": "retrieve"}] is fine.',  # prose
        '{"note": "see [1]"}]',  # no call inside
    ],
)
def test_only_stray_closers_are_repaired(text: str) -> None:
    assert recover_tool_calls(text, TOOLS) == (text, [])


RETURN_CALL = (
    '{"name": "return", "arguments": {"RMA-7": "created", "order_id": "SO-1001", '
    '"status": "delivered"}}'
)


def test_calls_repeated_until_max_tokens_cut_the_last_off_are_recovered() -> None:
    # measured with Qwen2.5-Coder-0.5B in native mode ("Hello!"): shown as the answer
    text = "\n".join([RETURN_CALL] * 13 + [RETURN_CALL[:80]])

    remaining, calls = recover_tool_calls(text, TOOLS)

    assert remaining == "" and len(calls) == 13
    assert {c.name for c in calls} == {"return"}  # the toolkit answers "unknown tool"
    assert json.loads(str(calls[0].arguments))["order_id"] == "SO-1001"


@pytest.mark.parametrize(
    "text",
    [
        RETURN_CALL[:80],  # nothing complete before the cut
        '{"note": "x"}\n' + RETURN_CALL[:80],  # what is complete is no call
        RETURN_CALL + '\n{"name": "x"}]',  # the last value is malformed, not cut off
        "Sure: " + RETURN_CALL + "\n" + RETURN_CALL[:80],  # prose first
    ],
)
def test_only_a_cut_off_last_value_after_complete_calls_is_dropped(text: str) -> None:
    assert recover_tool_calls(text, TOOLS) == (text, [])


def test_a_whole_reply_call_closed_with_a_parenthesis_is_recovered() -> None:
    # measured with Qwen2.5-Coder-0.5B in native mode (`ask` "What does error E-310 mean?")
    text = (
        '{"name": "error E-310", "arguments": {"code": "E-310", "status_light": "红色", '
        '"description": "投影仪没有收到所选输入端口的画面。"})'
    )

    remaining, calls = recover_tool_calls(text, TOOLS)

    assert remaining == "" and [c.name for c in calls] == ["error E-310"]
    assert json.loads(str(calls[0].arguments))["code"] == "E-310"


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "retrieve", "arguments": {"query": "x)',  # the ")" is inside an open string
        'Call {"name": "retrieve", "arguments": {"query": "x"})',  # prose first
        '{"name": "nope", "arguments": {"query": "x"}})',  # nothing owed before ")"
    ],
)
def test_only_a_final_parenthesis_standing_for_owed_closers_is_repaired(text: str) -> None:
    assert recover_tool_calls(text, TOOLS) == (text, [])
