"""Who may see, replace or delete an uploaded source: permission tags apply to writes too.

Reading follows the store's rule (same tenant, and no tags, a tag among the caller's roles,
or ``admin``/``system``). Writing — replacing or deleting through the API — needs what
reading needs, or ownership (the caller uploaded it last), or admin; and only uploaded sources
(with a registry record in the caller's tenant) are writable through the API at all: sources
ingested from the command line are the operator's.

A replacement keeps the source's tags unless the request sets tags, and even then it keeps
every old tag the writer does not hold (only admins may drop those): nobody can make a
document public, or move it out of a role's reach, without holding that role.

The API answers 404 for a source the caller may not read (its existence is not revealed) and
403 for one it may read but not change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from shelfhand.core.context import PRIVILEGED_ROLES, UserContext

__all__ = ["Access", "StoredSource", "access", "merge_reports", "replacement_tags"]

Access = Literal["none", "read", "write"]

StoredSource = tuple[set[str], set[str]]
"""A stored source's tenants and permission tags (see ``KnowledgeBase.source_access``)."""


class Owned(Protocol):
    """What the check needs of a registry record."""

    @property
    def tenant_id(self) -> str: ...

    @property
    def uploaded_by(self) -> str: ...


def _privileged(user: UserContext) -> bool:
    return not PRIVILEGED_ROLES.isdisjoint(user.roles)


def access(user: UserContext, stored: StoredSource | None, record: Owned | None) -> Access:
    """What ``user`` may do with one source.

    Args:
        stored: The source's tenants and tags in the store (``None``: nothing stored).
        record: The upload registry's record (``None``: not uploaded through the API).
    """
    readable = False
    if stored is not None:
        tenants, tags = stored
        if user.tenant_id not in tenants:
            return "none"
        readable = _privileged(user) or not tags or not tags.isdisjoint(user.roles)
    if record is None or record.tenant_id != user.tenant_id:
        return "read" if readable else "none"
    if readable or _privileged(user) or record.uploaded_by == user.user_id:
        return "write"
    return "none"


def replacement_tags(
    user: UserContext, old: set[str], requested: Sequence[str] | None
) -> tuple[str, ...]:
    """The tags a replaced source gets: its old ones unless ``requested``, and never fewer
    than the old tags ``user`` does not hold (admins may set any)."""
    if requested is None:
        return tuple(sorted(old))
    if _privileged(user):
        return tuple(requested)
    kept = [t for t in sorted(old) if t not in user.roles and t not in requested]
    return (*requested, *kept)


def merge_reports(reports: Sequence[Any]) -> Any:
    """One report of several ingest calls (tuples joined, counts and seconds added)."""
    first = reports[0]
    if len(reports) == 1:
        return first
    merged: dict[str, Any] = {}
    for f in dataclasses.fields(first):
        values = [getattr(r, f.name) for r in reports]
        if isinstance(values[0], tuple):
            merged[f.name] = tuple(v for value in values for v in value)
        elif isinstance(values[0], int | float) and not isinstance(values[0], bool):
            merged[f.name] = sum(values)
        else:
            merged[f.name] = values[-1]
    return dataclasses.replace(first, **merged)
