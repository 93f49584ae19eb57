"""JSON Schema for a function's parameters, from its type hints and docstring (docs/design.md T1, T3).

:func:`function_schema` inspects a function once and returns a :class:`FunctionSchema`: the
model-facing description and parameter schema (OpenAI function-calling format), a pydantic
model that validates the model's arguments, and the plan for calling the function (which
parameters are injected context, which are positional-only).

Parameters annotated with :class:`~shelfhand.core.context.RunContext` or
:class:`~shelfhand.core.context.UserContext` (or ``Optional`` of either) are *injected*: they
are absent from the schema, so the model can neither see nor set them.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import InvalidArgumentError

__all__ = ["FunctionSchema", "function_schema", "parse_docstring"]

Injection = Literal["run", "user"]

_ARGS_HEADERS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
_OTHER_HEADERS = {
    "returns", "return", "yields", "yield", "raises", "raise", "examples", "example", "notes",
    "note", "warnings", "warning", "see also", "attributes", "todo", "references",
}  # fmt: skip
_HEADER_RE = re.compile(r"^([A-Za-z][A-Za-z ]*?)\s*:\s*$")
_NUMPY_RULE_RE = re.compile(r"^-{3,}\s*$")
_GOOGLE_ARG_RE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_FIELD_RE = re.compile(r"^:(\w+)(?:\s+([^:]+?))?\s*:\s*(.*)$")
_NUMPY_ARG_RE = re.compile(r"^\*{0,2}(\w+)\s*(?::.*)?$")

# Keywords a parameter schema may carry in OpenAI strict mode; others are dropped there.
_STRICT_KEYWORDS = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
    "$ref", "$defs", "description", "items", "pattern", "format", "multipleOf", "maximum",
    "exclusiveMaximum", "minimum", "exclusiveMinimum", "minItems", "maxItems",
}  # fmt: skip
_SCHEMA_MAPS = ("properties", "$defs", "patternProperties")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "not", "contains")
_SCALARS = {"string", "integer", "number", "boolean"}
_TYPE_ONLY_KEYWORDS = {"enum", "const", "anyOf", "oneOf", "allOf", "$ref", "not"}


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionSchema:
    """Everything :class:`~shelfhand.tools.tool.Tool` needs, computed once per function."""

    description: str
    """The docstring summary (the text before ``Args:`` / ``:param``)."""
    parameters: dict[str, Any]
    """JSON Schema of the model-visible parameters."""
    arguments_model: type[BaseModel]
    """Validates the model's arguments (extra keys are refused)."""
    fields: tuple[tuple[str, str], ...]
    """``(model field name, parameter name)`` pairs of the model-visible parameters."""
    injected: tuple[tuple[str, Injection], ...]
    """Parameters filled by the framework: ``run`` gets the RunContext, ``user`` its user."""
    positional: tuple[str, ...]
    """Positional-only parameter names in order (passed positionally, the rest by keyword)."""
    null_means_default: frozenset[str]
    """Strict mode: parameters made nullable only for the schema; ``null`` means "use default"."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Docstring:
    description: str
    params: Mapping[str, str]


def parse_docstring(doc: str | None) -> Docstring:
    """Split a docstring into its description and per-parameter descriptions.

    Google (``Args:``), reST (``:param name:``) and numpy (``Parameters`` / ``----``) styles
    are understood. The description is the text before the first section or field list.
    """
    if not doc:
        return Docstring(description="", params={})
    lines = inspect.cleandoc(doc).splitlines()
    params: dict[str, str] = {}
    description: list[str] = []
    i = 0
    seen_section = False
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        header = _section_header(lines, i)
        if header is not None:
            seen_section = True
            name, body_start = header
            end = _section_end(lines, body_start)
            if name in _ARGS_HEADERS:
                numpy = body_start == i + 2
                params.update(_parse_arg_lines(lines[body_start:end], numpy=numpy))
            i = end
            continue
        field = _REST_FIELD_RE.match(stripped)
        if field is not None:
            seen_section = True
            end = i + 1
            while end < len(lines) and lines[end].startswith((" ", "\t")):
                end += 1
            kind, target, text = field.groups()
            if kind in ("param", "parameter", "arg", "argument", "key", "keyword") and target:
                pname = target.split()[-1]
                extra = " ".join(x.strip() for x in lines[i + 1 : end])
                params[pname] = " ".join(p for p in (text.strip(), extra) if p)
            i = end
            continue
        if not seen_section:
            description.append(line)
        i += 1
    return Docstring(description="\n".join(description).strip(), params=params)


def _section_header(lines: list[str], i: int) -> tuple[str, int] | None:
    """``(name, first body line)`` if ``lines[i]`` opens a Google or numpy section."""
    line = lines[i]
    if line[:1].isspace():
        return None
    m = _HEADER_RE.match(line)
    if m and m.group(1).lower() in _ARGS_HEADERS | _OTHER_HEADERS:
        return m.group(1).lower(), i + 1
    name = line.strip().lower()
    if (
        name in _ARGS_HEADERS | _OTHER_HEADERS
        and i + 1 < len(lines)
        and _NUMPY_RULE_RE.match(lines[i + 1].strip())
    ):
        return name, i + 2
    return None


def _section_end(lines: list[str], start: int) -> int:
    end = start
    while end < len(lines):
        line = lines[end]
        if line.strip() and not line[:1].isspace() and _section_header(lines, end) is not None:
            break
        if line.strip() and not line[:1].isspace() and _REST_FIELD_RE.match(line):
            break
        end += 1
    return end


def _parse_arg_lines(body: list[str], *, numpy: bool) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    entry_indent: int | None = None
    current: str | None = None
    for line in body:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if entry_indent is None:
            entry_indent = indent
        text = line.strip()
        if indent <= entry_indent:
            m = (_NUMPY_ARG_RE if numpy else _GOOGLE_ARG_RE).match(text)
            if m is None:
                current = None
                continue
            current = m.group(1)
            out[current] = [] if numpy else [m.group(2).strip()]
        elif current is not None:
            out[current].append(text)
    return {name: " ".join(p for p in parts if p) for name, parts in out.items()}


def function_schema(func: Callable[..., Any], *, strict: bool = False) -> FunctionSchema:
    """Inspect ``func`` once and build its schema, argument model and call plan.

    Raises:
        TypeError: a type hint cannot be resolved, or the function takes ``*args``/``**kwargs``.
        ValueError: ``strict`` is set but a parameter cannot be expressed in OpenAI strict
            mode (a free-form mapping, or a parameter without a type).
    """
    try:
        hints = typing.get_type_hints(_hint_target(func), include_extras=True)
    except Exception as exc:
        raise TypeError(
            f"cannot resolve the type hints of {_describe(func)}: {type(exc).__name__}: {exc}; "
            "define the types it uses at module level"
        ) from exc
    doc = parse_docstring(inspect.getdoc(func))
    signature = inspect.signature(func)

    definitions: dict[str, Any] = {}
    fields: list[tuple[str, str]] = []
    injected: list[tuple[str, Injection]] = []
    positional: list[str] = []
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(
                f"{_describe(func)} takes *{param.name}; a tool needs named parameters "
                "so the model knows what to send"
            )
        if param.kind is param.POSITIONAL_ONLY:
            positional.append(param.name)
        annotation = hints.get(param.name, Any)
        injection = _injection(annotation)
        if injection is not None:
            injected.append((param.name, injection))
            continue
        field_name = _field_name(param.name)
        definitions[field_name] = _field_definition(param, annotation, doc.params.get(param.name))
        fields.append((field_name, param.name))

    model = create_model(  # type: ignore[call-overload]
        f"{getattr(func, '__name__', 'tool')}_arguments",
        __config__=ConfigDict(
            extra="forbid", protected_namespaces=(), arbitrary_types_allowed=True
        ),
        **definitions,
    )
    parameters = _clean_schema(model.model_json_schema())
    null_means_default: frozenset[str] = frozenset()
    if strict:
        parameters, null_means_default = _strict_schema(parameters, func)
    return FunctionSchema(
        description=doc.description,
        parameters=parameters,
        arguments_model=model,
        fields=tuple(fields),
        injected=tuple(injected),
        positional=tuple(positional),
        null_means_default=null_means_default,
    )


def _hint_target(func: Any) -> Any:
    """What ``get_type_hints`` can read: the function under a partial, a callable's ``__call__``."""
    while isinstance(func, functools.partial):
        func = func.func
    if inspect.isfunction(func) or inspect.ismethod(func) or inspect.isclass(func):
        return func
    call = getattr(func, "__call__", None)  # noqa: B004 - callable objects
    return call if call is not None else func


def _describe(func: Callable[..., Any]) -> str:
    return f"function {getattr(func, '__qualname__', repr(func))}"


def _injection(annotation: Any) -> Injection | None:
    """``run`` / ``user`` when the annotation is a context type (or Optional / Annotated of it)."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) != 1:
            return None
        annotation = members[0]
    if isinstance(annotation, type):
        if issubclass(annotation, RunContext):
            return "run"
        if issubclass(annotation, UserContext):
            return "user"
    return None


def _field_name(name: str) -> str:
    """A pydantic-safe field name; the schema still shows ``name`` (as the alias)."""
    if name.startswith("_") or hasattr(BaseModel, name):
        return f"p_{name.lstrip('_')}_"
    return name


def _field_definition(
    param: inspect.Parameter, annotation: Any, doc_description: str | None
) -> tuple[Any, Any]:
    description = doc_description or None
    if get_origin(annotation) is Annotated:
        base, *metadata = get_args(annotation)
        texts = [m for m in metadata if isinstance(m, str)]
        rest = [m for m in metadata if not isinstance(m, str)]
        if texts:
            description = texts[0]
        if any(isinstance(m, FieldInfo) and m.description for m in rest):
            description = None  # the Annotated Field's own description wins
        annotation = Annotated[(base, *rest)] if rest else base  # type: ignore[valid-type]
    default = param.default
    alias = param.name if _field_name(param.name) != param.name else None
    if isinstance(default, FieldInfo):
        info = copy.copy(default)
        if description and not info.description:
            info.description = description
        if alias:
            info.alias = alias
        return annotation, info
    # Only pass what is set: an explicit ``description=None`` would erase an Annotated Field's.
    options: dict[str, Any] = {}
    if description:
        options["description"] = description
    if alias:
        options["alias"] = alias
    return annotation, Field(
        default=... if default is inspect.Parameter.empty else default, **options
    )


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$defs`` (kept only for recursive models), drop titles, tidy nullables."""
    defs = schema.pop("$defs", {})
    recursive = {name for name in defs if _refers_to(defs[name], name, defs, set())}
    cleaned = _clean_node(schema, defs, recursive)
    if recursive:
        cleaned["$defs"] = {name: _clean_node(defs[name], defs, recursive) for name in recursive}
    cleaned.setdefault("properties", {})
    if not cleaned.get("required"):
        cleaned.pop("required", None)
    return cleaned


def _refers_to(node: Any, target: str, defs: dict[str, Any], seen: set[str]) -> bool:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if name == target:
                return True
            if name not in seen and name in defs:
                seen.add(name)
                if _refers_to(defs[name], target, defs, seen):
                    return True
        return any(_refers_to(v, target, defs, seen) for k, v in node.items() if k != "$ref")
    if isinstance(node, list):
        return any(_refers_to(v, target, defs, seen) for v in node)
    return False


def _clean_node(node: dict[str, Any], defs: dict[str, Any], recursive: set[str]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.rsplit("/", 1)[-1] not in recursive:
        # Siblings of a $ref (a description, a default) win over the referenced definition.
        resolved = defs[ref.rsplit("/", 1)[-1]]
        node = {**resolved, **{k: v for k, v in node.items() if k != "$ref"}}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: _clean_node(v, defs, recursive) for k, v in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_clean_node(v, defs, recursive) for v in value]
        elif key in _SCHEMA_VALUES and isinstance(value, dict):
            out[key] = _clean_node(value, defs, recursive)
        else:
            out[key] = value
    if "const" in out and "enum" not in out:
        # ``enum`` of one value is understood by more providers than ``const``.
        out["enum"] = [out.pop("const")]
    return _merge_nullable(out)


def _merge_nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [{type: X}, {type: null}]`` → ``type: [X, "null"]`` where that is exact."""
    variants = node.get("anyOf")
    if not isinstance(variants, list) or len(variants) != 2:
        return node
    nulls = [v for v in variants if v == {"type": "null"}]
    others = [v for v in variants if v != {"type": "null"}]
    if len(nulls) != 1 or len(others) != 1:
        return node
    other = others[0]
    # Only scalars: nullable objects and arrays stay ``anyOf``, which every provider accepts.
    if other.get("type") not in _SCALARS or _TYPE_ONLY_KEYWORDS & other.keys():
        return node
    merged = {k: v for k, v in node.items() if k != "anyOf"}
    for key, value in other.items():
        merged.setdefault(key, value)
    merged["type"] = [other["type"], "null"]
    return merged


def _is_nullable(node: Mapping[str, Any]) -> bool:
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_is_nullable(v) for v in node.get("anyOf", ()))


def _strict_schema(
    parameters: dict[str, Any], func: Callable[..., Any]
) -> tuple[dict[str, Any], frozenset[str]]:
    """OpenAI strict rules: all properties required, objects closed, optionals nullable."""
    optional = set(parameters["properties"]) - set(parameters.get("required", ()))
    properties: dict[str, Any] = {}
    null_means_default: set[str] = set()
    for name, prop in parameters["properties"].items():
        prop = _strict_node(prop, f"{_describe(func)}, parameter {name!r}")
        if name in optional and not _is_nullable(prop):
            null_means_default.add(name)
            prop = _nullable(prop)
        properties[name] = prop
    out: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    if "$defs" in parameters:
        out["$defs"] = {
            k: _strict_node(v, f"{_describe(func)}, model {k!r}")
            for k, v in parameters["$defs"].items()
        }
    return out, frozenset(null_means_default)


def _strict_node(node: dict[str, Any], where: str) -> dict[str, Any]:
    out = {k: v for k, v in node.items() if k in _STRICT_KEYWORDS}
    if "prefixItems" in node:
        # Strict mode has no positional item schemas; the argument model still checks them.
        unique: list[Any] = []
        for item in node["prefixItems"]:
            if item not in unique:
                unique.append(item)
        out["items"] = unique[0] if len(unique) == 1 else {"anyOf": unique}
    kind = out.get("type")
    is_object = kind == "object" or (isinstance(kind, list) and "object" in kind)
    if is_object:
        if "properties" not in out:
            raise InvalidArgumentError(
                f"{where}: strict mode cannot express a free-form mapping; use a pydantic "
                "model or a dataclass, or set strict=False"
            )
        out["properties"] = {k: _strict_node(v, where) for k, v in out["properties"].items()}
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    elif not ({"type", "anyOf", "enum", "const", "$ref"} & out.keys()):
        raise InvalidArgumentError(
            f"{where}: strict mode needs a type for every parameter and field"
        )
    if isinstance(out.get("items"), dict):
        out["items"] = _strict_node(out["items"], where)
    if "anyOf" in out:
        out["anyOf"] = [_strict_node(v, where) for v in out["anyOf"]]
    return out


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    kind = node.get("type")
    if kind in _SCALARS and not _TYPE_ONLY_KEYWORDS & node.keys():
        return {**node, "type": [kind, "null"]}
    description = node.get("description")
    inner = {k: v for k, v in node.items() if k != "description"}
    out: dict[str, Any] = {"anyOf": [inner, {"type": "null"}]}
    if description:
        out["description"] = description
    return out
