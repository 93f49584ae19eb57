"""Built-in tools: current time, a safe calculator and a guarded HTTP GET (docs/design.md T6).

``retrieve`` is not here: retrieval becomes a tool in ``agent/`` (tools know nothing of the
knowledge layer).
"""

from __future__ import annotations

import ast
import ipaddress
import logging
import math
import operator
import socket
import unicodedata
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import anyio
import httpx

from shelfhand.core.context import UserContext
from shelfhand.core.errors import (
    ToolArgumentError,
    ToolError,
    ToolPermissionError,
    TransientToolError,
)
from shelfhand.tools.tool import Tool, ToolOutput, tool

__all__ = ["builtin_tools", "calculator", "current_time", "http_target", "make_http_get"]

logger = logging.getLogger(__name__)


# --- current time ------------------------------------------------------------------------------
# no cache_ttl, so never cached (the answer changes every second); inline: no I/O
@tool(read_only=True, inline=True)
def current_time(timezone: str = "UTC") -> str:
    """Get the current date and time in a time zone.

    Args:
        timezone: IANA time zone name, e.g. UTC, Asia/Shanghai, Europe/Berlin.
    """
    try:
        zone = ZoneInfo(timezone.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolArgumentError(
            f"unknown time zone {timezone!r}; use an IANA name such as 'UTC', "
            "'Asia/Shanghai' or 'America/New_York'"
        ) from None
    now = datetime.now(zone)
    return f"{now.isoformat(timespec='seconds')} ({now:%A}, {zone.key})"


# --- calculator -------------------------------------------------------------------------------
_MAX_EXPRESSION_CHARS = 500
_MAX_INT_BITS = 4096
_MAX_ROUND_DIGITS = 100

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _round(x: float, digits: int = 0) -> float:
    if not isinstance(digits, int) or abs(digits) > _MAX_ROUND_DIGITS:
        raise ValueError("round() takes a whole number of digits up to 100")
    return round(x, digits)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "abs": abs,
    "round": _round,
    "min": min,
    "max": max,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "floor": math.floor,
    "ceil": math.ceil,
}


_SYNTAX_NAMES = {
    "Attribute": "attribute access",
    "Subscript": "indexing",
    "Lambda": "a lambda",
    "List": "a list",
    "Tuple": "a tuple",
    "Dict": "a dict",
    "Set": "a set",
    "Compare": "a comparison",
    "BoolOp": "and/or",
    "IfExp": "if/else",
    "NamedExpr": "assignment",
    "BinOp": "this operator",
    "UnaryOp": "this operator",
    "JoinedStr": "an f-string",
    "ListComp": "a comprehension",
    "GeneratorExp": "a generator",
}


class _CalcError(Exception):
    """An expression the calculator refuses or cannot evaluate."""


def _check_size(value: Any) -> Any:
    if isinstance(value, complex):
        raise _CalcError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        raise _CalcError("the result is too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise _CalcError("the result is too large or not a number")
    return value


def _power(base: Any, exponent: Any) -> Any:
    # Estimate before computing: 9**9**9 would otherwise run for minutes.
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and abs(base) > 1
        and (abs(base).bit_length() - 1) * exponent > _MAX_INT_BITS
    ):
        raise _CalcError("the result is too large")
    return base**exponent


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise _CalcError(f"only numbers are allowed, not {node.value!r}")
        return _check_size(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        return _check_size(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise _CalcError(f"unknown name {node.id!r}; constants: {', '.join(_CONSTANTS)}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
            shown = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise _CalcError(f"unknown function {shown!r}; functions: {', '.join(_FUNCTIONS)}")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise _CalcError("functions take plain positional arguments only")
        args = [_evaluate(a) for a in node.args]
        return _check_size(_FUNCTIONS[node.func.id](*args))
    kind = _SYNTAX_NAMES.get(type(node).__name__, type(node).__name__)
    raise _CalcError(f"{kind} is not allowed; use numbers, operators and the listed functions")


# inline: bounded pure computation (exponent and size limits below)
@tool(read_only=True, idempotent=True, inline=True)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly, instead of calculating in your head.

    Supports numbers, + - * / // % ** (or ^), parentheses, the functions sqrt, abs, round,
    min, max, log, log10, exp, sin, cos, tan, floor, ceil and the constants pi, e, tau.

    Args:
        expression: The expression to evaluate, built from the numbers of the request.
    """
    # Normalise full-width digits and operators (common in Chinese text) and ^ for power.
    text = unicodedata.normalize("NFKC", expression)
    text = text.replace("×", "*").replace("÷", "/").replace("^", "**").strip()
    if not text:
        raise ToolArgumentError("the expression is empty")
    if len(text) > _MAX_EXPRESSION_CHARS:
        raise ToolArgumentError(f"the expression is longer than {_MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
        value = _evaluate(tree)
    except SyntaxError:
        raise ToolArgumentError(f"cannot parse {expression!r} as arithmetic") from None
    except _CalcError as exc:
        raise ToolArgumentError(f"cannot evaluate {expression!r}: {exc}") from None
    except ZeroDivisionError:
        raise ToolArgumentError(f"cannot evaluate {expression!r}: division by zero") from None
    except OverflowError:
        raise ToolArgumentError(
            f"cannot evaluate {expression!r}: the result is too large"
        ) from None
    except (ValueError, TypeError) as exc:
        raise ToolArgumentError(f"cannot evaluate {expression!r}: {exc}") from None
    except (RecursionError, MemoryError):
        raise ToolArgumentError(f"cannot evaluate {expression!r}: nested too deeply") from None
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.15g}"
    return str(value)


# --- HTTP GET ---------------------------------------------------------------------------------
_MAX_REDIRECTS = 5
_TEXT_TYPES = ("json", "xml", "javascript", "x-www-form-urlencoded", "csv", "yaml", "markdown")


def _allowed_address(text: str) -> bool:
    ip = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


# "no such name" answers: the caller's bad input, not an outage (never retried, never counted
# against a circuit breaker); other resolver errors (EAI_AGAIN ...) are transient.
_NO_SUCH_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


async def _resolve(host: str, port: int) -> list[str]:
    if host.lower().rstrip(".").endswith(".invalid"):  # RFC 6761: never resolves
        raise ToolError(f"host {host!r} does not exist (.invalid names never resolve)")
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in _NO_SUCH_HOST:
            raise ToolError(f"host {host!r} does not exist (DNS: {exc.strerror})") from None
        raise TransientToolError(f"cannot resolve host {host!r}: {exc}") from None
    except OSError as exc:
        raise TransientToolError(f"cannot resolve host {host!r}: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _is_text(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return not kind or kind.startswith("text/") or any(t in kind for t in _TEXT_TYPES)


def http_target(arguments: Mapping[str, Any], user: UserContext) -> str:
    """``http_get``'s circuit-breaker target: the URL's host and port, for the caller's tenant.

    A caller chooses the whole URL, so a failing host (or a failing path on a healthy host)
    only ever opens the breaker for that host *and* that tenant: never another host, never
    another tenant.
    """
    try:
        url = httpx.URL(str(arguments.get("url", "")).strip())
        port = url.port or (443 if url.scheme == "https" else 80)
        where = f"{url.host.lower() or '(no host)'}:{port}"
    except (httpx.InvalidURL, TypeError, ValueError):
        where = "(invalid URL)"
    return f"{where} (tenant {user.tenant_id})"


def make_http_get(
    *,
    allow_private: bool = False,
    max_bytes: int = 1_000_000,
    timeout: float = 10.0,
    allowed_hosts: Collection[str] = (),
) -> Tool[..., Any]:
    """Build a read-only ``http_get(url)`` tool.

    Only ``http``/``https`` URLs are fetched. Every address a host resolves to is checked, on
    the first request and on each redirect (followed here, at most 5): private, loopback,
    link-local, reserved and multicast addresses are refused unless ``allow_private``. The
    connection goes to the checked address (no second DNS lookup to rebind).

    Args:
        allow_private: Allow non-public addresses (intranet services, tests).
        max_bytes: Stop reading the body after this many bytes and say it was truncated.
        timeout: Seconds for the whole fetch, redirects included.
        allowed_hosts: Host names fetched even when they resolve to non-public addresses
            (an internal API you trust), matched exactly, case-insensitively.
    """
    trusted = {h.lower() for h in allowed_hosts}

    async def _target(url: httpx.URL) -> tuple[httpx.URL, dict[str, str], dict[str, Any]]:
        """Check ``url`` and pin it to a checked address: (request url, headers, extensions)."""
        if url.scheme not in ("http", "https"):
            raise ToolArgumentError(
                f"only http and https URLs can be fetched, not {url.scheme or 'no'} scheme"
            )
        host = url.host
        if not host:
            raise ToolArgumentError(f"the URL {str(url)!r} has no host")
        port = url.port or (443 if url.scheme == "https" else 80)
        addresses = await _resolve(host, port)
        if not addresses:
            raise TransientToolError(f"host {host!r} has no addresses")
        if not allow_private and host.lower() not in trusted:
            refused = [a for a in addresses if not _allowed_address(a)]
            if refused:
                raise ToolPermissionError(
                    f"refusing to fetch {str(url)!r}: {host} resolves to a non-public address "
                    f"({refused[0]}); only public internet addresses are allowed"
                )
        address = addresses[0]
        pinned = url.copy_with(host=address)
        headers = {"Host": url.netloc.decode("ascii"), "Accept-Encoding": "identity"}
        # TLS must still verify the certificate for the name, not the address.
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        return pinned, headers, extensions

    async def fetch(url: str) -> ToolOutput:
        try:
            current = httpx.URL(url.strip())
        except httpx.InvalidURL as exc:
            raise ToolArgumentError(f"{url!r} is not a valid URL: {exc}") from None
        async with httpx.AsyncClient(
            follow_redirects=False, timeout=timeout, trust_env=False
        ) as client:
            for _ in range(_MAX_REDIRECTS + 1):
                pinned, headers, extensions = await _target(current)
                request = client.build_request(
                    "GET", pinned, headers=headers, extensions=extensions
                )
                response = await client.send(request, stream=True)
                try:
                    if response.is_redirect and "location" in response.headers:
                        current = current.join(response.headers["location"])
                        continue
                    return await _read(current, response)
                finally:
                    await response.aclose()
        raise ToolError(f"too many redirects (more than {_MAX_REDIRECTS}) from {url!r}")

    async def _read(url: httpx.URL, response: httpx.Response) -> ToolOutput:
        body = bytearray()
        truncated = False
        async for chunk in response.aiter_bytes():
            body.extend(chunk)
            if len(body) > max_bytes:
                del body[max_bytes:]
                truncated = True
                break
        status = response.status_code
        if status == 429 or status >= 500:
            raise TransientToolError(f"HTTP {status} {response.reason_phrase} from {url}")
        content_type = response.headers.get("content-type", "")
        head = f"HTTP {status} {response.reason_phrase} from {url} ({content_type or 'no content type'})"
        if not _is_text(content_type):
            text = f"[{len(body)} bytes of binary content not shown]"
        else:
            try:
                text = bytes(body).decode(response.charset_encoding or "utf-8", errors="replace")
            except LookupError:  # an unknown charset name in the header
                text = bytes(body).decode("utf-8", errors="replace")
        if truncated:
            text += f"\n[truncated: only the first {max_bytes} bytes were read]"
        return ToolOutput(
            content=f"{head}\n\n{text}",
            is_error=status >= 400,
            data={"status": status, "url": str(url)},
        )

    async def http_get(url: str) -> ToolOutput:
        """Fetch a public web page or API over HTTP(S) and return its text.

        Args:
            url: Absolute http:// or https:// URL.
        """
        try:
            with anyio.fail_after(timeout):
                return await fetch(url)
        except TimeoutError:
            raise TransientToolError(f"fetching {url!r} took longer than {timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise TransientToolError(
                f"fetching {url!r} failed: {type(exc).__name__}: {exc}"
            ) from None

    return Tool(http_get, read_only=True, idempotent=True, breaker_key=http_target)


def builtin_tools(*, allow_private_http: bool = False) -> list[Tool[..., Any]]:
    """``current_time``, ``calculator`` and ``http_get`` (private addresses refused by default)."""
    return [current_time, calculator, make_http_get(allow_private=allow_private_http)]
