"""Recover tool calls that a server returned as message text.

Small local models (llama.cpp, Ollama, vLLM without a tool parser) often answer a tool call
with *text* instead of a native ``tool_calls`` entry::

    ```json
    {"name": "lookup_order", "arguments": {"order_id": "A-1001"}}
    ```

    <tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}</tool_call>

    {"type": "function", "name": "lookup_order", "parameters": {"order_id": "A-1001"}}

:func:`recover_tool_calls` turns such text back into
:class:`~shelfhand.core.messages.ToolCallBlock` values — but only for tools that were offered,
and only from JSON that has the shape of a call. Prose that happens to contain braces, JSON
that names an unknown tool inside prose, and JSON inside code fences of other languages are left
alone.

A call to a tool that was *not* offered is still recovered when the model plainly meant a call:
inside ``<tool_call>`` tags, or when the whole reply is nothing but call-shaped JSON (bare or
fenced) with a tool-like name and an arguments key. The agent then answers it with an
"unknown tool" error result for the model to read, instead of showing the JSON to the user.
Arguments that are not an object (a list, a number) are recovered as written, for the toolkit
to reject with a message the model can act on.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Collection, Container
from typing import Any

from shelfhand.core.messages import ToolCallBlock

__all__ = ["json_as_text", "json_reply", "recover_tool_calls"]

_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)```", re.DOTALL)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
# Some chat templates put a marker in front of bare JSON calls (Mistral, Llama 3.1).
_MARKER_BEFORE = re.compile(r"(?:\[TOOL_CALLS\]|<\|python_tag\|>)\s*\Z")
_LEADING_MARKER = re.compile(r"\A(?:\[TOOL_CALLS\]|<\|python_tag\|>)\s*")
_FENCE_LANGUAGES = frozenset({"", "json", "json5", "tool_call", "tool_calls", "tool_code"})

_NAME_KEYS = ("name", "function", "tool", "tool_name")
_ARG_KEYS = ("arguments", "parameters", "args", "input")
_ALLOWED_EXTRA = frozenset({"type", "id"})

_DECODER = json.JSONDecoder()
# a short one-line name, spaces allowed: small models write "Order Management" for a tool
_TOOL_LIKE = re.compile(r"[^\W\d][\w .:-]{0,63}")


class _AnyToolName:
    """Accepts any tool-like name: for replies that can only be a call (see module doc)."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _TOOL_LIKE.fullmatch(name) is not None


_ANY_NAME = _AnyToolName()

_Call = tuple[str, str, str | None]  # name, arguments JSON text, id given by the model
_Span = tuple[int, int, list[_Call]]


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _call_from(obj: Any, names: Container[str], *, require_args: bool) -> _Call | None:
    """One call from a JSON object, or ``None`` when it is not shaped like a call."""
    if not isinstance(obj, dict):
        return None
    nested = obj.get("function")
    if isinstance(nested, dict) and set(obj) <= {"function", "type", "id", "index"}:
        # The OpenAI wire shape: {"type": "function", "function": {"name": ..., ...}}.
        call = _call_from(nested, names, require_args=require_args)
        if call is not None and call[2] is None and isinstance(obj.get("id"), str):
            return call[0], call[1], obj["id"]
        return call
    name_keys = [k for k in _NAME_KEYS if k in obj]
    arg_keys = [k for k in _ARG_KEYS if k in obj]
    if len(name_keys) != 1 or len(arg_keys) > 1:
        return None
    if set(obj) - set(name_keys) - set(arg_keys) - _ALLOWED_EXTRA:
        return None  # other keys: this is data that mentions a tool, not a call
    name = obj[name_keys[0]]
    if not isinstance(name, str) or name not in names:
        return None
    if not arg_keys and require_args:
        return None
    args = obj[arg_keys[0]] if arg_keys else None
    if args is None:
        arguments = "{}"
    elif isinstance(args, str):
        # Some models double-encode the arguments; keep the JSON text as sent.
        arguments = args if args.strip() else "{}"
    else:
        # An object, or a list/number the toolkit will reject with a message for the model.
        arguments = json.dumps(args, ensure_ascii=False)
    call_id = obj.get("id")
    return name, arguments, call_id if isinstance(call_id, str) and call_id else None


def _calls_from_value(value: Any, names: Container[str], *, require_args: bool) -> list[_Call]:
    """All calls in one JSON value; empty unless *every* element is a known call."""
    if isinstance(value, dict) and set(value) == {"tool_calls"}:
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    calls: list[_Call] = []
    for item in items:
        call = _call_from(item, names, require_args=require_args)
        if call is None:
            return []
        calls.append(call)
    return calls


def _decode_prefix(snippet: str) -> tuple[list[Any], int | None]:
    """The JSON values at the start of ``snippet`` (separated by whitespace or commas), and
    where the first one that does not decode starts (None when every value decoded)."""
    values: list[Any] = []
    pos, end = 0, len(snippet)
    while True:
        while pos < end and (snippet[pos].isspace() or snippet[pos] in ",;"):
            pos += 1
        if pos >= end:
            return values, None
        try:
            value, pos = _DECODER.raw_decode(snippet, pos)
        except (json.JSONDecodeError, RecursionError):  # (a model's "[[[[…" too deep)
            return values, pos
        values.append(value)


def _decode_all(snippet: str) -> list[Any] | None:
    """Every JSON value in ``snippet`` (separated by whitespace or commas), or ``None``."""
    values, failed = _decode_prefix(snippet)
    return values or None if failed is None else None


def _structure(snippet: str) -> tuple[list[bool], bool]:
    """For each character of JSON text, whether it stands outside a string (so a bracket there
    is structure, not text); and whether a string is still open at the end."""
    flags: list[bool] = []
    in_string = escaped = False
    for ch in snippet:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            flags.append(False)
        else:
            in_string = ch == '"'
            flags.append(not in_string)
    return flags, in_string


def _open_closers(snippet: str) -> tuple[str, bool] | None:
    """The closers still owed at the end of ``snippet``, a JSON object that may end early
    (innermost first), and whether a string is still open there; None when a bracket is
    closed out of turn or it does not start as an object."""
    if not snippet.startswith("{"):
        return None
    stack: list[str] = []
    flags, in_string = _structure(snippet)
    for ch, structural in zip(snippet, flags, strict=True):
        if not structural:
            continue
        if ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and (not stack or stack.pop() != ch):
            return None
    return "".join(reversed(stack)), in_string


def _cut_off(tail: str) -> bool:
    """Whether ``tail`` is the start of a JSON object that ends early (a reply cut off by
    ``max_tokens``): brackets still open at its end, none closed out of turn."""
    owed = _open_closers(tail)
    return owed is not None and bool(owed[0])


def _paren_closed(snippet: str) -> str | None:
    """``snippet`` with a final ``)`` that stands for the closers still owed replaced by them
    (``{"name": "x", "arguments": {...})``, measured with Qwen2.5-Coder-0.5B); else None."""
    body = snippet.rstrip()
    if not body.endswith(")"):
        return None
    owed = _open_closers(body[:-1])
    if owed is None or not owed[0] or owed[1]:
        return None
    return body[:-1] + owed[0]


def _complete_values(snippet: str) -> str | None:
    """``snippet`` up to a last value that was cut off (see :func:`_cut_off`), when the values
    before it are complete JSON; else None."""
    values, failed = _decode_prefix(snippet)
    if failed is None or not values or not _cut_off(snippet[failed:]):
        return None
    return snippet[:failed]


def _calls_from_snippet(
    snippet: str, names: Container[str], *, require_args: bool = False
) -> list[_Call]:
    fence = _FENCE.fullmatch(snippet.strip())
    if fence is not None:
        if fence.group(1).lower() not in _FENCE_LANGUAGES:
            return []
        snippet = fence.group(2)
    values = _decode_all(snippet)
    if values is None:
        return []
    calls: list[_Call] = []
    for value in values:
        found = _calls_from_value(value, names, require_args=require_args)
        if not found:
            return []
        calls.extend(found)
    return calls


def _inside(pos: int, regions: list[tuple[int, int]]) -> int | None:
    for start, end in regions:
        if start <= pos < end:
            return end
    return None


def _bare_spans(text: str, names: Container[str], excluded: list[tuple[int, int]]) -> list[_Span]:
    spans: list[_Span] = []
    pos = 0
    while True:
        brace, bracket = text.find("{", pos), text.find("[", pos)
        candidates = [i for i in (brace, bracket) if i >= 0]
        if not candidates:
            return spans
        start = min(candidates)
        skip_to = _inside(start, excluded)
        if skip_to is not None:
            pos = skip_to
            continue
        if text[start] == "[" and not text[start + 1 :].lstrip().startswith("{"):
            pos = start + 1  # "[1]" citations and plain lists are never calls
            continue
        try:
            value, end = _DECODER.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            pos = start + 1
            continue
        calls = _calls_from_value(value, names, require_args=True)
        if calls:
            marker = _MARKER_BEFORE.search(text, 0, start)
            spans.append((marker.start() if marker else start, end, calls))
        # Skip the whole value either way: a call nested inside other JSON is data.
        pos = end


def _drop_stray_closers(snippet: str) -> str | None:
    """``snippet`` without the closing brackets that close nothing open (outside strings), or
    None when there are none or a bracket is still open at the end: the one repair of
    call-shaped JSON that cannot change what the call says."""
    if not snippet.startswith("{"):
        return None
    out: list[str] = []
    stack: list[str] = []
    dropped = False
    flags, in_string = _structure(snippet)
    for ch, structural in zip(snippet, flags, strict=True):
        if structural and ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif structural and ch in "}]":
            if not stack or stack[-1] != ch:
                dropped = True
                continue
            stack.pop()
        out.append(ch)
    return "".join(out) if dropped and not stack and not in_string else None


def recover_tool_calls(
    text: str,
    tool_names: Collection[str],
    *,
    make_id: Callable[[], str] | None = None,
) -> tuple[str, list[ToolCallBlock]]:
    """Recover tool calls written as text, for known tools only.

    Recognised: ``<tool_call>{...}</tool_call>`` tags (Qwen), fenced ```` ```json ````
    blocks, and bare JSON objects or lists of them. The name may be under ``name``,
    ``function``, ``tool`` or ``tool_name``; the arguments under ``arguments``,
    ``parameters``, ``args`` or ``input`` (an object or a JSON string). A list is recovered
    only when every element is a call to a known tool. Text inside ``<think>`` blocks and
    code fences of other languages is never read. A recovered call whose name is an offered
    tool's spelt differently (``"Retrieve"``, ``"query stock"`` for ``query_stock``: case,
    spaces and hyphens aside) is given that tool's name; other unknown names stay as written
    (the toolkit answers them "unknown tool").

    Args:
        text: The assistant's message text.
        tool_names: The names of the tools that were offered.
        make_id: Makes ids for recovered calls (default ``call_<random hex>``); used only
            when the JSON carries no ``id`` of its own.

    Returns:
        The text with the recovered JSON removed (stripped), and the calls in text order.
        When nothing is recovered the text comes back unchanged.
    """
    if not tool_names or not text or not any(c in text for c in "{["):
        return text, []
    names = tool_names if isinstance(tool_names, (set, frozenset, dict)) else set(tool_names)
    spans: list[_Span] = []
    excluded: list[tuple[int, int]] = [m.span() for m in _THINK.finditer(text)]

    for match in _TAG.finditer(text):
        if _inside(match.start(), excluded) is not None:
            continue
        # A tag says "this is a call": unknown names are recovered too (and refused later).
        calls = _calls_from_snippet(match.group(1), _ANY_NAME)
        if calls:
            spans.append((match.start(), match.end(), calls))
        excluded.append(match.span())

    for match in _FENCE.finditer(text):
        if _inside(match.start(), excluded) is not None:
            continue
        if match.group(1).lower() in _FENCE_LANGUAGES:
            calls = _calls_from_snippet(match.group(2), names)
            if calls:
                spans.append((match.start(), match.end(), calls))
        excluded.append(match.span())

    spans.extend(_bare_spans(text, names, excluded))
    if not spans:
        # A reply that is nothing but call-shaped JSON is a call, whatever tool it names.
        whole = _LEADING_MARKER.sub("", text.strip())
        calls = _calls_from_snippet(whole, _ANY_NAME, require_args=True)
        if not calls and (balanced := _drop_stray_closers(whole)) is not None:
            # ``{"name": "retrieve", "arguments": {...}]}``: a stray bracket (measured with
            # Qwen2.5-Coder-0.5B in native mode) must not put the call in front of the user
            calls = _calls_from_snippet(balanced, _ANY_NAME, require_args=True)
        if not calls and (complete := _complete_values(whole)) is not None:
            # the same call written over and over until ``max_tokens`` cut the last one off
            # (measured, same model): the complete ones are calls, the cut one is dropped
            calls = _calls_from_snippet(complete, _ANY_NAME, require_args=True)
        if not calls and (closed := _paren_closed(whole)) is not None:
            calls = _calls_from_snippet(closed, _ANY_NAME, require_args=True)
        if not calls:
            return text, []
        spans.append((0, len(text), calls))

    spans.sort(key=lambda span: span[0])
    spelled = _spellings(names, tool_names)
    new_id = make_id or _new_call_id
    pieces: list[str] = []
    blocks: list[ToolCallBlock] = []
    cursor = 0
    for start, end, calls in spans:
        pieces.append(text[cursor:start])
        cursor = end
        for name, arguments, given_id in calls:
            if name not in names:  # "Retrieve", "query stock": the tool the model meant
                name = spelled.get(_spelling(name), name)
            blocks.append(ToolCallBlock(id=given_id or new_id(), name=name, arguments=arguments))
    pieces.append(text[cursor:])
    remaining = re.sub(r"(?<![ \t])[ \t]+\n", "\n", "".join(pieces))
    remaining = re.sub(r"\n{3,}", "\n\n", remaining).strip()
    if remaining and not remaining.strip("}]"):
        remaining = ""  # stray closing brackets left behind by a recovered call
    return remaining, blocks


def _spelling(name: str) -> str:
    """A tool name as small models misspell it: case, spaces and hyphens do not count."""
    return re.sub(r"[\s\-]+", "_", name.strip()).lower()


def _spellings(names: Container[str], tool_names: Collection[str]) -> dict[str, str]:
    """Spelling → offered tool name, for the spellings that name exactly one tool."""
    by_spelling: dict[str, list[str]] = {}
    for tool in tool_names:
        by_spelling.setdefault(_spelling(tool), []).append(tool)
    return {key: found[0] for key, found in by_spelling.items() if len(found) == 1}


_WHOLE_FENCE = re.compile(r"\A```[ \t]*(?:json5?)?[ \t]*\n?(.*?)```\Z", re.DOTALL | re.IGNORECASE)


def json_reply(text: str) -> Any | None:
    """The JSON value when a reply is nothing but a JSON object or array (bare or in one
    ```` ```json ```` fence), else ``None``: a small model that echoes a tool result as its
    answer (``{"name": "Lumen X1", "stock": 12}``) instead of writing one."""
    body = text.strip()
    fenced = _WHOLE_FENCE.match(body)
    if fenced is not None:
        body = fenced.group(1).strip()
    if not body.startswith(("{", "[")):
        return None
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict | list) else None


def json_as_text(value: Any, indent: str = "") -> str:
    """A JSON value as plain lines for a person: ``key: value`` per field, ``- item`` per
    element, nested values indented."""
    if isinstance(value, dict):
        if not value:
            return f"{indent}(nothing)"
        lines = []
        for key, item in value.items():
            if isinstance(item, dict | list) and item:
                lines.append(f"{indent}{key}:\n{json_as_text(item, indent + '  ')}")
            else:
                lines.append(f"{indent}{key}: {_scalar(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return f"{indent}(nothing)"
        lines = []
        for item in value:
            if isinstance(item, dict | list) and item:
                nested = json_as_text(item, indent + "  ")
                lines.append(f"{indent}- {nested.lstrip()}")
            else:
                lines.append(f"{indent}- {_scalar(item)}")
        return "\n".join(lines)
    return f"{indent}{_scalar(value)}"


def _scalar(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return "(nothing)"
    return str(value)
