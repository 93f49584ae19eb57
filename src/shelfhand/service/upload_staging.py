"""Receiving an upload: safe file names, limits enforced while reading, a staging folder
per upload, and validation of every staged file with its real reader (steps 1 and 2 of
:mod:`shelfhand.service.uploads`). Nothing here is visible to anyone until the upload is
ingested and kept.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from shelfhand.core.errors import UnreadableDocumentError, UploadRejected
from shelfhand.knowledge.reading.limits import ReadLimits
from shelfhand.knowledge.reading.readers import SUPPORTED_SUFFIXES, read_file

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_NAME_CHARS",
    "IncomingFile",
    "Staged",
    "discard",
    "receive",
    "safe_name",
    "tenant_folder",
    "validate",
]

MAX_NAME_CHARS = 200
MAX_NAME_BYTES = 255
"""A file name's most UTF-8 bytes (a file system's limit: 86 Chinese characters and
``.md`` are 200 characters or fewer but 261 bytes, which failed with 500 when staged)."""
_CHUNK = 1024 * 1024


class IncomingFile(Protocol):
    """What the receiver needs of an uploaded part (Starlette's ``UploadFile`` fits)."""

    filename: str | None

    async def read(self, size: int = -1) -> bytes: ...


def tenant_folder(tenant_id: str) -> str:
    """A folder name for a tenant: readable for plain ids, injective for every id."""
    out = "".join(
        c if c.isascii() and (c.isalnum() or c in "-_") else f"~{ord(c):x}~" for c in tenant_id
    )
    return out or "~empty~"


def safe_name(filename: str | None) -> str:
    """The base name of an uploaded file, or :class:`UploadRejected` (422) if unusable."""
    name = (filename or "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    if not name or name in (".", "..") or name.startswith("."):
        raise UploadRejected(
            f"file name {filename!r} is not usable: give each file a plain name such as faq.md",
            status=422,
            code="invalid_file_name",
        )
    if any(ord(c) < 32 for c in name) or len(name) > MAX_NAME_CHARS:
        raise UploadRejected(
            f"file name {filename!r} has control characters or is longer than "
            f"{MAX_NAME_CHARS} characters",
            status=422,
            code="invalid_file_name",
        )
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise UploadRejected(
            f"file name {filename!r} is longer than {MAX_NAME_BYTES} bytes in UTF-8 "
            f"(a file system's limit)",
            status=422,
            code="invalid_file_name",
        )
    suffix = Path(name).suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        supported = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise UploadRejected(
            f"{name}: unsupported file type {suffix or '(no suffix)'!r}; supported: {supported}",
            status=415,
            code="unsupported_file_type",
        )
    return name


@dataclass(slots=True)
class Staged:
    """Files received for one upload, not yet visible to anyone."""

    folder: Path
    """``.staging/<id>``; removed by :meth:`Uploads.discard`."""
    files: list[tuple[Path, int]]
    """Each staged file (under ``folder/<tenant>/``) with its size in bytes."""


async def receive(
    files: Sequence[IncomingFile],
    tenant_id: str,
    *,
    root: Path,
    max_files: int,
    max_file_bytes: int,
) -> Staged:
    """Stream the parts to ``<root>/.staging/<id>/<tenant>/``, enforcing names, types, count
    and size; anything refused leaves nothing behind.

    Raises:
        UploadRejected: No files, too many, a bad or duplicate name, an unsupported type, or
            a file over ``max_file_bytes``.
    """
    if not files:
        raise UploadRejected(
            "no files: send one or more parts named 'files'", status=422, code="no_files"
        )
    if len(files) > max_files:
        raise UploadRejected(
            f"too many files ({len(files)}); at most {max_files} per upload",
            status=413,
            code="too_many_files",
        )
    names = [safe_name(f.filename) for f in files]
    if len({n.lower() for n in names}) != len(names):
        raise UploadRejected(
            "two files in the upload have the same name", status=422, code="duplicate_name"
        )
    folder = root / ".staging" / uuid.uuid4().hex
    target = folder / tenant_folder(tenant_id)
    target.mkdir(parents=True)
    staged = Staged(folder=folder, files=[])
    try:
        for part, name in zip(files, names, strict=True):
            path = target / name
            size = 0
            with path.open("wb") as out:
                while chunk := await part.read(_CHUNK):
                    size += len(chunk)
                    if size > max_file_bytes:
                        raise UploadRejected(
                            f"{name} is larger than the limit of {max_file_bytes} bytes",
                            status=413,
                            code="file_too_large",
                        )
                    out.write(chunk)
            staged.files.append((path, size))
    except BaseException:
        discard(staged)
        raise
    return staged


def validate(staged: Staged, tenant_id: str, limits: ReadLimits | None = None) -> None:
    """Read every staged file with its reader, within ``limits`` (the defaults when not
    given); one failure rejects the upload (blocking).

    Any failure of a reader is the file's problem, so it is a 422 naming the file, never a
    500 (an unexpected one is logged with its traceback as well).
    """
    problems: list[str] = []
    for path, _ in staged.files:
        try:
            read_file(path, source=path.name, tenant_id=tenant_id, limits=limits)
        except UnreadableDocumentError as exc:
            problems.append(f"{path.name}: {str(exc).replace(str(path), path.name)}")
        except Exception as exc:
            logger.exception("reading the uploaded file %s failed", path.name)
            problems.append(f"{path.name}: cannot be read ({type(exc).__name__}: {exc})")
    if problems:
        raise UploadRejected(
            "nothing was ingested; these files cannot be read: " + "; ".join(problems),
            status=422,
            code=UnreadableDocumentError.code,
        )


def discard(staged: Staged) -> None:
    """Remove the staging folder of an upload (in every case, once it is kept or refused)."""
    shutil.rmtree(staged.folder, ignore_errors=True)
