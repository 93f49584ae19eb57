"""Connection URLs in messages: the host and database, never the password."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["first_line", "redact_url"]


def redact_url(url: str) -> str:
    """``url`` without its password (for errors and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}" if user else netloc))


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (drivers add pages of context)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
