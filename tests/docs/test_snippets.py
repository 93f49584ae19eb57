"""Every ```python and ```bash snippet of the README and the docs site runs.

A snippet that needs something the tests cannot provide (a chat model endpoint, a dataset to
download, a long-running server) is marked on the line before it with
``<!-- not-tested: the reason -->``; it is reported as skipped with that reason (``-rs``).
Bash snippets run in a fresh folder with the ``shelfhand`` of this checkout first on PATH;
``/tmp/`` in a snippet becomes the test's own temporary folder, so parallel runs never share
a workspace.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# docs/reference/ is generated from the code: its code blocks are signatures, not snippets
# docs/benchmarks/ holds the measured figures per topic: its commands are the benchmarks that
# made them (minutes each, some on datasets or peers' venvs) and its history.md is a frozen
# record whose commands name the data folders of their time
PAGES = [
    ROOT / "README.md",
    *sorted(
        p
        for p in (ROOT / "docs").rglob("*.md")
        if "reference" not in p.parts and "benchmarks" not in p.parts
    ),
]
BLOCK = re.compile(
    r"(?:^[ \t]*<!--\s*not-tested:\s*(?P<reason>.*?)\s*-->[ \t]*\n)?"
    r"^(?P<indent>[ \t]*)```(?P<lang>python|bash)[ \t]*\n(?P<code>.*?)^(?P=indent)```",
    re.S | re.M,
)
# what a snippet must not inherit from the machine that runs the tests
SCRUBBED_ENV = ("SHELFHAND_", "OPENAI_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Snippet:
    page: str
    line: int
    lang: str
    code: str
    not_tested: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def snippets() -> list[Snippet]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            found.append(
                Snippet(
                    page=str(page.relative_to(ROOT)),
                    line=text.count("\n", 0, m.start("indent")) + 1,
                    lang=m.group("lang"),
                    code=textwrap.dedent(m.group("code")),
                    not_tested=m.group("reason"),
                )
            )
    return found


SNIPPETS = snippets()


def _params(lang: str) -> list[object]:
    return [
        pytest.param(
            s,
            id=s.id,
            marks=[pytest.mark.skip(reason=f"not-tested: {s.not_tested}")] if s.not_tested else [],
        )
        for s in SNIPPETS
        if s.lang == lang
    ]


def test_the_readme_and_the_docs_have_snippets_of_both_kinds() -> None:
    kinds = {(s.page == "README.md", s.lang) for s in SNIPPETS}
    assert {(True, "python"), (True, "bash"), (False, "python"), (False, "bash")} <= kinds


def test_every_snippet_left_untested_says_why() -> None:
    untested = [s for s in SNIPPETS if s.not_tested is not None]
    assert all(len(s.not_tested or "") >= 10 for s in untested), [s.id for s in untested]
    # every Python snippet runs, except a client of a running server (the marker names it):
    # the marker is for shell that needs a server, a model, a dataset or folders of the
    # reader's own
    clients = [s for s in untested if s.lang == "python"]
    assert all((s.not_tested or "").startswith("needs a running") for s in clients), [
        s.id for s in clients
    ]


@pytest.mark.parametrize("snippet", _params("python"))
def test_python_snippet_runs(
    snippet: Snippet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith(SCRUBBED_ENV):
            monkeypatch.delenv(name)
    code = compile(snippet.code, snippet.id, "exec")
    exec(code, {"__name__": "__snippet__"})


@pytest.mark.slow
@pytest.mark.parametrize("snippet", _params("bash"))
def test_bash_snippet_runs(snippet: Snippet, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "shelfhand"
    wrapper.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -m shelfhand.cli "$@"\n', encoding="utf-8"
    )
    wrapper.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED_ENV)}
    env["PATH"] = f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["HOME"] = str(tmp_path)
    script = snippet.code.replace("/tmp/", f"{tmp_path}/")
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,  # an interactive command ends at once instead of waiting
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (
        f"{snippet.id} exited {result.returncode}\n--- stdout\n{result.stdout[-3000:]}"
        f"\n--- stderr\n{result.stderr[-3000:]}"
    )
