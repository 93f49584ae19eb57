"""Every link of BENCHMARKS.md to a section of the docs leads to a heading that exists (the
page outside the docs site, which ``mkdocs build --strict`` does not check: eight of its
links led nowhere, written with a hyphen that the en dash between two times does not leave
in the anchor)."""

from __future__ import annotations

import re
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\((docs/[^)#\s]+\.md)#([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings, as the docs site's ``toc`` extension makes them."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slugify(title, "-") for title in HEADING.findall(text)}


def test_every_section_benchmarks_md_links_to_exists() -> None:
    links = LINK.findall((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8"))
    assert links  # (the pattern still finds them)
    missing = [f"{page}#{anchor}" for page, anchor in links if anchor not in anchors(ROOT / page)]
    assert not missing, missing
