"""How tools reach the model: ``native``, ``plain`` or ``constrained`` (docs/design.md K4).

- ``native`` sends the OpenAI ``tools`` list; the server's chat template presents them and
  its parser returns ``tool_calls`` (llama.cpp needs ``--jinja``). Calls that the model wrote
  as text anyway are recovered by :func:`~shelfhand.models.textcalls.recover_tool_calls`.
- ``plain`` sends no ``tools``: they are described in the system prompt, the model writes
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` and the calls are recovered from
  the text. For servers without tool support.
- ``constrained`` describes the tools in the prompt *and* sends a ``response_format`` JSON
  schema: ``{"tool": <name>, "arguments": <that tool's parameters>}`` for each tool, or
  ``{"tool": "none", "answer": "<text>"}``. A server with grammar-constrained decoding
  (llama.cpp, vLLM) then cannot produce a malformed call; :func:`parse_constrained` turns the
  JSON back into tool calls or answer text. Best for small local models.

In ``plain`` and ``constrained`` modes earlier tool calls and results are sent as text, since
the server was not told about tools.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

from shelfhand.core.messages import Message, TextBlock, ToolCallBlock
from shelfhand.models.base import ToolSchema
from shelfhand.providers.openai_wire import messages_to_openai, new_call_id

__all__ = [
    "NO_TOOL",
    "PROMPT_TEXTS",
    "TOOL_MODES",
    "ToolMode",
    "examples_block",
    "native_tools",
    "parse_constrained",
    "prompted_messages",
    "repeats_answered_calls",
    "response_format",
    "tool_examples",
    "tools_prompt",
]

ToolMode: TypeAlias = Literal["native", "plain", "constrained"]
TOOL_MODES: tuple[ToolMode, ...] = ("native", "plain", "constrained")
NO_TOOL = "none"
"""The ``tool`` value of a constrained reply that answers instead of calling a tool."""

_PLAIN_RULES = (
    "To call a tool, reply with nothing but "
    '<tool_call>{"name": "<tool name>", "arguments": {<arguments>}}</tool_call> '
    "(one line per call). When you need no tool, answer the user in plain text, never JSON."
)
_CONSTRAINED_FORMAT = (
    'Reply with one JSON object: {"tool": "<tool name>", "arguments": {<arguments>}} to call '
    'a tool, or {"tool": "none", "answer": "<your answer to the user>"} to answer.'
)
# How a small model should choose (measured on Qwen2.5-Coder-0.5B, docs/benchmarks/history.md "After issue
# 9 round 2"): the specific tool over a general search, documents questions to a search tool,
# small talk without tools, identifiers copied whole. Naming the search tool in rule 2 measured
# worse (8/20: it then got the stock, price and order questions too), so the rules name no tool.
_CHOOSE_RULES = (
    "How to choose:\n"
    "1. If one tool is made for exactly what the user asks, call that tool, even when a "
    "search tool could also find something.\n"
    "2. Questions that documents answer (how to do something, what an error code means, rules, "
    "policies, warranty) go to the search tool; never answer those from memory.\n"
    "3. Greetings, thanks, translations and small talk: answer directly, no tool.\n"
    "Copy codes and numbers into the arguments exactly as the user wrote them, whole."
)
_AFTER_RESULTS = (
    "Answer the user's question from these results now; call another tool only if "
    "something is still missing, never the same call again."
)

PROMPT_TEXTS: tuple[str, ...] = (_PLAIN_RULES, _CONSTRAINED_FORMAT, _CHOOSE_RULES, _AFTER_RESULTS)
"""The instructions these modes add to a request: text that must never reach an answer."""


def _function(tool: ToolSchema) -> Mapping[str, Any]:
    function = tool.get("function")
    return function if isinstance(function, Mapping) else tool


def _parameters(tool: ToolSchema) -> dict[str, Any]:
    params = _function(tool).get("parameters")
    if isinstance(params, Mapping) and params:
        return dict(params)
    return {"type": "object", "properties": {}}


def _argument(name: str, spec: Any, required: bool) -> str:
    spec = spec if isinstance(spec, Mapping) else {}
    text = f"{name}: {spec.get('type', 'any')}" + ("" if required else " (optional)")
    description = str(spec.get("description") or "").strip()
    return f"{text} - {description}" if description else text


def tool_examples(tool: ToolSchema) -> list[tuple[str, Mapping[str, Any] | None]]:
    """The deployer's examples of a tool schema (``function["examples"]``, see
    :class:`~shelfhand.tools.tool.ToolExample`) as ``(request, arguments or None)``;
    malformed entries are skipped."""
    raw = _function(tool).get("examples")
    out: list[tuple[str, Mapping[str, Any] | None]] = []
    for item in raw if isinstance(raw, Sequence) and not isinstance(raw, str) else ():
        request = item.get("request") if isinstance(item, Mapping) else item
        if not isinstance(request, str) or not request.strip():
            continue
        arguments = item.get("arguments") if isinstance(item, Mapping) else None
        out.append((request.strip(), arguments if isinstance(arguments, Mapping) else None))
    return out


def _example_reply(name: str, arguments: Mapping[str, Any] | None, mode: ToolMode) -> str:
    args = dict(arguments or {})
    if mode == "constrained":
        return json.dumps({"tool": name, "arguments": args}, ensure_ascii=False)
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"<tool_call>{body}</tool_call>"


def examples_block(tools: Sequence[ToolSchema], mode: ToolMode) -> str:
    """The tools' examples as requests and the reply each should get, in the reply format of
    ``mode``; taken one per tool in turn (every tool's first example, then every second…), so
    that no tool's examples come all first. Empty when no tool has examples.

    Measured on Qwen2.5-Coder-0.5B (docs/benchmarks/history.md, "After issue 9 round 4"): this block after
    the rules routed 20/20 first decisions; the same examples as lines under each tool's
    description, 11/20 (they pulled the document questions to the first ``query_`` tool)."""
    per_tool = [
        [(_function(t).get("name"), *example) for example in tool_examples(t)] for t in tools
    ]
    lines: list[str] = []
    for i in range(max((len(p) for p in per_tool), default=0)):
        for name, request, arguments in (p[i] for p in per_tool if i < len(p)):
            said = json.dumps(request, ensure_ascii=False)
            lines.append(f"User: {said} -> {_example_reply(str(name), arguments, mode)}")
    return "Examples of requests and the right reply:\n" + "\n".join(lines) if lines else ""


def native_tools(tools: Sequence[ToolSchema]) -> list[dict[str, Any]]:
    """The ``tools`` list of a ``native`` request, without the tools' examples.

    ``function["examples"]`` is not part of the OpenAI format (a strict server would refuse
    it), and the examples are not shown in native mode at all: folded into the descriptions
    (``Examples: "…" -> {…}``), they taught Qwen2.5-Coder-0.5B to write its calls as JSON
    text, three of them malformed and shown as the answer (docs/benchmarks/history.md, "After issue 9
    round 4"); without them native mode measured 0 such answers (round 3)."""
    out: list[dict[str, Any]] = []
    for tool in tools:
        fn = tool.get("function")
        if not isinstance(fn, Mapping) or "examples" not in fn:
            out.append(dict(tool))
            continue
        function = {k: v for k, v in fn.items() if k != "examples"}
        out.append({**tool, "function": function})
    return out


def tools_prompt(tools: Sequence[ToolSchema], mode: ToolMode, *, examples: bool = True) -> str:
    """The tool descriptions (with each argument's description), the calling rules and,
    with ``examples``, the deployer's examples (:func:`examples_block`)."""
    lines = ["You can call these tools:"]
    for tool in tools:
        fn = _function(tool)
        params = _parameters(tool)
        props = params.get("properties") or {}
        required = set(params.get("required") or ())
        description = str(fn.get("description") or "").strip().split("\n\n")[0]
        lines.append(f"- {fn.get('name')}: {description}")
        lines.extend(
            f"    {_argument(name, spec, name in required)}" for name, spec in props.items()
        )
    rules = [_CONSTRAINED_FORMAT, _CHOOSE_RULES] if mode == "constrained" else [_PLAIN_RULES]
    lines.extend(rules)
    if examples and (block := examples_block(tools, mode)):
        lines.append(block)
    return "\n".join(lines)


def _call_text(call: ToolCallBlock, mode: ToolMode) -> str:
    try:
        arguments = call.parsed_arguments()
    except json.JSONDecodeError:
        arguments = call.arguments
    if mode == "constrained":
        return json.dumps({"tool": call.name, "arguments": arguments}, ensure_ascii=False)
    body = json.dumps({"name": call.name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>{body}</tool_call>"


def _answer_text(text: str, mode: ToolMode) -> str:
    if mode == "constrained":  # the model sees its earlier answers in the shape it must use
        return json.dumps({"tool": NO_TOOL, "answer": text}, ensure_ascii=False)
    return text


def _routing_step(messages: Sequence[Message]) -> bool:
    """The model is to route a user's request: the last message is the user's and does not
    follow tool results. After results the examples are left out: measured with
    Qwen2.5-Coder-0.5B (docs/benchmarks/history.md, "After issue 9 round 4"), a model shown them after a
    result called another example's tool with that example's arguments (a return "arrived
    cracked" after an order lookup). The system prompt up to the examples stays the same, so
    a server's prompt cache still covers it."""
    if not messages or messages[-1].role != "user" or messages[-1].tool_results:
        return False
    return not (len(messages) > 1 and messages[-2].tool_results)


def prompted_messages(
    messages: Sequence[Message], tools: Sequence[ToolSchema], mode: ToolMode
) -> list[dict[str, Any]]:
    """Wire messages for ``plain``/``constrained`` mode: tools described in the system
    prompt (their examples only while the model routes a new request, see
    :func:`_routing_step`), earlier calls and results written as text."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            calls = "\n".join(_call_text(c, mode) for c in message.tool_calls)
            out.append({"role": "assistant", "content": f"{text}\n{calls}".strip()})
        elif message.tool_results:
            results = "\n\n".join(
                f"Result of {r.name}{' (error)' if r.is_error else ''}:\n{r.content}"
                for r in message.tool_results
            )
            out.append({"role": "user", "content": f"{results}\n\n{_AFTER_RESULTS}"})
        elif message.role == "assistant":
            out.extend(
                {**m, "content": _answer_text(str(m.get("content") or ""), mode)}
                for m in messages_to_openai([message])
            )
        else:
            out.extend(messages_to_openai([message]))
    if tools:
        prompt = tools_prompt(tools, mode, examples=_routing_step(messages))
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def response_format(tools: Sequence[ToolSchema], *, answer: bool = True) -> dict[str, Any]:
    """The ``response_format`` that makes a grammar-constrained server emit one call or an
    answer: ``anyOf`` one object per tool (name fixed, its argument schema) plus, unless
    ``answer=False`` (``tool_choice="required"``), the answer."""
    choices: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {
                "tool": {"const": _function(t).get("name")},
                "arguments": _parameters(t),
            },
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    if answer:
        choices.append(
            {
                "type": "object",
                "properties": {
                    "tool": {"const": NO_TOOL},
                    "answer": {"type": "string", "minLength": 1},
                },
                "required": ["tool", "answer"],
                "additionalProperties": False,
            }
        )
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "tool_call_or_answer",
            "strict": True,
            "schema": {"anyOf": choices},
        },
    }


_CUT_ANSWER = re.compile(r'\A\s*\{\s*"tool"\s*:\s*"none"\s*,\s*"answer"\s*:\s*"(.*)\Z', re.DOTALL)
_PARTIAL_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?\Z")


def _cut_answer(text: str, *, ellipsis: bool = True) -> str | None:
    """The answer of a constrained reply cut off mid-string (``max_tokens`` reached), with
    an ellipsis (``ellipsis``: the answer was cut where the model still wrote; not so a loop
    cut after a whole round); ``None`` when ``text`` is not such a reply."""
    match = _CUT_ANSWER.match(text)
    if match is None:
        return None
    body = match.group(1)
    closed = body.endswith('"') and not body.endswith('\\"')
    body = body[:-1] if closed else _PARTIAL_ESCAPE.sub("", body)
    try:
        answer = json.loads(f'"{body}"')
    except json.JSONDecodeError:
        return None
    if not isinstance(answer, str) or not answer.strip():
        return None
    return answer if closed or not ellipsis else f"{answer.rstrip()}…"


def parse_constrained(
    text: str, names: set[str], *, looped: bool = False
) -> tuple[str, list[ToolCallBlock]] | None:
    """A constrained reply as ``(answer text, tool calls)``; ``None`` when ``text`` is not
    such a reply (a server that ignored ``response_format``: the caller falls back).
    ``looped``: ``text`` was cut after a loop's first round (:mod:`.repetition`), so its
    answer ends where that round does, with no ellipsis."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):  # (RecursionError: "[[[[…" too deep)
        cut = _cut_answer(text, ellipsis=not looped)
        return None if cut is None else (cut, [])
    items = data if isinstance(data, list) else [data]
    answer: list[str] = []
    calls: list[ToolCallBlock] = []
    for item in items:
        if not isinstance(item, Mapping):
            return None
        tool = item.get("tool")
        if tool == NO_TOOL and isinstance(item.get("answer"), str):
            answer.append(item["answer"])
        elif isinstance(tool, str) and tool in names:
            arguments = item.get("arguments")
            args = arguments if isinstance(arguments, Mapping) else {}
            calls.append(
                ToolCallBlock(
                    id=new_call_id(), name=tool, arguments=json.dumps(args, ensure_ascii=False)
                )
            )
        else:
            return None
    return "\n".join(answer), calls


def _canonical(call: ToolCallBlock) -> tuple[str, str]:
    try:
        arguments = json.dumps(call.parsed_arguments(), sort_keys=True, ensure_ascii=False)
    except json.JSONDecodeError:
        arguments = call.arguments.strip()
    return call.name, arguments


def repeats_answered_calls(messages: Sequence[Message], calls: Sequence[ToolCallBlock]) -> bool:
    """Every one of ``calls`` was already made, with the same arguments, since the user last
    wrote, and its result came back without error: the model is looping instead of answering.
    """
    start = next(
        (
            i + 1
            for i in range(len(messages) - 1, -1, -1)
            if messages[i].role == "user" and not messages[i].tool_results
        ),
        0,
    )
    made: dict[str, tuple[str, str]] = {}
    answered: set[tuple[str, str]] = set()
    for message in messages[start:]:
        for call in message.tool_calls:
            made[call.id] = _canonical(call)
        for result in message.tool_results:
            if not result.is_error and result.call_id in made:
                answered.add(made[result.call_id])
    return bool(calls) and all(_canonical(c) in answered for c in calls)
