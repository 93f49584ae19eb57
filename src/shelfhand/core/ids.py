"""Cheap unique ids.

``uuid4()`` costs a system call per id and showed up as ~13% of an agent run. Ids here are a
random per-process prefix (64 bits, from the OS) plus a counter: unique across processes for
all practical purposes, and a few hundred nanoseconds each.
"""

from __future__ import annotations

import itertools
import os
import secrets

_prefix = ""
_counter = itertools.count(secrets.randbits(62))


def _reset() -> None:
    """A fresh prefix and counter: at import, and in a forked child, which must not repeat its
    parent's ids (``os.register_at_fork``, so ``new_id`` makes no ``getpid`` system call)."""
    global _prefix, _counter
    _prefix = secrets.token_hex(8)
    # a random start: the first id of a process would otherwise end in sixteen zeros, which
    # reads like a placeholder in logs and traces
    _counter = itertools.count(secrets.randbits(62))


_reset()
os.register_at_fork(after_in_child=_reset)


def new_id() -> str:
    """A 32-hex-character id, unique within and (with overwhelming probability) across processes."""
    return f"{_prefix}{next(_counter):016x}"
