"""Secrets in names and in free text: what the audit log, the logs and the model never see.

- :func:`secret_name`: whether a key (an argument's name, a query parameter, a header) looks
  like it holds a secret: password/passwd, secret, token, api_key/api-key/apikey, authorization,
  credential, in any case.
- :func:`redact_text`: ``text`` (an exception's message, a traceback) with the secrets it
  shows replaced by ``[REDACTED]``: the password of a URL (``https://bob:[REDACTED]@host``), the value
  of a secret-looking ``name=value`` or ``name: value`` (a query string, a header, JSON), and
  the credentials after ``Bearer`` or ``Basic``. An HTTP client's error names the whole URL it
  called, query string included, and a driver's error its connection string.

What is not named as a secret (a token that is a path segment of a URL) cannot be told from
other text and is kept.
"""

from __future__ import annotations

import logging
import re
import traceback

__all__ = [
    "REDACTED",
    "RedactSecrets",
    "redact_log_handlers",
    "redact_text",
    "redacted_traceback",
    "secret_name",
]

REDACTED = "[REDACTED]"

_NAMES = r"passw|secret|token|api[_-]?key|authorization|credential"
# Searched in lower-cased text (:func:`secret_name`): a case-sensitive pattern over
# ``str.lower()`` is about a quarter of the cost of ``re.IGNORECASE`` on a tool call's
# arguments, and every traced tool call masks its arguments.
_SECRET_RE = re.compile(_NAMES)

# scheme://user:password@host: the password up to the last "@" before the host. Anchored at
# "://", not at the scheme: a scheme-like run before it (``a.a.a.a…``) would be scanned again
# from each of its word starts, quadratic in its length (and the scheme is kept as it is).
_URL_PASSWORD = re.compile(r"(://[^\s:/@]*:)[^\s/@]+(@)")
# A secret-looking name, a separator (=, : or ：, the name quoted as in JSON or not), then its
# value: quoted whole, else up to the next separator, quote, bracket or space.
# "Authorization: Bearer x" leaves "Bearer x" to _SCHEME_CREDENTIALS.
# The name is a whole word of [\w.-] holding a secret-looking name: tried only where such a
# word starts (the lookbehind), looked for in it once (the lazy lookahead), then taken whole
# (possessive): linear in the text. Without these anchors a long word (a 10 KB JWT, a blob in
# an error) was scanned from each of its characters: quadratic, seconds for 10 KB.
_NAMED_VALUE = re.compile(
    rf"(?i)(?<![\w.-])(?=[\w.-]*?(?:{_NAMES}))([\w.-]++[\"']?\s*[=:：]\s*)"
    r"(\"[^\"\n]*\"|'[^'\n]*'|(?!(?:bearer|basic)\s)[^\s&\"',;)}\]>]+)"
)
_SCHEME_CREDENTIALS = re.compile(r"(?i)\b(bearer|basic)(\s+)[a-z0-9._~+/=-]+")
_SCHEME_WORD = re.compile(r"(?i)bearer|basic")


def secret_name(text: str) -> bool:
    """Whether ``text`` holds a secret-looking name, in any case (what ``re.IGNORECASE``
    finds: the three letters outside ASCII that it matches to one of the names' letters
    (dotted İ, dotless ı, long ſ) are folded too, and the dot left by lower-casing İ is
    dropped)."""
    folded = text.lower()
    if not folded.isascii():
        folded = folded.replace("\u0307", "").replace("\u0131", "i").replace("\u017f", "s")
    return _SECRET_RE.search(folded) is not None


def redact_text(text: str) -> str:
    """``text`` with the secrets it shows replaced by ``[REDACTED]`` (see the module)."""
    if "://" not in text and not _SCHEME_WORD.search(text) and not secret_name(text):
        return text  # the common case: nothing that could name a secret
    text = _URL_PASSWORD.sub(rf"\1{REDACTED}\2", text)
    text = _NAMED_VALUE.sub(_masked_value, text)
    return _SCHEME_CREDENTIALS.sub(rf"\1\2{REDACTED}", text)


def redacted_traceback(exc: BaseException) -> str:
    """``exc``'s traceback as Python prints it (chained exceptions too), secrets redacted: for
    a log line, where ``exc_info`` would print each message as it is."""
    return redact_text("".join(traceback.format_exception(exc)).rstrip())


def _masked_value(match: re.Match[str]) -> str:
    value = match[2]
    quote = value[0] if value[0] in "\"'" else ""
    return f"{match[1]}{quote}{REDACTED}{quote}"


class RedactSecrets(logging.Filter):
    """A log handler's filter: each record's message and traceback with the secrets they show
    redacted (:func:`redact_text`). Libraries log what they call: httpx logs every request's
    URL at INFO, a token in its query string included, and a team's tools call their
    systems with httpx."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):  # each argument alone first: uvicorn's access
            # formatter reads the request's path from them
            record.args = tuple(redact_text(a) if isinstance(a, str) else a for a in record.args)
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message and record.name != "uvicorn.access":
            record.msg, record.args = redacted, None  # a secret the arguments made together
        if record.exc_text:  # formatted by a handler before this one: formatters reuse it
            record.exc_text = redact_text(record.exc_text)
        elif record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redacted_traceback(record.exc_info[1])  # what formatters print
        return True


def redact_log_handlers(logger: logging.Logger | None = None) -> None:
    """Add :class:`RedactSecrets` to the handlers of ``logger`` (the root by default)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())
