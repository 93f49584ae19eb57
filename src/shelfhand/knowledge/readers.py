"""Readers: turn files into :class:`Document` values (DESIGN R1).

One Document per file (Markdown, text, HTML, PDF, DOCX), or one per record (CSV, JSON, JSONL).
Headings become section paths, PDF pages become sections with page numbers, and the text is
cleaned of what extraction leaves behind (page headers and footers, page numbers, lines broken
mid-sentence). ``Document.text`` joins sections with a blank line and every ``Section.start``
is the offset of that section's text in ``Document.text``; chunk offsets rely on it.

Anything that cannot be read raises :class:`UnreadableDocumentError` naming the file and why.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from shelfhand.core.errors import UnreadableDocumentError
from shelfhand.knowledge.types import Document, Section

logger = logging.getLogger(__name__)

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(
    {".md", ".markdown", ".txt", ".html", ".htm", ".pdf", ".docx", ".csv", ".json", ".jsonl"}
)
"""File suffixes (lower case) that :func:`read_file` understands."""

_Part = tuple[str, tuple[str, ...], int | None]  # text, section path, page


@dataclass(frozen=True, slots=True, kw_only=True)
class _Input:
    path: Path
    source: str
    data: bytes
    mtime: float
    tenant_id: str
    permission_tags: tuple[str, ...]

    def fail(self, why: str) -> UnreadableDocumentError:
        return UnreadableDocumentError(f"cannot read {self.path}: {why}")


def read_file(
    path: Path,
    *,
    source: str | None = None,
    tenant_id: str = "default",
    permission_tags: Sequence[str] = (),
    data: bytes | None = None,
) -> list[Document]:
    """Read one file into documents.

    Args:
        path: The file. Its suffix picks the reader (see ``SUPPORTED_SUFFIXES``).
        source: How the file is shown to users and the ``doc_id`` of file documents;
            defaults to ``str(path)``.
        tenant_id: Tenant the documents belong to.
        permission_tags: Roles that may read the documents; Markdown front matter
            ``permissions:`` adds to them.
        data: The file's bytes when the caller already read them (the incremental ingest
            hashes them first); read from ``path`` otherwise.

    Returns:
        One document for a file, or one per record for CSV, JSON and JSONL
        (``doc_id`` = ``source#key``).

    Raises:
        UnreadableDocumentError: The file is missing, empty, of an unsupported type, corrupt,
            encrypted, or its text cannot be decoded.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    reader = _READERS.get(suffix)
    if reader is None:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise UnreadableDocumentError(
            f"cannot read {path}: unsupported file type {suffix or '(no suffix)'!r}; "
            f"supported: {supported}"
        )
    try:
        if data is None:
            data = path.read_bytes()
        mtime = path.stat().st_mtime
    except OSError as exc:
        raise UnreadableDocumentError(f"cannot read {path}: {exc.strerror or exc}") from exc
    item = _Input(
        path=path,
        source=str(path) if source is None else source,
        data=data,
        mtime=mtime,
        tenant_id=tenant_id,
        permission_tags=_merge_tags(permission_tags, ()),
    )
    if not data.strip():
        raise item.fail("the file is empty")
    return reader(item)


def iter_files(paths: Sequence[Path]) -> Iterator[Path]:
    """Yield the readable files under ``paths``.

    Directories are walked recursively in sorted order, skipping hidden files and directories
    (names starting with ``.``) and unsupported suffixes. A file named explicitly is yielded as
    given, whatever its suffix, so that :func:`read_file` reports why it cannot be read.

    Raises:
        UnreadableDocumentError: A path does not exist.
    """
    for given in paths:
        path = Path(given)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                for name in sorted(files):
                    if not name.startswith(".") and Path(name).suffix.lower() in SUPPORTED_SUFFIXES:
                        yield Path(root) / name
        elif path.is_file():
            yield path
        else:
            raise UnreadableDocumentError(f"cannot read {path}: no such file or directory")


def decode_text(data: bytes, *, name: str = "input") -> str:
    """Decode bytes as UTF-8 (with or without BOM), then GB18030; normalise newlines to ``\\n``.

    Raises:
        UnreadableDocumentError: None of the encodings fits, or the bytes look binary.
    """
    text: str | None = None
    for encoding in ("utf-8", "utf-8-sig", "gb18030"):
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError:
            continue
        break
    if text is None or "\x00" in text:
        raise UnreadableDocumentError(
            f"cannot read {name}: the text is not UTF-8 or GB18030 (binary or unknown encoding)"
        )
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


# --- building documents ---------------------------------------------------------------------


def _tidy(text: str) -> str:
    lines = [line.rstrip() for line in text.strip().split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


def _sections(parts: Iterable[_Part]) -> tuple[Section, ...]:
    """Sections with ``start`` offsets matching ``Document.text`` (sections joined by ``\\n\\n``)."""
    out: list[Section] = []
    start = 0
    for raw, section_path, page in parts:
        text = _tidy(raw)
        if not text:
            continue
        out.append(Section(text=text, section_path=section_path, page=page, start=start))
        start += len(text) + 2
    return tuple(out)


def _merge_tags(first: Iterable[str], second: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(t.strip() for t in (*first, *second) if t.strip()))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_document(
    item: _Input,
    *,
    doc_type: str,
    title: str | None,
    parts: Iterable[_Part],
    extra_tags: Iterable[str] = (),
    metadata: dict[str, Any] | None = None,
) -> list[Document]:
    sections = _sections(parts)
    if not sections:
        raise item.fail("no text could be extracted (empty document)")
    return [
        Document(
            doc_id=item.source,
            source=item.source,
            title=(title or "").strip() or item.path.stem,
            doc_type=doc_type,
            sections=sections,
            content_hash=_sha256(item.data),
            permission_tags=_merge_tags(item.permission_tags, extra_tags),
            tenant_id=item.tenant_id,
            updated_at=item.mtime,
            metadata=metadata or {},
        )
    ]


# --- Markdown and text ----------------------------------------------------------------------

_ATX_RE = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(```|~~~)")


def _front_matter(text: str) -> tuple[dict[str, str | list[str]], str]:
    """Split a simple YAML front matter block (``key: value`` and lists) off the text."""
    match = re.match(r"---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|$)", text, re.DOTALL)
    if match is None:
        return {}, text
    meta: dict[str, str | list[str]] = {}
    key = ""
    for line in (match.group(1) or "").split("\n"):
        item = re.match(r"^\s*-\s+(.*)$", line)
        if item and key:
            current = meta.get(key)
            values = current if isinstance(current, list) else []
            meta[key] = [*values, _unquote(item.group(1))]
            continue
        pair = re.match(r"^([A-Za-z_][\w-]*)\s*:\s*(.*)$", line)
        if pair is None:
            continue
        key, value = pair.group(1), pair.group(2).strip()
        if value.startswith("[") and value.endswith("]"):
            meta[key] = [_unquote(v) for v in value[1:-1].split(",") if v.strip()]
        else:
            meta[key] = _unquote(value)
    return meta, text[match.end() :]


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _read_markdown(item: _Input) -> list[Document]:
    meta, body = _front_matter(decode_text(item.data, name=str(item.path)))
    parts: list[_Part] = []
    stack: list[tuple[int, str]] = []
    buffer: list[str] = []
    first_h1: str | None = None
    in_fence = False
    for line in body.split("\n"):
        if _FENCE_RE.match(line):
            in_fence = not in_fence
        heading = None if in_fence else _ATX_RE.match(line)
        if heading is None:
            buffer.append(line)
            continue
        parts.append(("\n".join(buffer), tuple(t for _, t in stack), None))
        buffer = []
        level, title = len(heading.group(1)), heading.group(2).strip()
        if level == 1 and first_h1 is None:
            first_h1 = title
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
    parts.append(("\n".join(buffer), tuple(t for _, t in stack), None))
    meta_title = meta.get("title")
    permissions = meta.get("permissions", [])
    return _file_document(
        item,
        doc_type="markdown",
        title=(meta_title if isinstance(meta_title, str) else None) or first_h1,
        parts=parts,
        extra_tags=[permissions] if isinstance(permissions, str) else permissions,
        metadata={"front_matter": meta} if meta else None,
    )


def _read_text(item: _Input) -> list[Document]:
    text = decode_text(item.data, name=str(item.path))
    return _file_document(item, doc_type="text", title=None, parts=[(text, (), None)])


# --- HTML -----------------------------------------------------------------------------------

_SKIP_TAGS = frozenset({"script", "style", "nav", "header", "footer", "noscript", "template"})
_BLOCK_TAGS = frozenset(
    {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption"}
    | {"figure", "form", "hr", "li", "main", "ol", "p", "pre", "section", "table", "tbody"}
    | {"thead", "tr", "ul"}
)
_HEADING_TAGS = {f"h{n}": n for n in range(1, 7)}


class _HtmlExtractor(HTMLParser):
    """Collects title, headings and paragraphs; drops scripts, styles and page chrome."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.first_h1: str | None = None
        self.parts: list[_Part] = []
        self._skip = 0
        self._in_title = False
        self._heading: tuple[int, list[str]] | None = None
        self._stack: list[tuple[int, str]] = []
        self._paragraphs: list[str] = []
        self._line: list[str] = []
        self._tables = 0
        self._rows: list[str] = []  # rows of the current table, kept as one paragraph

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        elif tag == "table":
            self._end_line()
            self._tables += 1
        elif tag == "title":
            self._in_title = True
        elif tag in _HEADING_TAGS and not self._skip:
            self._end_line()
            self._heading = (_HEADING_TAGS[tag], [])
        elif tag in _BLOCK_TAGS:
            self._end_line()
        elif tag in ("td", "th") and "".join(self._line).strip():
            self._line.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag == "table":
            self._end_line()
            self._tables = max(0, self._tables - 1)
            if not self._tables and self._rows:
                self._paragraphs.append("\n".join(self._rows))
                self._rows = []
        elif tag == "title":
            self._in_title = False
        elif tag in _HEADING_TAGS and self._heading is not None:
            level, pieces = self._heading
            self._heading = None
            text = " ".join("".join(pieces).split())
            if not text:
                return
            self._end_section()
            if level == 1 and self.first_h1 is None:
                self.first_h1 = text
            while self._stack and self._stack[-1][0] >= level:
                self._stack.pop()
            self._stack.append((level, text))
        elif tag in _BLOCK_TAGS:
            self._end_line()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif self._skip:
            return
        elif self._heading is not None:
            self._heading[1].append(data)
        else:
            self._line.append(data)

    def close(self) -> None:
        super().close()
        self._end_section()

    def _end_line(self) -> None:
        text = " ".join("".join(self._line).split())
        self._line = []
        if text:
            (self._rows if self._tables else self._paragraphs).append(text)

    def _end_section(self) -> None:
        self._end_line()
        if self._rows:
            self._paragraphs.append("\n".join(self._rows))
            self._rows = []
        path = tuple(t for _, t in self._stack)
        self.parts.append(("\n\n".join(self._paragraphs), path, None))
        self._paragraphs = []


def _read_html(item: _Input) -> list[Document]:
    parser = _HtmlExtractor()
    parser.feed(decode_text(item.data, name=str(item.path)))
    parser.close()
    title = " ".join(parser.title.split()) or parser.first_h1
    return _file_document(item, doc_type="html", title=title, parts=parser.parts)


# --- PDF ------------------------------------------------------------------------------------

_CJK_CHARS = "\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_CJK_RE = re.compile(f"[{_CJK_CHARS}]")
_PAGE_NUMBER_RE = re.compile(
    r"^(?:[-–—]?\s*\d+\s*[-–—]?"
    r"|\d+\s*/\s*\d+"
    r"|(?:page|p\.|pg\.?)\s*\d+(?:\s*(?:of|/)\s*\d+)?"
    r"|第\s*\d+\s*页(?:\s*[,，/／]?\s*共\s*\d+\s*页)?"
    r"|\d+\s*页)$",
    re.IGNORECASE,
)
_LIST_START_RE = re.compile(
    r"^(?:[-*•·▪●◦]\s|\d{1,2}[.)、]\s?|[（(]\d{1,2}[)）]|step\s+\d|步骤)", re.I
)
_SENTENCE_END = tuple(".!?:;。！？：；")
_EDGE_LINES = 2  # how many lines at the top and bottom of a page may be header or footer


def _shape(line: str) -> str:
    """A line with its numbers blanked, so "Manual · 2" and "Manual · 3" compare equal."""
    return re.sub(r"\d+", "#", " ".join(line.lower().split()))


def clean_pdf_pages(pages: Sequence[str]) -> list[str]:
    """Clean text extracted from PDF pages (one string per page, same length out).

    Removes header and footer lines repeated at the top or bottom of most pages and bare page
    numbers ("3", "- 3 -", "Page 3 of 9", "第 3 页"), then rejoins lines broken mid-sentence:
    English line-end hyphens are removed, CJK lines are joined without a space, other lines
    with one space. Lines that start a list item or follow a sentence end stay separate.
    """
    page_lines = [[ln.strip() for ln in page.split("\n") if ln.strip()] for page in pages]
    repeated_top: set[str] = set()
    repeated_bottom: set[str] = set()
    if len(page_lines) >= 2:
        threshold = max(2, len(page_lines) // 2 + 1)
        top = Counter(s for lines in page_lines for s in {_shape(x) for x in lines[:_EDGE_LINES]})
        bottom = Counter(
            s for lines in page_lines for s in {_shape(x) for x in lines[-_EDGE_LINES:]}
        )
        repeated_top = {s for s, n in top.items() if n >= threshold}
        repeated_bottom = {s for s, n in bottom.items() if n >= threshold}
    cleaned: list[str] = []
    for lines in page_lines:
        body = list(lines)
        for _ in range(_EDGE_LINES + 1):
            if body and (_PAGE_NUMBER_RE.match(body[0]) or _shape(body[0]) in repeated_top):
                body.pop(0)
            if body and (_PAGE_NUMBER_RE.match(body[-1]) or _shape(body[-1]) in repeated_bottom):
                body.pop()
        cleaned.append(_join_lines(body))
    return cleaned


def _width(line: str) -> int:
    return len(line) + len(_CJK_RE.findall(line))  # CJK glyphs are about twice as wide


def _join_lines(lines: list[str]) -> str:
    if not lines:
        return ""
    full = max(_width(line) for line in lines)
    out: list[str] = []
    wrapped = False  # whether the previous physical line ran (nearly) to the right margin
    for line in lines:
        prev = out[-1] if out else ""
        if not prev or _LIST_START_RE.match(line) or prev.endswith(_SENTENCE_END):
            out.append(line)
        elif prev.endswith("-") and len(prev) > 1 and prev[-2].isalpha() and line[0].isalnum():
            # "replace-" + "ment" is one word; "E-" + "203" keeps its hyphen.
            out[-1] = (prev[:-1] if line[0].islower() else prev) + line
        elif line[0].islower() or prev.endswith((",", "，", "、", "(", "（")) or wrapped:
            cjk_join = _CJK_RE.match(prev[-1]) and _CJK_RE.match(line[0])
            out[-1] = prev + ("" if cjk_join else " ") + line
        else:
            out.append(line)
        wrapped = _width(line) >= 0.75 * full
    return "\n".join(out)


def _read_pdf(item: _Input) -> list[Document]:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(item.data))
        encrypted = reader.is_encrypted
    except Exception as exc:
        raise item.fail(f"not a valid PDF or the file is corrupt ({exc})") from exc
    if encrypted:
        try:
            opened = bool(reader.decrypt(""))
        except Exception as exc:
            raise item.fail(f"the PDF is encrypted and could not be opened ({exc})") from exc
        if not opened:
            raise item.fail("the PDF is password-protected; remove the password and try again")
    try:
        raw_pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
        title = info.title if info is not None else None
    except Exception as exc:
        raise item.fail(f"the PDF is corrupt ({exc})") from exc
    if not raw_pages:
        raise item.fail("the PDF has no pages")
    pages = clean_pdf_pages(raw_pages)
    if not any(pages):
        raise item.fail("the PDF has no extractable text (scanned images need OCR first)")
    parts = [(text, (), number) for number, text in enumerate(pages, start=1)]
    return _file_document(
        item,
        doc_type="pdf",
        title=title if isinstance(title, str) else None,
        parts=parts,
        metadata={"page_count": len(pages)},
    )


# --- DOCX -----------------------------------------------------------------------------------

_DOCX_HEADING_RE = re.compile(r"^(?:heading|标题)\s*(\d)$", re.IGNORECASE)


def _read_docx(item: _Input) -> list[Document]:
    import docx
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(item.data))
        blocks = list(document.iter_inner_content())
    except Exception as exc:
        raise item.fail(f"not a valid DOCX file (a Word zip package) ({exc})") from exc
    parts: list[_Part] = []
    stack: list[tuple[int, str]] = []
    paragraphs: list[str] = []
    style_title: str | None = None
    first_h1: str | None = None
    for block in blocks:
        if isinstance(block, Table):
            rows = []
            for row in block.rows:
                cells = list(dict.fromkeys(row.cells))  # merged cells repeat the same object
                rows.append(" | ".join(" ".join(c.text.split()) for c in cells))
            paragraphs.append("\n".join(r for r in rows if r.strip(" |")))
            continue
        text = block.text.strip()
        style = block.style.name if block.style is not None and block.style.name else ""
        heading = _DOCX_HEADING_RE.match(style.strip())
        if not text:
            continue
        if style.strip().lower() == "title" and style_title is None:
            style_title = text
        elif heading is not None:
            level = int(heading.group(1))
            parts.append(("\n\n".join(paragraphs), tuple(t for _, t in stack), None))
            paragraphs = []
            first_h1 = first_h1 or (text if level == 1 else None)
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, text))
        else:
            paragraphs.append(text)
    parts.append(("\n\n".join(paragraphs), tuple(t for _, t in stack), None))
    title = document.core_properties.title or style_title or first_h1
    return _file_document(item, doc_type="docx", title=title, parts=parts)


# --- records: CSV, JSON, JSONL --------------------------------------------------------------

_KEY_FIELDS = ("id", "key", "sku", "order_id")
_TITLE_FIELDS = ("title", "name")


def _pick_field(fields: Sequence[str], wanted: Sequence[str]) -> str | None:
    """The first field, in column order, whose name is one of ``wanted`` (any case)."""
    return next((f for f in fields if f.strip().lower() in wanted), None)


def _scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value, ensure_ascii=False, default=str)


def _records(item: _Input, records: list[dict[str, Any]], doc_type: str) -> list[Document]:
    if not records:
        raise item.fail("no records found (empty document)")
    fields = list(records[0])
    key_field = _pick_field(fields, _KEY_FIELDS) or fields[0]
    title_field = _pick_field(fields, _TITLE_FIELDS)
    seen: set[str] = set()
    documents = []
    for row, record in enumerate(records, start=1):
        text = "\n".join(f"{k}: {_scalar(v)}" for k, v in record.items() if _scalar(v))
        if not text:
            logger.warning("%s: record %d is empty, skipped", item.path, row)
            continue
        key = _scalar(record.get(key_field))
        if not key or key in seen:
            logger.warning("%s: record %d has a missing or repeated %r", item.path, row, key_field)
            key = f"row-{row}"
        seen.add(key)
        canonical = json.dumps(record, ensure_ascii=False, sort_keys=True, default=str)
        title = _scalar(record.get(title_field)) if title_field else ""
        documents.append(
            Document(
                doc_id=f"{item.source}#{key}",
                source=item.source,
                title=title or key,
                doc_type=doc_type,
                sections=_sections([(text, (), None)]),
                content_hash=_sha256(canonical.encode("utf-8")),
                permission_tags=item.permission_tags,
                tenant_id=item.tenant_id,
                updated_at=item.mtime,
                metadata={"key_field": key_field, "key": key, "row": row, "record": record},
            )
        )
    if not documents:
        raise item.fail("every record is empty (empty document)")
    return documents


def _read_csv(item: _Input) -> list[Document]:
    text = decode_text(item.data, name=str(item.path))
    try:
        rows = list(csv.DictReader(io.StringIO(text)))
    except csv.Error as exc:
        raise item.fail(f"invalid CSV ({exc})") from exc
    records = [{k: v for k, v in row.items() if k is not None} for row in rows]
    return _records(item, records, "csv")


def _read_json(item: _Input) -> list[Document]:
    text = decode_text(item.data, name=str(item.path))
    values: list[Any] = []
    try:
        if item.path.suffix.lower() == ".jsonl":
            for number, line in enumerate(text.split("\n"), start=1):
                if line.strip():
                    try:
                        values.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise item.fail(f"invalid JSON on line {number} ({exc.msg})") from exc
        else:
            loaded = json.loads(text)
            values = loaded if isinstance(loaded, list) else [loaded]
    except json.JSONDecodeError as exc:
        raise item.fail(f"invalid JSON ({exc})") from exc
    if not all(isinstance(v, dict) for v in values):
        raise item.fail("expected a list of JSON objects (one record each)")
    return _records(item, values, "json")


_READERS: dict[str, Callable[[_Input], list[Document]]] = {
    ".md": _read_markdown,
    ".markdown": _read_markdown,
    ".txt": _read_text,
    ".html": _read_html,
    ".htm": _read_html,
    ".pdf": _read_pdf,
    ".docx": _read_docx,
    ".csv": _read_csv,
    ".json": _read_json,
    ".jsonl": _read_json,
}
