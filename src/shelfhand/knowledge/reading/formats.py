"""The readers of each format: Markdown, text, HTML, PDF, DOCX, CSV and JSON records.

:func:`parse_in_process` runs the reader of a file's suffix in this process: the parser worker
calls it for PDF, DOCX and HTML (under its time and memory limits), :func:`~shelfhand.knowledge.
reading.readers.read_file` for the other formats.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from html.parser import HTMLParser
from typing import Any

from shelfhand.core.errors import DocumentTooLarge
from shelfhand.knowledge.reading.limits import ReadLimits, check_zip, json_depth_exceeds
from shelfhand.knowledge.reading.pdftext import clean_pdf_pages
from shelfhand.knowledge.reading.source import (
    Part,
    ReadInput,
    decode,
    file_document,
    sections_of,
    sha256_hex,
)
from shelfhand.knowledge.types import Document

logger = logging.getLogger(__name__)

__all__ = ["READERS", "parse_in_process"]

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


def _read_markdown(item: ReadInput) -> list[Document]:
    meta, body = _front_matter(decode(item))
    parts: list[Part] = []
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
    return file_document(
        item,
        doc_type="markdown",
        title=(meta_title if isinstance(meta_title, str) else None) or first_h1,
        parts=parts,
        extra_tags=[permissions] if isinstance(permissions, str) else permissions,
        metadata={"front_matter": meta} if meta else None,
    )


def _read_text(item: ReadInput) -> list[Document]:
    text = decode(item)
    return file_document(item, doc_type="text", title=None, parts=[(text, (), None)])


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
        self.parts: list[Part] = []
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


def _read_html(item: ReadInput) -> list[Document]:
    parser = _HtmlExtractor()
    parser.feed(decode(item))
    parser.close()
    title = " ".join(parser.title.split()) or parser.first_h1
    return file_document(item, doc_type="html", title=title, parts=parser.parts)


# --- PDF ------------------------------------------------------------------------------------


def _read_pdf(item: ReadInput) -> list[Document]:
    import pypdf

    cap = item.limits.max_decompressed_bytes
    apply = getattr(pypdf, "apply_configuration", None)  # pypdf >= 6.5; older: its defaults
    if apply is None:
        return _read_pdf_bounded(item)
    with apply(
        zlib_maximum_output_length=cap,
        lzw_maximum_output_length=cap,
        run_length_maximum_output_length=cap,
        array_based_stream_maximum_output_length=cap,
        maximum_declared_stream_length=cap,
        brotli_maximum_output_length=cap,
        jbig2_maximum_output_length=cap,
        image_maximum_buffer_size=cap,
        stream_decoding_work_maximum_length=cap,
    ):
        return _read_pdf_bounded(item)


def _limit_reached(exc: Exception) -> bool:
    return type(exc).__name__ == "LimitReachedError"


def _read_pdf_bounded(item: ReadInput) -> list[Document]:
    from pypdf import PdfReader

    limits = item.limits
    try:
        reader = PdfReader(io.BytesIO(item.data))
        encrypted = reader.is_encrypted
    except Exception as exc:
        if _limit_reached(exc):
            raise limits.too_large(
                item.name, f"a stream decodes past the limit ({exc})", "max_decompressed_mb"
            ) from exc
        raise item.fail(f"not a valid PDF or the file is corrupt ({exc})") from exc
    if encrypted:
        try:
            opened = bool(reader.decrypt(""))
        except Exception as exc:
            raise item.fail(f"the PDF is encrypted and could not be opened ({exc})") from exc
        if not opened:
            raise item.fail("the PDF is password-protected; remove the password and try again")
    try:
        limits.check_pages(item.name, len(reader.pages))
        raw_pages: list[str] = []
        chars = decoded = 0
        for page in reader.pages:
            # pypdf's text extraction turns a stream over its limits into "" silently; decoding
            # the contents first reports it (and caps the decoded bytes of the whole file)
            contents = page.get_contents()
            decoded += len(contents.get_data()) if contents is not None else 0
            if decoded > limits.max_decompressed_bytes:
                raise limits.too_large(
                    item.name,
                    f"its page streams decode to over {decoded} bytes",
                    "max_decompressed_mb",
                )
            raw_pages.append(page.extract_text() or "")
            chars += len(raw_pages[-1])
            limits.check_chars(item.name, chars)
        info = reader.metadata
        title = info.title if info is not None else None
    except DocumentTooLarge:
        raise
    except Exception as exc:
        if _limit_reached(exc):
            raise limits.too_large(
                item.name, f"a stream decodes past the limit ({exc})", "max_decompressed_mb"
            ) from exc
        raise item.fail(f"the PDF is corrupt ({exc})") from exc
    if not raw_pages:
        raise item.fail("the PDF has no pages")
    pages = clean_pdf_pages(raw_pages)
    if not any(pages):
        raise item.fail("the PDF has no extractable text (scanned images need OCR first)")
    parts = [(text, (), number) for number, text in enumerate(pages, start=1)]
    return file_document(
        item,
        doc_type="pdf",
        title=title if isinstance(title, str) else None,
        parts=parts,
        metadata={"page_count": len(pages)},
    )


# --- DOCX -----------------------------------------------------------------------------------

_DOCX_HEADING_RE = re.compile(r"^(?:heading|标题)\s*(\d)$", re.IGNORECASE)


def _docx_style_names(document: Any) -> Callable[[Any], str]:
    """A paragraph's style name, looked up in a table built once: python-docx's own
    ``paragraph.style`` searches every style per call (2 ms each, minutes on a big file)."""
    from docx.enum.style import WD_STYLE_TYPE

    names = {s.style_id: s.name or "" for s in document.styles if s.style_id}
    default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    fallback = (default.name or "") if default is not None else ""

    def style_name(paragraph: Any) -> str:
        style_id = paragraph._p.style  # the w:pStyle id, or None for the default style
        return names.get(style_id, fallback) if style_id else fallback

    return style_name


def _read_docx(item: ReadInput) -> list[Document]:
    import docx
    from docx.table import Table

    check_zip(item.data, item.name, item.limits)  # a zip bomb is refused before extracting
    try:
        document = docx.Document(io.BytesIO(item.data))
        blocks = list(document.iter_inner_content())
    except MemoryError:
        raise
    except Exception as exc:
        if "allocat" in str(exc).lower():  # lxml reports running out of memory as a parse error
            raise item.limits.too_large(
                item.name, f"parsing ran out of memory ({exc})", "parse_memory_mb"
            ) from exc
        raise item.fail(f"not a valid DOCX file (a Word zip package) ({exc})") from exc
    parts: list[Part] = []
    stack: list[tuple[int, str]] = []
    paragraphs: list[str] = []
    style_title: str | None = None
    first_h1: str | None = None
    style_name = _docx_style_names(document)
    chars = 0
    for block in blocks:
        if isinstance(block, Table):
            rows = []
            for row in block.rows:
                cells = list(dict.fromkeys(row.cells))  # merged cells repeat the same object
                rows.append(" | ".join(" ".join(c.text.split()) for c in cells))
            paragraphs.append("\n".join(r for r in rows if r.strip(" |")))
            chars += len(paragraphs[-1])
            item.limits.check_chars(item.name, chars)  # stop early, not after all the work
            continue
        text = block.text.strip()
        chars += len(text)
        item.limits.check_chars(item.name, chars)
        style = style_name(block)
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
    return file_document(item, doc_type="docx", title=title, parts=parts)


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


def _records(item: ReadInput, records: list[dict[str, Any]], doc_type: str) -> list[Document]:
    if not records:
        raise item.fail("no records found (empty document)")
    item.limits.check_records(item.name, len(records))
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
                sections=sections_of([(text, (), None)]),
                content_hash=sha256_hex(canonical.encode("utf-8")),
                permission_tags=item.permission_tags,
                tenant_id=item.tenant_id,
                updated_at=item.mtime,
                metadata={"key_field": key_field, "key": key, "row": row, "record": record},
            )
        )
    if not documents:
        raise item.fail("every record is empty (empty document)")
    return documents


def _read_csv(item: ReadInput) -> list[Document]:
    text = decode(item)
    try:
        rows = list(csv.DictReader(io.StringIO(text)))
    except csv.Error as exc:
        raise item.fail(f"invalid CSV ({exc})") from exc
    records = [{k: v for k, v in row.items() if k is not None} for row in rows]
    return _records(item, records, "csv")


def _read_json(item: ReadInput) -> list[Document]:
    text = decode(item)
    values: list[Any] = []
    depth = item.limits.max_depth
    too_deep = "nests deeper than the limit"
    try:
        if item.path.suffix.lower() == ".jsonl":
            for number, line in enumerate(text.split("\n"), start=1):
                if not line.strip():
                    continue
                if json_depth_exceeds(line, depth):
                    raise item.limits.too_large(item.name, f"line {number} {too_deep}", "max_depth")
                try:
                    values.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise item.fail(f"invalid JSON on line {number} ({exc.msg})") from exc
                item.limits.check_records(item.name, len(values))
        else:
            if json_depth_exceeds(text, depth):
                raise item.limits.too_large(item.name, f"the JSON {too_deep}", "max_depth")
            loaded = json.loads(text)
            values = loaded if isinstance(loaded, list) else [loaded]
    except json.JSONDecodeError as exc:
        raise item.fail(f"invalid JSON ({exc})") from exc
    except RecursionError:  # only if max_depth is set past what the interpreter can nest
        raise item.limits.too_large(item.name, f"the JSON {too_deep}", "max_depth") from None
    if not all(isinstance(v, dict) for v in values):
        raise item.fail("expected a list of JSON objects (one record each)")
    return _records(item, values, "json")


READERS: dict[str, Callable[[ReadInput], list[Document]]] = {
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


def parse_in_process(item: ReadInput, limits: ReadLimits) -> list[Document]:
    """Run the reader for ``item`` here (the parser worker calls this; see ``read_file``)."""
    return READERS[item.path.suffix.lower()](replace(item, limits=limits))
