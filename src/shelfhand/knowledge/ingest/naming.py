"""How the files an ingest is given become sources: one file is one source, whatever folder
above it was named.

A folder ingested is recorded as a *root*: its name stands for that folder (``docs`` ->
``/home/me/tree/docs``, the store's ``root_path``), and its files are sources named
``<folder name>/<path relative to it>`` (stable across runs and machines). A file given on
its own names its folder the same way, and claims it. From then on:

- a folder or file that lies inside a root keeps that root's names (``tree/docs/sub``, with
  ``docs`` a root, is ``docs/sub/...``), and an ingest of it prunes only under that prefix;
- a root met inside a folder walked keeps its own names too (``tree`` around the root
  ``docs`` names ``docs/...`` as before, and prunes what vanished from it);
- a different folder of a root's name is refused (its sources would overwrite, and prune,
  the root's), whether it is given as a folder or one of its files is.

When roots nest, the innermost one names a file. Folders to skip (the workspace, whose index
files change on every ingest) are never walked into, and nothing inside them is named by a
root around them: what lives in a workspace (uploads, a worker's staging copies) is named as
it always was, by its own folder, and claims nothing unless it is a folder; a staging copy of
a client's folder, or of a file the client gave alone, stands for the client's folder
(``root_origins``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from shelfhand.core.errors import KnowledgeError, UnreadableDocumentError
from shelfhand.core.names import is_text, shown_bytes
from shelfhand.knowledge.protocols import KnowledgeStore
from shelfhand.knowledge.reading.readers import listed, walked

logger = logging.getLogger(__name__)

NOT_TEXT_NAME = "its name is not UTF-8 text (rename it)"
"""Why a file whose name holds bytes that are not UTF-8 is not ingested (a name written in
another encoding: Python reads such bytes as lone surrogates, which no store can hold)."""


@dataclass(slots=True)
class SourceNamer:
    """Names the files of one ingest, and refuses a name another folder holds (see the module
    docstring). Nothing is recorded until :meth:`record_claims`, so a refusal changes nothing.

    Args:
        store: Where the roots are recorded.
        skip_folders: Folders never walked into (the workspace).
        root_origins: Folder name -> the folder a staging copy of that name stands for.
    """

    store: KnowledgeStore
    skip_folders: Sequence[Path] = ()
    root_origins: Mapping[str, str] = field(default_factory=dict)
    roots: list[str] = field(default_factory=list)
    """Source prefixes (``docs/``, ``docs/sub/``) walked whole: what vanished under them goes."""
    claimed: dict[str, str] = field(default_factory=dict)
    """Root name -> folder, of this ingest."""
    _skip: frozenset[Path] = frozenset()
    _skip_names: frozenset[str] = frozenset()
    _root_names: set[str] | None = None

    def __post_init__(self) -> None:
        self._skip = frozenset(Path(p).resolve() for p in self.skip_folders)
        self._skip_names = frozenset(p.name for p in self._skip)

    def files(self, given: Path) -> list[tuple[Path, str]]:
        """The files of ``given`` (a file, or a folder walked in sorted order without hidden
        files and folders, unsupported suffixes or skipped folders), each with its source.

        Raises:
            UnreadableDocumentError: ``given`` does not exist, or its folder's name is not
                UTF-8 text.
            KnowledgeError: A different folder of the same name is already indexed.
        """
        path = Path(given)
        folder = path.is_dir()
        if not folder and not path.is_file():  # (a FIFO or a device would block its read)
            what = "not a regular file or folder" if path.exists() else "no such file or directory"
            raise UnreadableDocumentError(f"cannot read {path}: {what}")
        root = path if folder else path.parent
        resolved = root.resolve()
        if folder and resolved in self._skip:
            logger.debug("not ingesting %s: it is the workspace", path)
            return []
        name = resolved.name or "root"
        if not is_text(name):  # (before anything is stored under it)
            raise UnreadableDocumentError(f"cannot read {shown_bytes(root)}: {NOT_TEXT_NAME}")
        origin = self.root_origins.get(name)
        in_skipped = origin is None and any(
            s == resolved or s in resolved.parents for s in self._skip
        )
        identity = Path(origin) if origin else resolved
        prefix = None if in_skipped else self._prefix_within_root(identity)
        if prefix is None:
            prefix = name
            if folder or not in_skipped:  # (an upload's staging folder changes every time)
                self._claim(name, str(identity), whole=folder)
        if not is_text(prefix):
            raise UnreadableDocumentError(f"cannot read {shown_bytes(root)}: {NOT_TEXT_NAME}")
        if not folder:
            return [(path, f"{prefix}/{path.name}")]
        self.roots.append(prefix + "/")
        return self._walk(path, prefix, identity)

    def record_claims(self) -> None:
        """Record the roots this ingest claimed (call once every path was named)."""
        for name, folder in self.claimed.items():
            self.store.set_root_path(name, folder)

    def _known(self, name: str) -> str | None:
        return self.claimed.get(name) or self.store.root_path(name)

    def _claim(self, name: str, folder: str, *, whole: bool) -> None:
        known = self._known(name)
        if known is not None and known != folder:
            harm = "overwrite and remove" if whole else "overwrite"  # (a file prunes nothing)
            raise KnowledgeError(
                f"a different folder named {name!r} is already indexed ({known}); sources are "
                f"named '{name}/...', so {folder} would {harm} its documents. "
                f"Rename one of the folders, or remove the old ones first with "
                f"`shelfhand forget {name}/`"
            )
        self.claimed[name] = folder

    def _prefix_within_root(self, identity: Path) -> str | None:
        """The source prefix of the folder ``identity`` when it is a root or lies inside one
        (the innermost), else ``None``."""
        for folder in (identity, *identity.parents):
            if not folder.name:
                break
            if self._known(folder.name) == str(folder):
                inside = identity.relative_to(folder).as_posix()
                return folder.name if inside == "." else f"{folder.name}/{inside}"
        return None

    def _is_root(self, name: str, identity: Path) -> bool:
        """Whether the folder ``identity`` met in a walk is a root of its own (only names that
        some source starts with are looked up: one query per such folder, not per folder)."""
        if self._root_names is None:
            self._root_names = {s.split("/", 1)[0] for s in self.store.all_sources()}
        if name not in self._root_names and name not in self.claimed:
            return False
        return self._known(name) == str(identity)

    def _walk(self, top: Path, prefix: str, identity: Path) -> list[tuple[Path, str]]:
        found: list[tuple[Path, str]] = []
        prefixes = {top: (prefix, identity)}
        for here_str, dirs, names in os.walk(top):
            here = Path(here_str)
            here_prefix, here_identity = prefixes.pop(here)
            kept = []
            for d in sorted(dirs):
                if not walked(d):
                    continue
                sub = here / d
                if d in self._skip_names and sub.resolve() in self._skip:
                    logger.debug("not walking into %s: it is the workspace", sub)
                    continue
                sub_identity = here_identity / d
                if self._is_root(d, sub_identity):  # a root of its own: its names stay
                    prefixes[sub] = (d, sub_identity)
                    self.roots.append(d + "/")
                else:
                    prefixes[sub] = (f"{here_prefix}/{d}", sub_identity)
                kept.append(d)
            dirs[:] = kept
            found.extend(
                (here / file, f"{here_prefix}/{file}") for file in sorted(names) if listed(file)
            )
        return found
