"""shelfhand with the harness's sync ``add`` declared ``inline=True`` (no worker thread).

``add`` is pure arithmetic, so running it on the event loop is what a user would declare; the
plain ``fw_shelfhand`` adapter keeps the default (sync tools in a worker thread).
"""

from __future__ import annotations

import fw_shelfhand  # type: ignore[import-not-found]
from fw_shelfhand import IS_ASYNC, VERSION, make_runner, schema  # type: ignore[import-not-found]

fw_shelfhand.INLINE[0] = True
NAME = "shelfhand (inline tool)"
NOTES = "as fw_shelfhand, with @tool(inline=True) for the sync add"
__all__ = ["IS_ASYNC", "NAME", "NOTES", "VERSION", "make_runner", "schema"]
