"""The web page's own copy of the reasons an answer was replaced, in English and Chinese,
names every reason the answer check gives, with the same words as ``shelfhand ask`` (the page
lacked ``tool_failed`` and showed its code). Read from ``app.js``: no browser needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shelfhand.agent.answer_check import REASONS_ZH
from shelfhand.cli.answers import REASONS

APP_JS = Path(__file__).resolve().parents[2] / "src" / "shelfhand" / "api" / "static" / "app.js"


def table(name: str) -> dict[str, str]:
    """The entries of the object literal ``const NAME = {...};`` of app.js."""
    found = re.search(rf"const {name} = \{{(.*?)\n\}};", APP_JS.read_text(encoding="utf-8"), re.S)
    assert found is not None, name
    return dict(re.findall(r'^\s*(\w+): "([^"]*)",$', found.group(1), re.M))


@pytest.mark.parametrize(("name", "words"), [("REASONS", REASONS), ("REASONS_ZH", REASONS_ZH)])
def test_the_page_words_every_reason_as_the_command_line_does(
    name: str, words: dict[str, str]
) -> None:
    assert table(name) == words
