"""Canonical JSON of tool arguments: the key of single-flight and the cache, and the audit
log's hash. It must stay what ``json.dumps`` with sorted keys writes, so that keys agree
between replicas and across versions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shelfhand.tools.audit import canonical_json

VALUES: list[Any] = [
    {"b": 3, "a": 2},
    {"城市": "上海", "日期": "2024-05-01", "人数": 3},
    {"query": "退货政策 return policy", "top_k": 5, "filters": {"lang": ["zh", "en"]}},
    {"x": 1.5, "y": -0.0, "z": 1e300, "n": None, "t": True, "f": False},
    {"nested": [{"b": [1, 2, {"d": 4, "c": 3}]}, [], {}], "emoji": "👍", "quote": 'a"b\\c\n'},
    {"big": 2**80, "neg": -(2**70)},
    {"nan": float("nan"), "inf": float("inf")},
    [3, 1, 2],
    "只是一个字符串",
    42,
    None,
    {},
]


@pytest.mark.parametrize("value", VALUES)
def test_canonical_json_is_json_dumps_with_sorted_keys_and_no_spaces(value: Any) -> None:
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_json(value) == expected


def test_a_value_json_cannot_encode_is_refused_as_json_dumps_refuses_it() -> None:
    with pytest.raises(TypeError):
        canonical_json({"when": object()})
