"""Text without word boundaries is bounded like the other reading limits: a blob with no space
(base64, binary read as text) is skipped with the reason, while Chinese without punctuation,
whose every character is a word, is read and chunked as usual."""

from __future__ import annotations

import base64
import random
from pathlib import Path

import pytest

from shelfhand.core.errors import ConfigurationError
from shelfhand.knowledge import KnowledgeBase
from shelfhand.knowledge.reading.limits import ReadLimits

# 40 common characters: a long, plausible run of Chinese with no punctuation at all
_HANZI = "保修期内免费维修投影仪灯泡过热请检查风扇是否正常运转退货需要保留原包装和发票"


def _chinese_without_punctuation(chars: int) -> str:
    rng = random.Random(7)
    return "".join(rng.choice(_HANZI) for _ in range(chars))


def _base64_blob(chars: int) -> str:
    rng = random.Random(11)
    return base64.b64encode(rng.randbytes(chars * 3 // 4)).decode("ascii")


def test_a_base64_blob_is_skipped_with_the_limit_named_and_chinese_without_punctuation_is_read(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "blob.txt").write_text(_base64_blob(300_000), encoding="utf-8")
    (docs / "长文.txt").write_text(_chinese_without_punctuation(20_000), encoding="utf-8")
    (docs / "notes.md").write_text("# Notes\n\nThe lamp overheats: E-203.\n", encoding="utf-8")

    with KnowledgeBase(tmp_path / "ws", None, mode="keyword") as kb:
        report = kb.ingest([docs])
        sources = {Path(s).name for s in (*report.added, *report.updated)}

        assert sources == {"长文.txt", "notes.md"}
        [failure] = report.failed
        assert Path(failure.source).name == "blob.txt"
        assert "without a space" in failure.reason and "max_word_chars = 100000" in failure.reason
        # about 400 tokens (one per character) a chunk, as for any Chinese text
        assert 40 <= report.chunks - 1 <= 70
        assert kb.search("E-203", k=1)[0].chunk.source.endswith("notes.md")


def test_the_limit_is_a_setting_of_limits_and_a_small_one_refuses_a_long_word(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "url.md").write_text("see https://example.com/" + "a" * 600 + " for more\n")
    limits = ReadLimits.from_mapping({"max_word_chars": 500})

    with KnowledgeBase(tmp_path / "ws", None, mode="keyword", read_limits=limits) as kb:
        report = kb.ingest([docs])

    assert not report.added and "max_word_chars = 500" in report.failed[0].reason
    with pytest.raises(ConfigurationError, match="max_word_chars"):
        ReadLimits.from_mapping({"max_word_chars": 0})
