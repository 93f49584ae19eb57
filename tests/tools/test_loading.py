"""Your own tools named in the ``tools`` setting: imported from a folder or installed, each
mistake a ConfigurationError that names the setting, the name and what is wrong."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shelfhand.core.errors import ConfigurationError
from shelfhand.tools.loading import load_tools
from shelfhand.tools.tool import Tool

_numbers = itertools.count()

TOOLS_MODULE = '''
"""Tools of a desk."""
from shelfhand import UserContext, tool
from shelfhand.tools.builtins import calculator  # imported: not this module's own


@tool(read_only=True)
def order_status(ctx: UserContext, order_id: str) -> dict:
    """Look up one of the caller's orders."""
    return {"order": order_id, "tenant": ctx.tenant}


def weather(city: str) -> str:
    """The weather of a city."""
    return "sunny in " + city


@tool(name="open_ticket", confirm=True)
def ticket(summary: str) -> str:
    """Open a ticket."""
    return "T-1"


BOTH = [order_status, weather]
CONFIG = {"url": "http://example"}
'''


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """A project folder; what the tests import from it leaves ``sys.modules`` and
    ``sys.path`` as they were."""
    modules, path = set(sys.modules), list(sys.path)
    yield tmp_path
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


@pytest.fixture
def module(folder: Path) -> Callable[[str], str]:
    """Write ``text`` as a module of a name no other test uses; its name."""

    def write(text: str) -> str:
        name = f"desk_tools_{next(_numbers)}"
        (folder / f"{name}.py").write_text(text, encoding="utf-8")
        return name

    return write


def names(found: list[tuple[str, Tool[..., Any]]]) -> list[str]:
    return [t.name for _, t in found]


def test_a_module_gives_the_tools_it_defines_in_order_not_those_it_imports(
    folder: Path, module: Callable[[str], str]
) -> None:
    desk = module(TOOLS_MODULE)
    found = load_tools([desk], folder=folder)
    assert names(found) == ["order_status", "open_ticket"]
    assert all(spec == desk for spec, _ in found)
    assert found[1][1].confirm


def test_a_name_gives_a_tool_a_function_or_a_list(
    folder: Path, module: Callable[[str], str]
) -> None:
    desk = module(TOOLS_MODULE)
    found = load_tools([f"{desk}:weather", f"{desk}:order_status"], folder=folder)
    assert names(found) == ["weather", "order_status"]
    weather = found[0][1]
    assert isinstance(weather, Tool) and not weather.read_only  # tool()'s defaults
    assert weather.schema()["function"]["parameters"]["required"] == ["city"]
    assert names(load_tools([f"{desk}:BOTH"], folder=folder)) == ["order_status", "weather"]


def test_a_tool_named_twice_is_offered_once(folder: Path, module: Callable[[str], str]) -> None:
    desk = module(TOOLS_MODULE)
    found = load_tools([desk, f"{desk}:order_status", f"{desk}:BOTH"], folder=folder)
    assert names(found) == ["order_status", "open_ticket", "weather"]


def test_the_folder_is_searched_after_the_installed_packages_and_added_once(
    folder: Path, module: Callable[[str], str]
) -> None:
    desk = module(TOOLS_MODULE)
    load_tools([desk], folder=folder)
    load_tools([desk], folder=folder)
    entries = [p for p in sys.path if Path(p or ".").resolve() == folder.resolve()]
    assert entries == [str(folder.resolve())] and sys.path[-1] == entries[0]


def test_a_module_not_found_names_where_it_was_looked_for(folder: Path) -> None:
    with pytest.raises(ConfigurationError) as e:
        load_tools(["desk_tools_missing"], folder=folder)
    assert str(e.value) == (
        f"tools: no module named 'desk_tools_missing' (looked in {folder} and the installed "
        "packages)"
    )
    with pytest.raises(ConfigurationError) as e:
        load_tools(["json.desk"], folder=folder)
    assert "no module named 'json.desk'" in str(e.value)


@pytest.mark.parametrize(
    ("text", "says", "line"),
    [
        ("import requests_not_installed\n", "ModuleNotFoundError: No module named "
         "'requests_not_installed'", 1),
        ("X = 1\nraise RuntimeError('DESK_DB_URL is not set')\n", "RuntimeError: DESK_DB_URL "
         "is not set", 2),
        ("def f(:\n", "SyntaxError: invalid syntax", 1),
    ],
)  # fmt: skip
def test_a_module_that_fails_to_import_says_what_and_where(
    folder: Path, module: Callable[[str], str], text: str, says: str, line: int
) -> None:
    desk = module(text)
    with pytest.raises(ConfigurationError) as e:
        load_tools([desk], folder=folder)
    assert str(e.value) == (
        f"tools: importing {desk!r} failed: {says} ({folder / desk}.py, line {line})"
    )


def test_a_name_the_module_lacks_gets_the_nearest_one(
    folder: Path, module: Callable[[str], str]
) -> None:
    desk = module(TOOLS_MODULE)
    with pytest.raises(ConfigurationError) as e:
        load_tools([f"{desk}:order_stats"], folder=folder)
    assert (
        str(e.value) == f"tools: {desk!r} has no 'order_stats' (did you mean {desk}:order_status?)"
    )


@pytest.mark.parametrize(
    ("text", "spec", "says"),
    [
        (TOOLS_MODULE, ":CONFIG", "is a dict, not a tool, a function or a list of them"),
        ("X = []\n", ":X", "is an empty list"),
        ("X = 1\n", "", "defines no tools: decorate its functions with @tool"),
        ("from shelfhand.tools.builtins import calculator\n", "", "defines no tools"),
        ("def f(*args):\n    return 1\n", ":f", "a tool needs named parameters"),
        ("from shelfhand import tool\n@tool(external=True)\ndef pay(amount: int) -> int:\n"
         "    return amount\n", "", "'pay', an external tool"),
    ],
)  # fmt: skip
def test_what_is_not_a_tool_is_refused_by_name(
    folder: Path, module: Callable[[str], str], text: str, spec: str, says: str
) -> None:
    desk = module(text)
    with pytest.raises(ConfigurationError) as e:
        load_tools([desk + spec], folder=folder)
    assert str(e.value).startswith(f"tools: {desk + spec!r}") and says in str(e.value)


def test_two_different_tools_of_one_name_are_refused(
    folder: Path, module: Callable[[str], str]
) -> None:
    first, second = module(TOOLS_MODULE), module(TOOLS_MODULE)
    with pytest.raises(ConfigurationError) as e:
        load_tools([first, second], folder=folder)
    assert str(e.value) == (
        f"tools: two different tools are named 'order_status' ({first!r} and {second!r}); "
        "pass name=... to @tool to tell them apart"
    )
