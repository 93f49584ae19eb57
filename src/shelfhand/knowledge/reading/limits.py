"""Reading limits: how much one file may cost to read (bytes, characters, pages, time, memory).

A file over a limit is skipped with :class:`~shelfhand.core.errors.DocumentTooLarge` naming the
limit, like any unreadable file; everything else in the ingest goes on. The limits come from
``[limits]`` in ``<workspace>/shelfhand.toml``::

    [limits]
    max_file_mb = 100            # bytes of the file itself
    max_decompressed_mb = 100    # DOCX zip members, PDF streams once decoded
    max_chars = 40_000_000       # characters of extracted text (a 30 MB text file fits)
    max_records = 100_000        # CSV / JSON / JSONL records (documents) per file
    max_chunks = 50_000          # chunks per file
    max_word_chars = 100_000     # longest stretch without a space or a CJK character
    max_pages = 5_000            # PDF pages
    max_depth = 64               # JSON nesting
    parse_seconds = 60           # PDF, DOCX and HTML are parsed in a worker process ...
    parse_memory_mb = 2048       # ... killed past this time, or refused past this memory

``max_word_chars`` bounds text without word boundaries: a 15 MB blob with no space (base64,
a minified bundle, binary read as text) would otherwise be cut into thousands of chunks that
no question finds. Chinese or Japanese without punctuation is not such text: every CJK
character is a word boundary.

The limits are passed down, never set process-wide: ``App.open_knowledge`` gives the
settings' limits to the :class:`~shelfhand.knowledge.base.KnowledgeBase`, whose ingest hands
them to every :func:`~shelfhand.knowledge.reading.readers.read_file`; a caller that passes none
gets ``ReadLimits()``, the defaults above.
"""

from __future__ import annotations

import functools
import re
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from shelfhand.core.errors import ConfigurationError, DocumentTooLarge, UnreadableDocumentError

__all__ = [
    "ReadLimits",
    "check_zip",
    "json_depth_exceeds",
]

_MIB = 1024 * 1024
_HINT = "raise it under [limits] in shelfhand.toml"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadLimits:
    """Per-file reading limits; see the module docstring for what each bounds."""

    max_file_mb: float = 100
    max_decompressed_mb: float = 100
    max_chars: int = 40_000_000
    max_records: int = 100_000
    max_chunks: int = 50_000
    max_word_chars: int = 100_000
    max_pages: int = 5_000
    max_depth: int = 64
    parse_seconds: float = 60.0
    parse_memory_mb: int = 2048

    def __post_init__(self) -> None:
        bad = [f.name for f in fields(self) if not getattr(self, f.name) > 0]
        if bad:
            raise ConfigurationError(f"[limits] must be positive numbers: {', '.join(bad)}")

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * _MIB)

    @property
    def max_decompressed_bytes(self) -> int:
        return int(self.max_decompressed_mb * _MIB)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> ReadLimits:
        """From a ``[limits]`` table; unknown keys or non-numbers are a ConfigurationError."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigurationError(
                f"unknown key(s) under [limits]: {', '.join(unknown)}; known: {', '.join(known)}"
            )
        out: dict[str, Any] = {}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigurationError(f"[limits] {key} must be a number, not {value!r}")
            out[key] = int(value) if known[key].type == "int" else float(value)
        return cls(**out)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    # -- checks ------------------------------------------------------------------------------

    def too_large(self, name: str, what: str, limit_key: str) -> DocumentTooLarge:
        value = getattr(self, limit_key)
        return DocumentTooLarge(
            f"cannot read {name}: {what} (limit {limit_key} = {value}; {_HINT})"
        )

    def check_file_bytes(self, name: str, size: int) -> None:
        if size > self.max_file_bytes:
            raise self.too_large(name, f"the file has {size} bytes", "max_file_mb")

    def check_chars(self, name: str, chars: int) -> None:
        if chars > self.max_chars:
            raise self.too_large(name, f"the text has {chars} characters", "max_chars")

    def check_records(self, name: str, records: int) -> None:
        if records > self.max_records:
            raise self.too_large(name, f"the file has {records} records", "max_records")

    def check_chunks(self, name: str, chunks: int) -> None:
        if chunks > self.max_chunks:
            raise self.too_large(name, f"the file makes {chunks} chunks", "max_chunks")

    def check_word_chars(self, name: str, texts: Iterable[str]) -> None:
        """Refuse text holding a stretch longer than ``max_word_chars`` without a space or a
        CJK character (one "word" no search can match)."""
        pattern = _wordless(self.max_word_chars)
        for text in texts:
            found = pattern.search(text)
            if found is not None:
                length = len(found.group())
                raise self.too_large(
                    name,
                    f"the text holds {length} characters without a space (base64 or binary "
                    "data, not words)",
                    "max_word_chars",
                )

    def check_pages(self, name: str, pages: int) -> None:
        if pages > self.max_pages:
            raise self.too_large(name, f"the PDF has {pages} pages", "max_pages")


# a word boundary: whitespace, or a CJK character or punctuation mark (each is a word of its own)
_BOUNDARY = (
    r"\s\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
    r"\uff00-\uffef"
)


@functools.lru_cache(maxsize=8)
def _wordless(limit: int) -> re.Pattern[str]:
    # anchored at the start of a stretch (the lookbehind), so a long stretch under the limit is
    # scanned once, not once per character
    return re.compile(rf"(?<![^{_BOUNDARY}])[^{_BOUNDARY}]{{{limit + 1},}}")


def check_zip(data: bytes, name: str, limits: ReadLimits) -> None:
    """Refuse a zip (DOCX) whose members would decompress past the limit — before extracting.

    The declared sizes are checked first; since they can lie, members are then inflated in
    bounded pieces and counted, stopping as soon as the total passes the limit.
    """
    import io

    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UnreadableDocumentError(
            f"cannot read {name}: not a valid DOCX file (a Word zip package) ({exc})"
        ) from exc
    budget = limits.max_decompressed_bytes
    declared = sum(m.file_size for m in members)
    if declared > budget:
        raise limits.too_large(
            name, f"its parts decompress to {declared} bytes", "max_decompressed_mb"
        )
    total = 0
    with archive:
        for member in members:
            try:
                with archive.open(member) as stream:
                    while piece := stream.read(1024 * 1024):
                        total += len(piece)
                        if total > budget:
                            raise limits.too_large(
                                name,
                                f"its parts decompress to more than {budget} bytes",
                                "max_decompressed_mb",
                            )
            except DocumentTooLarge:
                raise
            except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
                # zipfile notices a member longer than declared: a lying header
                raise UnreadableDocumentError(
                    f"cannot read {name}: a part of the DOCX is corrupt ({exc})"
                ) from exc


_JSON_TOKEN_RE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def json_depth_exceeds(text: str, max_depth: int) -> bool:
    """Whether JSON text nests deeper than ``max_depth`` (strings skipped; no recursion).

    Checked before ``json.loads``, whose recursion a deep document would exhaust.
    """
    depth = 0
    for match in _JSON_TOKEN_RE.finditer(text):
        token = match.group()
        if token == "[" or token == "{":
            depth += 1
            if depth > max_depth:
                return True
        elif token == "]" or token == "}":
            depth -= 1
    return False
