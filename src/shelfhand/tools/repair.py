"""Bounded repair of model-written tool arguments (issue 9, point 5).

Small models often echo the JSON Schema they were shown into their arguments
(``{"query": "E-203", "type": "object", "required": ["query"]}``), wrap the arguments in it
(``{"type": "object", "properties": {"query": "E-203"}}``), or send JSON *text* where an object
belongs (the whole arguments as a JSON string, or an object parameter as a string). These are
mechanical slips, not intent, so :func:`repair_arguments` undoes exactly these and nothing else:

* the keys ``type``, ``required``, ``properties``, ``additionalProperties``, ``$schema`` and
  ``title`` are dropped when the tool declares no parameter of that name;
* arguments that hold *only* such keys, with ``properties`` mapping declared parameter names to
  values, are unwrapped to those values;
* arguments sent as a JSON string holding an object are decoded;
* a declared object (or array) parameter sent as a JSON string is decoded.

Every repair is described in the returned list (the toolkit writes it to the audit record).
Any other undeclared argument is left in place, so validation still rejects it: identity such
as ``user_id`` never comes from arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["SCHEMA_KEYWORDS", "repair_arguments"]

SCHEMA_KEYWORDS = frozenset(
    {"type", "required", "properties", "additionalProperties", "$schema", "title"}
)


def repair_arguments(arguments: Any, parameters: Mapping[str, Any]) -> tuple[Any, list[str]]:
    """The arguments with the slips above undone, and a description of each repair.

    Args:
        arguments: The decoded arguments as the model sent them (any JSON value).
        parameters: The tool's parameter schema (``{"type": "object", "properties": ...}``).

    Returns:
        The repaired arguments (the same object when nothing was repaired) and the repairs.
    """
    repairs: list[str] = []
    if isinstance(arguments, str):
        decoded = _json_or_none(arguments)
        if isinstance(decoded, dict):
            arguments = decoded
            repairs.append("decoded the arguments from a JSON string")
    if not isinstance(arguments, dict):
        return arguments, repairs
    declared = parameters.get("properties")
    declared = declared if isinstance(declared, Mapping) else {}
    echoed = [k for k in arguments if k in SCHEMA_KEYWORDS and k not in declared]
    if not echoed:
        return _decode_object_params(arguments, declared, repairs), repairs
    inner = arguments.get("properties")
    if (
        "properties" not in declared
        and len(echoed) == len(arguments)
        and isinstance(inner, dict)
        and inner
        and all(k in declared for k in inner)
    ):
        repairs.append("unwrapped the arguments from a JSON-schema 'properties' object")
        arguments = dict(inner)
    else:
        arguments = {k: v for k, v in arguments.items() if k not in echoed}
        repairs.extend(f"dropped the JSON-schema keyword {k!r}" for k in echoed)
    return _decode_object_params(arguments, declared, repairs), repairs


def _decode_object_params(
    arguments: dict[str, Any], declared: Mapping[str, Any], repairs: list[str]
) -> dict[str, Any]:
    changed: dict[str, Any] | None = None
    for name, value in arguments.items():
        if not isinstance(value, str) or name not in declared:
            continue
        kinds = _kinds(declared[name])
        decoded = _json_or_none(value)
        if (isinstance(decoded, dict) and "object" in kinds) or (
            isinstance(decoded, list) and "array" in kinds
        ):
            changed = changed if changed is not None else dict(arguments)
            changed[name] = decoded
            repairs.append(f"decoded the argument {name!r} from a JSON string")
    return changed if changed is not None else arguments


def _kinds(schema: Any) -> set[str]:
    """The JSON types a parameter schema allows (a ``$ref`` is a model: an object)."""
    if not isinstance(schema, Mapping):
        return set()
    if "$ref" in schema:
        return {"object"}
    kind = schema.get("type")
    kinds = {kind} if isinstance(kind, str) else {k for k in kind or () if isinstance(k, str)}
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key) or ():
            kinds |= _kinds(option)
    if "string" in kinds:
        return set()  # a string parameter keeps its string, even one that looks like JSON
    return kinds


def _json_or_none(text: str) -> Any:
    text = text.strip()
    if not text or text[0] not in "{[":
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None
