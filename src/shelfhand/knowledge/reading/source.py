"""One file being read (:class:`ReadInput`) and what every format's reader shares: decoding
text, tidying it, building sections with offsets and the file's document."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shelfhand.core.errors import DocumentTooLarge, UnreadableDocumentError
from shelfhand.knowledge.reading.limits import ReadLimits
from shelfhand.knowledge.types import Document, Section

__all__ = [
    "Part",
    "ReadInput",
    "decode",
    "decode_text",
    "file_document",
    "merge_tags",
    "sections_of",
    "sha256_hex",
    "tidy",
]

Part = tuple[str, tuple[str, ...], int | None]  # text, section path, page


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadInput:
    path: Path
    source: str
    data: bytes
    mtime: float
    tenant_id: str
    permission_tags: tuple[str, ...]
    limits: ReadLimits

    @property
    def name(self) -> str:
        return str(self.path)

    def fail(self, why: str) -> UnreadableDocumentError:
        return UnreadableDocumentError(f"cannot read {self.path}: {why}")


_BOMS = (  # UTF-32 first: its little-endian BOM starts with UTF-16's
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)


def decode_text(data: bytes, *, name: str = "input", max_chars: int | None = None) -> str:
    """Decode text; normalise newlines to ``\\n``.

    A byte-order mark decides the encoding (UTF-8, UTF-16 or UTF-32, either byte order);
    without one UTF-8 is tried, then GB18030 (which covers GBK and GB2312 Chinese).

    Raises:
        UnreadableDocumentError: None of the encodings fits, or the bytes look binary.
        DocumentTooLarge: The text has more than ``max_chars`` characters.
    """
    text: str | None = None
    candidates = [(enc, len(mark)) for mark, enc in _BOMS if data.startswith(mark)]
    # a BOM that does not decode (binary that happens to start so) falls back to the rest
    for encoding, skip in [*candidates, ("utf-8", 0), ("gb18030", 0)]:
        try:
            text = data[skip:].decode(encoding)
        except UnicodeDecodeError:
            continue
        break
    if text is None or "\x00" in text:
        raise UnreadableDocumentError(
            f"cannot read {name}: the text is not UTF-8, UTF-16 (with BOM) or GB18030 "
            "(binary or unknown encoding)"
        )
    if max_chars is not None and len(text) > max_chars:
        raise DocumentTooLarge(
            f"cannot read {name}: the text has {len(text)} characters (limit max_chars = "
            f"{max_chars}; raise it under [limits] in shelfhand.toml)"
        )
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def decode(item: ReadInput) -> str:
    return decode_text(item.data, name=item.name, max_chars=item.limits.max_chars)


# --- building documents ---------------------------------------------------------------------


def tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.strip().split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


def sections_of(parts: Iterable[Part]) -> tuple[Section, ...]:
    """Sections with ``start`` offsets matching ``Document.text`` (joined by ``\\n\\n``)."""
    out: list[Section] = []
    start = 0
    for raw, section_path, page in parts:
        text = tidy(raw)
        if not text:
            continue
        out.append(Section(text=text, section_path=section_path, page=page, start=start))
        start += len(text) + 2
    return tuple(out)


def merge_tags(first: Iterable[str], second: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.strip() for t in (*first, *second) if t.strip()))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _headings(parts: Sequence[Part]) -> str:
    """The headings of ``parts``, each once, in order: the text of a document that has
    headings and nothing under them (a title, an outline), rather than an empty document."""
    return "\n".join(dict.fromkeys(title for _, path, _ in parts for title in path))


def file_document(
    item: ReadInput,
    *,
    doc_type: str,
    title: str | None,
    parts: Iterable[Part],
    extra_tags: Iterable[str] = (),
    metadata: dict[str, Any] | None = None,
) -> list[Document]:
    parts = list(parts)
    sections = sections_of(parts) or sections_of([(_headings(parts), (), None)])
    if not sections:
        raise item.fail("no text could be extracted (empty document)")
    item.limits.check_chars(item.name, sum(len(s.text) for s in sections))
    item.limits.check_word_chars(item.name, (s.text for s in sections))
    return [
        Document(
            doc_id=item.source,
            source=item.source,
            title=(title or "").strip() or item.path.stem,
            doc_type=doc_type,
            sections=sections,
            content_hash=sha256_hex(item.data),
            permission_tags=merge_tags(item.permission_tags, extra_tags),
            tenant_id=item.tenant_id,
            updated_at=item.mtime,
            metadata=metadata or {},
        )
    ]
