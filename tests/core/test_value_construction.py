"""The hot value types build themselves without the dataclass's ``__init__`` (see
``shelfhand.core.slots``): they must behave exactly as the frozen dataclasses they are."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.events import Final, final_event
from shelfhand.core.messages import (
    Citation,
    CitationBlock,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from shelfhand.core.results import RunResult, Usage, UsageTally, run_result, run_usage
from shelfhand.core.slots import slot_setters, twin


def _values() -> list[Any]:
    cite = Citation(index=1, source="退货政策.md", text="拆封后 7 天内可退")
    return [
        TextBlock(text="拆封后还能退吗？"),
        ToolCallBlock(id="c1", name="retrieve", arguments='{"query": "退货"}'),
        ToolResultBlock(call_id="c1", name="retrieve", content="[1] …", citations=(cite,)),
        ToolResultBlock(call_id="c2", name="add", content="boom", is_error=True),
        Message.user("What is 2 + 3?", metadata={"k": 1}),
        Message.assistant("拆封后 7 天内可退 [1]。", citations=[cite]),
        Usage(input_tokens=12, output_tokens=3, model_calls=1, cost=0.5),
        _result(),
        Final(result=_result()),
    ]


def _result() -> RunResult:
    return RunResult(
        output="拆封后 7 天内可退 [1]。",
        messages=(Message(role="user", id="m1", created_at=1.0),),
        usage=Usage(model_calls=2, tool_calls=1),
        iterations=2,
        trace_id="t1",
        budget={"scope": "tenant"},
    )


@pytest.mark.parametrize("value", _values(), ids=lambda v: type(v).__name__)
def test_a_hot_value_pickles_copies_and_replaces_to_an_equal_value(value: Any) -> None:
    assert pickle.loads(pickle.dumps(value)) == value
    assert copy.deepcopy(value) == value
    assert dataclasses.replace(value) == value
    assert dataclasses.asdict(value) == dataclasses.asdict(copy.copy(value))


@pytest.mark.parametrize("value", _values(), ids=lambda v: type(v).__name__)
def test_a_hot_value_stays_frozen(value: Any) -> None:
    for f in dataclasses.fields(value):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, f.name, "changed")


def test_blocks_compare_and_hash_by_their_fields() -> None:
    a = ToolCallBlock(id="c1", name="add", arguments='{"a": 2}')
    assert a == ToolCallBlock(id="c1", name="add", arguments='{"a": 2}')
    assert hash(a) == hash(ToolCallBlock(id="c1", name="add", arguments='{"a": 2}'))
    assert a != ToolCallBlock(id="c1", name="add")
    assert ToolCallBlock(id="c1", name="add").arguments == "{}"
    assert TextBlock(text="x").type == "text"
    result = ToolResultBlock(call_id="c1", name="add", content="5")
    assert (result.is_error, result.citations, result.type) == (False, (), "tool_result")
    assert repr(TextBlock(text="中文")) == "TextBlock(text='中文', type='text')"


def test_each_message_gets_its_own_id_time_and_metadata() -> None:
    a, b = Message.user("一"), Message.user("一")
    assert a.id != b.id and len(a.id) == 32
    assert a.created_at <= b.created_at
    assert a.metadata == {} and a.metadata is not b.metadata
    assert a != b  # different ids


def test_a_message_keeps_the_id_time_and_metadata_it_is_given() -> None:
    m = Message(role="user", id="m1", created_at=12.5, metadata={"upfront": True}, name="张三")
    assert (m.id, m.created_at, dict(m.metadata), m.name) == ("m1", 12.5, {"upfront": True}, "张三")
    assert m == Message(
        role="user", id="m1", created_at=12.5, metadata={"upfront": True}, name="张三"
    )
    assert dataclasses.replace(m, name=None).id == "m1"


def test_a_message_given_no_id_gets_a_fresh_one() -> None:
    assert Message(role="user", id=None).id  # never None


def test_the_constructor_rejects_unknown_and_positional_fields() -> None:
    with pytest.raises(TypeError):
        Message(role="user", colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        TextBlock("x")  # type: ignore[misc]
    with pytest.raises(TypeError):
        ToolCallBlock(name="add")  # type: ignore[call-arg]


def test_slot_setters_refuse_a_name_that_is_not_a_slot() -> None:
    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int = 0

    with pytest.raises(TypeError, match=r"Plain\.x is not a slot"):
        slot_setters(Plain, "x")
    with pytest.raises(TypeError, match=r"TextBlock\.colour is not a slot"):
        slot_setters(TextBlock, "colour")


def test_a_run_result_defaults_to_no_usage_and_a_final_stop() -> None:
    result = RunResult(output="5", messages=())
    assert result.usage == Usage()
    assert (result.stop_reason, result.iterations, result.citations) == ("final", 0, ())
    assert (result.grounding, result.extractive, result.budget) == (None, False, None)
    assert dataclasses.replace(result, output="6").usage == Usage()


def test_a_run_context_gets_fresh_ids_ledger_and_tally_unless_given() -> None:
    a, b = RunContext(), RunContext()
    assert len({a.run_id, a.trace_id, b.run_id, b.trace_id}) == 4
    assert a.citations is not b.citations and a.delegated is not b.delegated
    user = UserContext(tenant_id="acme", user_id="张三")
    step = dataclasses.replace(a, iteration=3, user=user)
    # a step of the same run: same ids, same ledger and tally (compared by the other fields)
    assert (step.run_id, step.trace_id, step.iteration, step.user) == (
        a.run_id,
        a.trace_id,
        3,
        user,
    )
    assert step.citations is a.citations and step.delegated is a.delegated
    assert step == dataclasses.replace(a, iteration=3, user=user)
    again = RunContext(run_id="r", trace_id="t", agent_name="calc", depth=1, parent_trace_id="p")
    assert again == RunContext(
        run_id="r", trace_id="t", agent_name="calc", depth=1, parent_trace_id="p"
    )


def test_usage_tallies_add_up_from_many_threads_at_once() -> None:
    tallies = [UsageTally(), UsageTally()]

    def add(n: int) -> None:
        for _ in range(500):
            tallies[n % 2].add(Usage(model_calls=1, input_tokens=2))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(add, range(8)))
    assert [t.total for t in tallies] == [Usage(model_calls=2000, input_tokens=4000)] * 2


def test_factory_built_messages_equal_constructor_built_ones_field_for_field() -> None:
    cite = Citation(index=1, source="a.md")
    call = ToolCallBlock(id="c1", name="add")
    result = ToolResultBlock(call_id="c1", name="add", content="5")
    for built, role, content in [
        (Message.system("你是计算器"), "system", (TextBlock(text="你是计算器"),)),
        (Message.user("2 + 3?"), "user", (TextBlock(text="2 + 3?"),)),
        (
            Message.assistant("5 [1]", tool_calls=[call], citations=[cite]),
            "assistant",
            (TextBlock(text="5 [1]"), call, CitationBlock(citations=(cite,))),
        ),
        (Message.assistant(), "assistant", ()),
        (Message.tool([result]), "tool", (result,)),
    ]:
        assert type(built) is Message
        assert built == Message(
            role=role, content=content, id=built.id, created_at=built.created_at
        )
        assert built.name is None and built.metadata == {}
        assert repr(built).startswith(f"Message(role='{role}'")
        assert pickle.loads(pickle.dumps(built)) == built


def test_factories_with_keywords_or_of_a_subclass_use_the_constructor() -> None:
    m = Message.user("hi", name="张三", metadata={"k": 1})
    assert (m.name, dict(m.metadata)) == ("张三", {"k": 1})

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Tagged(Message):
        tag: str = "t"

    tagged = Tagged.user("hi")
    assert type(tagged) is Tagged and tagged.tag == "t" and tagged.text == "hi"


def test_a_twin_needs_a_slotted_class_of_its_own() -> None:
    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int = 0

    with pytest.raises(TypeError, match="not a slotted class of its own"):
        twin(Plain)

    @dataclasses.dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: int

    fields = twin(Point)()
    fields.x, fields.y = 1, 2
    fields.__class__ = Point
    assert fields == Point(1, 2) and hash(fields) == hash(Point(1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fields.x = 3


def test_the_run_builders_make_what_the_constructors_make() -> None:
    usage = run_usage(
        input_tokens=1, output_tokens=2, model_calls=3, tool_calls=4, retrievals=5, cost=None
    )
    assert usage == Usage(
        input_tokens=1, output_tokens=2, model_calls=3, tool_calls=4, retrievals=5
    )
    assert hash(usage) == hash(
        Usage(input_tokens=1, output_tokens=2, model_calls=3, tool_calls=4, retrievals=5)
    )
    messages = (Message.user("2 + 3?"),)
    call = ToolCallBlock(id="c1", name="ship")
    built = run_result(
        output="好的", messages=messages, citations=(), usage=usage, iterations=2,
        stop_reason="external_tool", trace_id="t1", external_calls=(call,),
    )  # fmt: skip
    assert built == RunResult(
        output="好的", messages=messages, usage=usage, iterations=2,
        stop_reason="external_tool", trace_id="t1", external_calls=(call,),
    )  # fmt: skip
    assert pickle.loads(pickle.dumps(built)) == built
    assert dataclasses.replace(built, extractive=True).extractive
    event = final_event(built)
    assert event == Final(result=built) and event.type == "final"


def test_a_started_run_is_a_whole_run_context() -> None:
    user = UserContext(tenant_id="acme", user_id="李四")
    top = RunContext.start(agent_name="calc", user=user, trace_id="t1")
    assert top == RunContext(run_id=top.run_id, trace_id="t1", agent_name="calc", user=user)
    assert (top.iteration, top.deps, top.depth, top.parent_trace_id) == (0, None, 0, "")
    assert top.citations.citations == () and top.delegated.total == Usage()
    sub = RunContext.start(agent_name="sub", parent=top)
    assert (sub.user, sub.parent_trace_id, sub.depth) == (user, "t1", 1)
    assert sub.trace_id not in ("", "t1") and sub.run_id != top.run_id
    assert dataclasses.replace(sub, iteration=2).citations is sub.citations

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Tagged(RunContext):
        tag: str = "t"

    tagged = Tagged.start(agent_name="calc")
    assert type(tagged) is Tagged and tagged.agent_name == "calc"


@pytest.mark.parametrize(
    "arguments",
    [
        '{"a": 2, "b": 3}',
        '{"query": "退货政策", "top_k": 5, "filters": {"tags": ["售后", null]}}',
        '  {"a": 1}  ',
        "{}",
        '{"x": NaN}',
        "",
        "   ",
        "[1, 2]",
        '"text"',
        '{"a": }',
        '{"a": 1}}',
        "{} {}",
        '{"a": "unterminated}',
        '{"a": 1}\n',
        "{'a': 1}",
    ],
)
def test_parsed_arguments_are_exactly_what_json_loads_makes_of_them(arguments: str) -> None:
    call = ToolCallBlock(id="c1", name="t", arguments=arguments)
    try:
        expected: Any = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        with pytest.raises(json.JSONDecodeError) as got:
            call.parsed_arguments()
        assert (got.value.msg, got.value.pos) == (exc.msg, exc.pos)
        return
    parsed = call.parsed_arguments()
    assert repr(parsed) == repr(expected)  # NaN != NaN: compare the text


def test_a_messages_text_and_calls_are_read_from_every_shape_of_content() -> None:
    a = ToolCallBlock(id="c1", name="add")
    b = ToolCallBlock(id="c2", name="退货")
    result = ToolResultBlock(call_id="c1", name="add", content="5")
    cases: list[tuple[tuple[Any, ...], str, tuple[ToolCallBlock, ...]]] = [
        ((), "", ()),
        ((TextBlock(text="只有文字"),), "只有文字", ()),
        ((a,), "", (a,)),
        ((result,), "", ()),
        ((TextBlock(text="先"), a, TextBlock(text="后"), b), "先后", (a, b)),
        ((CitationBlock(citations=()), TextBlock(text="x")), "x", ()),
    ]
    for content, text, calls in cases:
        message = Message(role="assistant", content=content)
        assert message.text == text
        assert message.tool_calls == calls
        assert isinstance(message.tool_calls, tuple)


def test_a_tools_return_value_becomes_the_output_the_constructor_would_make() -> None:
    from shelfhand.tools.tool import ToolOutput, serialise_result

    assert serialise_result("拆封后 7 天内可退") == ToolOutput(content="拆封后 7 天内可退")
    assert serialise_result(None) == ToolOutput(content="done")
    made = serialise_result({"total": 5, "币种": "元"})
    assert made == ToolOutput(content='{"total":5,"币种":"元"}', data={"total": 5, "币种": "元"})
    assert (made.citations, made.is_error) == ((), False)
    assert pickle.loads(pickle.dumps(made)) == made
    own = ToolOutput(content="x", is_error=True)
    assert serialise_result(own) is own
