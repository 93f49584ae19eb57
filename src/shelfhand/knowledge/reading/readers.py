"""Readers: turn files into :class:`Document` values (docs/design.md R1).

One Document per file (Markdown, text, HTML, PDF, DOCX), or one per record (CSV, JSON, JSONL).
Headings become section paths, PDF pages become sections with page numbers, and the text is
cleaned of what extraction leaves behind (page headers and footers, page numbers, lines broken
mid-sentence). ``Document.text`` joins sections with a blank line and every ``Section.start``
is the offset of that section's text in ``Document.text``; chunk offsets rely on it.

Anything that cannot be read raises :class:`UnreadableDocumentError` naming the file and why;
a file over a reading limit (:mod:`shelfhand.knowledge.reading.limits`) raises its subclass
:class:`DocumentTooLarge`. PDF, DOCX and HTML are parsed in a worker process that enforces the
time and memory limits (:mod:`shelfhand.knowledge.reading.parse_worker`); text, Markdown, CSV
and JSON are read here, bounded by the character, record and nesting limits.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from stat import S_ISREG

from shelfhand.core.errors import UnreadableDocumentError
from shelfhand.knowledge.reading.formats import READERS
from shelfhand.knowledge.reading.limits import ReadLimits
from shelfhand.knowledge.reading.pdftext import clean_pdf_pages
from shelfhand.knowledge.reading.source import ReadInput, decode_text, merge_tags
from shelfhand.knowledge.types import Document

logger = logging.getLogger(__name__)

__all__ = [
    "SUPPORTED_SUFFIXES",
    "WORKER_SUFFIXES",
    "clean_pdf_pages",
    "decode_text",
    "iter_files",
    "listed",
    "read_bounded",
    "read_file",
    "walked",
]

SUPPORTED_SUFFIXES: frozenset[str] = frozenset(
    {".md", ".markdown", ".txt", ".html", ".htm", ".pdf", ".docx", ".csv", ".json", ".jsonl"}
)
"""File suffixes (lower case) that :func:`read_file` understands."""

WORKER_SUFFIXES: frozenset[str] = frozenset({".html", ".htm", ".pdf", ".docx"})
"""Formats parsed in the worker process (time and memory limits enforced there)."""


def read_file(
    path: Path,
    *,
    source: str | None = None,
    tenant_id: str = "default",
    permission_tags: Sequence[str] = (),
    data: bytes | None = None,
    limits: ReadLimits | None = None,
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
        limits: Reading limits; the defaults (``ReadLimits()``) when not given.

    Returns:
        One document for a file, or one per record for CSV, JSON and JSONL
        (``doc_id`` = ``source#key``).

    Raises:
        UnreadableDocumentError: The file is missing, empty, of an unsupported type, corrupt,
            encrypted, or its text cannot be decoded.
        DocumentTooLarge: The file is over a reading limit (the message names it).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    reader = READERS.get(suffix)
    if reader is None:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise UnreadableDocumentError(
            f"cannot read {path}: unsupported file type {suffix or '(no suffix)'!r}; "
            f"supported: {supported}"
        )
    limits = ReadLimits() if limits is None else limits
    if data is None:
        data, mtime = _read_bounded(path, limits)
    else:
        limits.check_file_bytes(str(path), len(data))
        try:
            mtime = path.stat().st_mtime
        except OSError as exc:
            raise UnreadableDocumentError(f"cannot read {path}: {exc.strerror or exc}") from exc
    item = ReadInput(
        path=path,
        source=str(path) if source is None else source,
        data=data,
        mtime=mtime,
        tenant_id=tenant_id,
        permission_tags=merge_tags(permission_tags, ()),
        limits=limits,
    )
    if not data.strip():
        raise item.fail("the file is empty")
    if suffix in WORKER_SUFFIXES:
        from shelfhand.knowledge.reading.parse_worker import WorkerUnavailable, shared_worker

        try:
            docs: list[Document] = shared_worker().parse(item, limits, str(path))
            return docs
        except WorkerUnavailable as exc:  # size limits still hold; time and memory do not
            logger.warning("%s; parsing %s in this process", exc, path)
    return reader(item)


def read_bounded(path: Path, limits: ReadLimits) -> bytes:
    """The bytes of the regular file ``path``, never more than ``limits`` allow: a file over
    ``max_file_mb`` is refused before it is read (and one that grows past it while read is
    refused after reading only that much), and a pipe, device or socket named like a document
    (``notes.md`` made with ``mkfifo``, a link to ``/dev/zero``) is refused without reading
    (a pipe would wait for a writer forever, a device never end).

    Raises:
        UnreadableDocumentError: ``path`` is missing, unreadable or not a regular file.
        DocumentTooLarge: It is over ``max_file_mb``.
    """
    return _read_bounded(path, limits)[0]


def _read_bounded(path: Path, limits: ReadLimits) -> tuple[bytes, float]:
    """:func:`read_bounded`, with the file's modification time (from the same ``fstat``)."""
    name = str(path)
    try:
        # non-blocking: opening a pipe for reading would wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UnreadableDocumentError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as file:
        try:
            info = os.fstat(fd)
            if not S_ISREG(info.st_mode):
                raise UnreadableDocumentError(
                    f"cannot read {path}: not a regular file (a pipe, a device or a socket)"
                )
            limits.check_file_bytes(name, info.st_size)
            data = file.read(limits.max_file_bytes + 1)
        except OSError as exc:
            raise UnreadableDocumentError(f"cannot read {path}: {exc.strerror or exc}") from exc
    limits.check_file_bytes(name, len(data))
    return data, info.st_mtime


def walked(name: str) -> bool:
    """Whether a folder walk enters the folder, or looks at the file, named ``name`` (not
    hidden)."""
    return not name.startswith(".")


def listed(name: str) -> bool:
    """Whether a folder walk reads the file named ``name`` (:func:`walked`, and of a supported
    suffix)."""
    return walked(name) and Path(name).suffix.lower() in SUPPORTED_SUFFIXES


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
                dirs[:] = sorted(d for d in dirs if walked(d))
                for name in sorted(files):
                    if listed(name):
                        yield Path(root) / name
        elif path.is_file():
            yield path
        else:
            raise UnreadableDocumentError(f"cannot read {path}: no such file or directory")
