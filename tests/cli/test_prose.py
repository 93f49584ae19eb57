"""Chinese text in a terminal: a list item's sentence starts beside its mark, lines break
between characters, never before closing punctuation, and keep every character."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from shelfhand.cli.prose import NO_START, Prose, wrap
from support.cli import run_cli

LUOGU = "- 锣鼓经是大陆传统器乐及戏曲里面常用的打击乐记谱方法，以中文字的声音模拟敲击乐的声音 [1]"


def test_a_chinese_item_starts_beside_its_mark_and_wraps_under_its_text() -> None:
    lines = wrap(LUOGU, 40)
    assert lines == [
        "- 锣鼓经是大陆传统器乐及戏曲里面常用的打",
        "  击乐记谱方法，以中文字的声音模拟敲击乐",
        "  的声音 [1]",
    ]
    # rich alone put "-" on a line of its own and the sentence under it
    console = Console(width=40, record=True)
    console.print(Prose(LUOGU))
    assert console.export_text().splitlines() == lines


def test_no_line_starts_with_closing_punctuation() -> None:
    text = "一二三四五六七八九，十一二三四五六七八九。一二三四五六七八九、十"
    for width in range(10, 24):
        lines = wrap(text, width)
        assert all(line[0] not in NO_START for line in lines), (width, lines)
        assert all(cell_len(line) <= width for line in lines), (width, lines)
        assert "".join(lines) == text
    # width 18 holds nine characters: "，" would start the second line, so "九" comes with it
    first, second = wrap(text, 18)[:2]
    assert first == "一二三四五六七八" and second.startswith("九，十")


def test_english_wraps_at_spaces_and_a_long_word_is_cut() -> None:
    assert wrap("- The answer is here and it is long enough to wrap [2]", 24) == [
        "- The answer is here and",
        "  it is long enough to",
        "  wrap [2]",
    ]
    url = "see https://example.com/a/very/long/path/that/fits/nowhere ok"
    lines = wrap(url, 20)
    assert all(cell_len(line) <= 20 for line in lines)
    assert "".join(lines).replace(" ", "") == url.replace(" ", "")


def test_citation_lines_and_short_lines_are_kept_as_they_are() -> None:
    assert wrap("[1] 锣鼓经 (docs/DEV_1.md)", 80) == ["[1] 锣鼓经 (docs/DEV_1.md)"]
    assert wrap("", 10) == [""]
    console = Console(width=40, record=True)
    console.print(Prose("摘自文档：\n\n- 常用的节奏型称为「锣鼓点」。 [1]"))
    assert console.export_text() == "摘自文档：\n\n- 常用的节奏型称为「锣鼓点」。 [1]\n"


_TEXT = st.text(
    alphabet=st.sampled_from(list("锣鼓经声音，。、「」（）abc E-203 ,.[]1\t")), max_size=200
)


@given(_TEXT, st.integers(min_value=8, max_value=60))
def test_wrapping_keeps_every_character_and_the_width(text: str, width: int) -> None:
    lines = wrap(text, width)
    assert all(cell_len(line) <= width for line in lines), lines
    # only spaces change: the breaks drop them, the indents add them
    assert "".join("".join(lines).split()) == "".join(text.split())


def test_ask_prints_a_chinese_extractive_answer_wrapped_under_its_marks(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "锣鼓经.md"
    doc.parent.mkdir()
    doc.write_text(
        "# 锣鼓经\n\n锣鼓经是大陆传统器乐及戏曲里面常用的打击乐记谱方法，以中文字的声音模拟"
        "敲击乐的声音，纪录打击乐的各种不同的演奏方法。常用的节奏型称为「锣鼓点」。\n",
        encoding="utf-8",
    )
    ws = tmp_path / "ws"
    assert run_cli(["ingest", str(doc.parent)], ws).returncode == 0
    done = run_cli(["ask", "锣鼓经常用的节奏型称为什么？"], ws, COLUMNS="40")
    lines = done.stdout.splitlines()
    assert lines[0] == "摘自文档：", done.stdout
    assert lines[1].startswith("- 锣鼓经是大陆传统"), done.stdout
    assert lines[2].startswith("  "), done.stdout
    assert "- 常用的节奏型称为「锣鼓点」。 [1]" in lines, done.stdout
    assert not [line for line in lines if line.strip() == "-" or line[:1] in NO_START]
