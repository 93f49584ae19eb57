"""Settings: environment variables, then ``<workspace>/shelfhand.toml``, then defaults.

Environment (highest precedence):
``SHELFHAND_WORKSPACE``, ``SHELFHAND_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
``SHELFHAND_RETRIEVAL_MODE`` (auto | simple | keyword),
``SHELFHAND_EMBEDDER`` (default | hashing | openai:<model>), ``SHELFHAND_EMBED_TIMEOUT``
(seconds a query embedding may take before search falls back to keywords, default 2),
``SHELFHAND_TURN_TIMEOUT`` (seconds a service chat turn may wait for the model without any
event before it fails with 504, default 120), ``SHELFHAND_ANSWER_RETRIEVAL`` (context | tool |
both), and the model options of :data:`MODEL_ENV`: ``SHELFHAND_MODEL_TIMEOUT`` (seconds for a
whole model call, retries included), ``SHELFHAND_FIRST_TOKEN_TIMEOUT`` (seconds until a
streamed reply's first token), ``SHELFHAND_MAX_TOKENS``, ``SHELFHAND_TEMPERATURE``,
``SHELFHAND_CONTEXT_TOKENS``, ``SHELFHAND_TOOL_CHOICE`` (auto | required | none),
``SHELFHAND_TOOL_MODE`` (native | plain | constrained), ``SHELFHAND_MIN_RELEVANCE`` (0..1:
search hits whose relevance is under it are dropped, so an unanswerable question finds
nothing; default :data:`DEFAULT_MIN_RELEVANCE`, 0 keeps every hit),
``SHELFHAND_KEYWORD_COMMON_SHARE`` (0..1: query terms found in more than this share of the
chunks do not rank keyword hits while rarer terms find enough; 1 keeps every term; default
:data:`DEFAULT_KEYWORD_COMMON_SHARE`).

``shelfhand.toml`` in the workspace may hold the same keys in lower case under ``[shelfhand]``
(``model``, ``base_url``, ``api_key``, ``model_timeout``, ``first_token_timeout``,
``max_tokens``, ``temperature``, ``context_tokens``, ``tool_choice``, ``tool_mode``,
``retrieval_mode``, ``embedder``, ``chunk_tokens``, ``chunk_overlap``, ``embed_timeout``,
``turn_timeout``, ``answer_retrieval``, ``min_relevance``, ``keyword_common_share``). Reading limits live in a ``[limits]`` table (see
:mod:`shelfhand.knowledge.reading.limits`); they are kept here as given and checked when the
knowledge base opens.

``answer_retrieval`` is how chat answers get their passages: ``context`` retrieves before the
model is asked and puts the numbered passages in the prompt; ``tool`` leaves it to the model to
call ``retrieve``; ``both`` (the default) does the first retrieval up front and lets the model
call ``retrieve`` for more.

Passage compression: ``compress`` (``SHELFHAND_COMPRESS``, true | false, default false) cuts
each retrieved passage to the sentences that answer the query, within ``compress_tokens``
(``SHELFHAND_COMPRESS_TOKENS``, default 200) tokens per passage.

Rerank and query rewrite (off by default; see :mod:`shelfhand.knowledge.retrieval.rerank`):
``rerank`` (``SHELFHAND_RERANK``: off | endpoint | llm), ``rerank_url``
(``SHELFHAND_RERANK_URL``, needed for ``endpoint``), ``rerank_model``
(``SHELFHAND_RERANK_MODEL``), ``SHELFHAND_RERANK_API_KEY`` (environment only: a secret),
``rerank_timeout`` (``SHELFHAND_RERANK_TIMEOUT``, seconds, default 5; the fused order is kept
past it), ``rerank_candidates`` (``SHELFHAND_RERANK_CANDIDATES``, fused hits shown to the
reranker, default 20) and ``query_rewrite`` (``SHELFHAND_QUERY_REWRITE``: on | off; the chat
model rewrites a follow-up message into a self-contained query for up-front retrieval).

Scale-out (both optional; secrets in them are never logged): ``database_url``
(``SHELFHAND_DATABASE_URL``, ``postgresql://...``: the PostgreSQL + pgvector store, used by
``retrieval_mode`` ``auto`` when set and required by ``pg``) and ``redis_url``
(``SHELFHAND_REDIS_URL``, ``redis://...``: state shared by several service replicas).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from shelfhand.core.errors import ConfigurationError

RETRIEVAL_MODES = ("auto", "pg", "simple", "keyword")
AnswerRetrieval = Literal["context", "tool", "both"]
ANSWER_RETRIEVAL_MODES: tuple[AnswerRetrieval, ...] = ("context", "tool", "both")
DEFAULT_WORKSPACE = ".shelfhand"
TOOL_CHOICES = ("auto", "required", "none")
TOOL_MODES = ("native", "plain", "constrained")
RERANK_MODES = ("off", "endpoint", "llm")
_ON = ("on", "true", "1", "yes", "llm")
_OFF = ("off", "false", "0", "no", "")
MODEL_ENV = {
    "model_timeout": "SHELFHAND_MODEL_TIMEOUT",
    "first_token_timeout": "SHELFHAND_FIRST_TOKEN_TIMEOUT",
    "max_tokens": "SHELFHAND_MAX_TOKENS",
    "temperature": "SHELFHAND_TEMPERATURE",
    "context_tokens": "SHELFHAND_CONTEXT_TOKENS",
    "tool_choice": "SHELFHAND_TOOL_CHOICE",
    "tool_mode": "SHELFHAND_TOOL_MODE",
}
"""Model options: settings attribute (and ``shelfhand.toml`` key) → environment variable."""
DEFAULT_MIN_RELEVANCE = 0.25
DEFAULT_KEYWORD_COMMON_SHARE = 0.2
"""Query terms in more than this share of the chunks do not rank keyword hits while rarer
ones find enough (:func:`shelfhand.knowledge.retrieval.fusion.ranking_terms`)."""
"""Calibrated on the sample case set (every not-in-the-documents query scores under it, every
answerable one above) and checked on SciFact and CMRC 2018: see BENCHMARKS.md, "Retrieval
quality (issue 13)"."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    workspace: Path
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    model_timeout: float = 60.0
    first_token_timeout: float = 30.0
    max_tokens: int | None = None
    temperature: float | None = None
    context_tokens: int = 8192
    tool_choice: str = "auto"
    tool_mode: str = "native"
    retrieval_mode: str = "auto"
    embedder: str = "default"
    chunk_tokens: int = 400
    chunk_overlap: int = 40
    limits: Mapping[str, Any] = field(default_factory=dict)
    """The ``[limits]`` table of shelfhand.toml (reading limits per file), as written."""
    embed_timeout: float = 2.0
    turn_timeout: float = 120.0
    answer_retrieval: AnswerRetrieval = "both"
    compress: bool = False
    """Cut each retrieved passage to the sentences that answer the query (``compress``,
    ``SHELFHAND_COMPRESS``); off by default, see :mod:`shelfhand.knowledge.evidence.compress`."""
    compress_tokens: int = 200
    """Tokens kept per passage when ``compress`` is on (``SHELFHAND_COMPRESS_TOKENS``)."""

    rerank: str = "off"
    rerank_url: str | None = None
    rerank_model: str | None = None
    rerank_api_key: str | None = field(default=None, repr=False)
    rerank_timeout: float = 5.0
    rerank_candidates: int = 20
    query_rewrite: bool = False
    min_relevance: float = DEFAULT_MIN_RELEVANCE
    keyword_common_share: float = DEFAULT_KEYWORD_COMMON_SHARE
    """Query terms in more than this share of the chunks do not rank keyword hits while rarer
    ones find enough (``SHELFHAND_KEYWORD_COMMON_SHARE``; 1 keeps every term)."""
    database_url: str | None = field(default=None, repr=False)
    """PostgreSQL for the knowledge store and shared records (``SHELFHAND_DATABASE_URL``)."""
    redis_url: str | None = field(default=None, repr=False)
    """Redis for state shared by several replicas (``SHELFHAND_REDIS_URL``)."""

    @classmethod
    def load(
        cls, workspace: str | Path | None = None, *, env: Mapping[str, str] | None = None
    ) -> Settings:
        """Read settings; raises :class:`ConfigurationError` on invalid values."""
        env = os.environ if env is None else env
        ws = Path(workspace or env.get("SHELFHAND_WORKSPACE") or DEFAULT_WORKSPACE)
        file_values = _read_toml(ws / "shelfhand.toml")
        limits = _read_limits(ws / "shelfhand.toml")

        def pick(env_key: str, file_key: str) -> Any:
            value = env.get(env_key)
            if value not in (None, ""):
                return value
            return file_values.get(file_key)

        mode = str(pick("SHELFHAND_RETRIEVAL_MODE", "retrieval_mode") or "auto").lower()
        if mode not in RETRIEVAL_MODES:
            raise ConfigurationError(
                f"retrieval mode {mode!r} is not one of {', '.join(RETRIEVAL_MODES)} "
                "(set SHELFHAND_RETRIEVAL_MODE or retrieval_mode in shelfhand.toml)"
            )
        answer_retrieval = check_answer_retrieval(
            pick("SHELFHAND_ANSWER_RETRIEVAL", "answer_retrieval") or "both",
            where="set SHELFHAND_ANSWER_RETRIEVAL or answer_retrieval in shelfhand.toml",
        )
        options = model_options({k: pick(env_key, k) for k, env_key in MODEL_ENV.items()})
        try:
            chunk_tokens = int(file_values.get("chunk_tokens", 400))
            chunk_overlap = int(file_values.get("chunk_overlap", 40))
            embed_timeout = float(pick("SHELFHAND_EMBED_TIMEOUT", "embed_timeout") or 2.0)
            turn_timeout = float(pick("SHELFHAND_TURN_TIMEOUT", "turn_timeout") or 120.0)
            min_relevance = _bounded(
                pick, "min_relevance", DEFAULT_MIN_RELEVANCE, note="0 keeps every hit"
            )
            common_share = _bounded(
                pick,
                "keyword_common_share",
                DEFAULT_KEYWORD_COMMON_SHARE,
                low_open=True,
                note="1 keeps every query term",
            )
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"invalid number in settings: {exc}") from exc
        if (
            embed_timeout <= 0
            or turn_timeout <= 0
            or chunk_tokens < 32
            or not 0 <= chunk_overlap < chunk_tokens
        ):
            raise ConfigurationError(
                "settings out of range: embed_timeout and turn_timeout > 0, "
                "chunk_tokens >= 32, 0 <= chunk_overlap < chunk_tokens"
            )
        rerank = rerank_options(pick, env)
        database_url = _url(
            pick("SHELFHAND_DATABASE_URL", "database_url"),
            ("postgresql", "postgres"),
            "database_url (SHELFHAND_DATABASE_URL)",
        )
        redis_url = _url(
            pick("SHELFHAND_REDIS_URL", "redis_url"),
            ("redis", "rediss", "unix"),
            "redis_url (SHELFHAND_REDIS_URL)",
        )
        if mode == "pg" and database_url is None:
            raise ConfigurationError(
                "retrieval mode 'pg' needs a PostgreSQL URL: set SHELFHAND_DATABASE_URL "
                "(postgresql://user@host:5432/db) or database_url in shelfhand.toml"
            )
        return cls(
            workspace=ws,
            model=pick("SHELFHAND_MODEL", "model") or None,
            base_url=pick("OPENAI_BASE_URL", "base_url") or None,
            api_key=pick("OPENAI_API_KEY", "api_key") or None,
            retrieval_mode=mode,
            embedder=str(pick("SHELFHAND_EMBEDDER", "embedder") or "default"),
            chunk_tokens=chunk_tokens,
            chunk_overlap=chunk_overlap,
            limits=limits,
            embed_timeout=embed_timeout,
            turn_timeout=turn_timeout,
            answer_retrieval=answer_retrieval,
            min_relevance=min_relevance,
            keyword_common_share=common_share,
            database_url=database_url,
            redis_url=redis_url,
            **options,
            **_compression(pick),
            **rerank,
        )


def _url(value: object, schemes: tuple[str, ...], where: str) -> str | None:
    """A service URL with one of ``schemes``, or None when unset; the error never shows it
    (it may hold a password)."""
    if value in (None, ""):
        return None
    text = str(value).strip()
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme not in schemes:
        raise ConfigurationError(
            f"{where} must start with {' or '.join(s + '://' for s in schemes)}"
        )
    return text


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _compression(pick: Any) -> dict[str, Any]:
    """``compress`` / ``compress_tokens`` from ``pick(env_key, file_key)``, checked."""
    out: dict[str, Any] = {}
    on = pick("SHELFHAND_COMPRESS", "compress")
    if on not in (None, ""):
        text = str(on).strip().lower()
        if text not in _TRUE + _FALSE:
            raise ConfigurationError(
                f"compress (SHELFHAND_COMPRESS) must be true or false, not {on!r}"
            )
        out["compress"] = text in _TRUE
    tokens = pick("SHELFHAND_COMPRESS_TOKENS", "compress_tokens")
    if tokens not in (None, ""):
        try:
            if isinstance(tokens, (bool, float)):
                raise ValueError
            out["compress_tokens"] = int(tokens)
        except (TypeError, ValueError):
            raise ConfigurationError(
                f"compress_tokens (SHELFHAND_COMPRESS_TOKENS) must be a whole number, not {tokens!r}"
            ) from None
        if not 16 <= out["compress_tokens"] <= 100_000:
            raise ConfigurationError(
                "compress_tokens (SHELFHAND_COMPRESS_TOKENS) must be between 16 and 100000, "
                f"not {tokens!r}"
            )
    return out


def rerank_options(pick: Any, env: Mapping[str, str]) -> dict[str, Any]:
    """The rerank and query-rewrite settings, checked; ``pick(env_key, file_key)`` reads one
    value. The API key comes from the environment only.

    Raises:
        ConfigurationError: An unknown mode, ``endpoint`` without a URL, a bad number.
    """
    mode = str(pick("SHELFHAND_RERANK", "rerank") or "off").strip().lower()
    if mode not in RERANK_MODES:
        raise ConfigurationError(
            f"rerank {mode!r} is not one of {', '.join(RERANK_MODES)} "
            "(set SHELFHAND_RERANK or rerank in shelfhand.toml)"
        )
    url = str(pick("SHELFHAND_RERANK_URL", "rerank_url") or "").strip() or None
    if mode == "endpoint" and url is None:
        raise ConfigurationError(
            "rerank = endpoint needs a URL: set SHELFHAND_RERANK_URL or rerank_url "
            "(e.g. http://127.0.0.1:8080 for a TEI or vLLM reranker)"
        )
    if url is not None and not url.startswith(("http://", "https://")):
        raise ConfigurationError(f"rerank_url must start with http:// or https://, not {url!r}")
    try:
        timeout = float(pick("SHELFHAND_RERANK_TIMEOUT", "rerank_timeout") or 5.0)
        raw_candidates = pick("SHELFHAND_RERANK_CANDIDATES", "rerank_candidates") or 20
        if isinstance(raw_candidates, float):
            raise ValueError(f"rerank_candidates must be a whole number, not {raw_candidates}")
        candidates = int(raw_candidates)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"invalid number in rerank settings: {exc}") from exc
    if not 0 < timeout <= 3600 or timeout != timeout or not 1 <= candidates <= 200:
        raise ConfigurationError(
            "rerank settings out of range: 0 < rerank_timeout <= 3600, "
            "1 <= rerank_candidates <= 200"
        )
    rewrite = pick("SHELFHAND_QUERY_REWRITE", "query_rewrite")
    rewrite_text = str(rewrite if rewrite is not None else "off").strip().lower()
    if rewrite_text not in _ON + _OFF:
        raise ConfigurationError(
            f"query_rewrite must be on or off, not {rewrite!r} "
            "(SHELFHAND_QUERY_REWRITE or query_rewrite in shelfhand.toml)"
        )
    model = str(pick("SHELFHAND_RERANK_MODEL", "rerank_model") or "").strip() or None
    return {
        "rerank": mode,
        "rerank_url": url,
        "rerank_model": model,
        "rerank_api_key": env.get("SHELFHAND_RERANK_API_KEY") or None,
        "rerank_timeout": timeout,
        "rerank_candidates": candidates,
        "query_rewrite": rewrite_text in _ON,
    }


def _bounded(
    pick: Callable[[str, str], Any],
    name: str,
    default: float,
    *,
    low_open: bool = False,
    note: str,
) -> float:
    """Setting ``name`` (``SHELFHAND_<NAME>``, else ``name`` in shelfhand.toml) as a number in
    0..1 (above 0 when ``low_open``), ``default`` when unset; the error names the setting,
    where to set it and ``note``."""
    env_key = f"SHELFHAND_{name.upper()}"
    value = pick(env_key, name)
    if value is None or value == "":
        return default
    where = f"{env_key} or {name} in shelfhand.toml; {note}"
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} {value!r} is not a number ({where})") from None
    above_low = number > 0.0 if low_open else number >= 0.0
    if not above_low or number > 1.0:  # (NaN fails both)
        use = "a share above 0 and up to 1" if low_open else "0..1"
        raise ConfigurationError(f"{name} {number:g} is out of range: use {use} ({where})")
    return number


def check_answer_retrieval(value: object, *, where: str = "") -> AnswerRetrieval:
    """``value`` as an answer retrieval mode; anything else is a :class:`ConfigurationError`
    that names the allowed modes (and ``where`` to fix it)."""
    mode = str(value).strip().lower()
    if mode not in ANSWER_RETRIEVAL_MODES:
        hint = f" ({where})" if where else ""
        raise ConfigurationError(
            f"answer retrieval mode {value!r} is not one of "
            f"{', '.join(ANSWER_RETRIEVAL_MODES)}{hint}"
        )
    return mode


def model_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Validated model options from raw values (environment strings or TOML values) keyed
    as in :data:`MODEL_ENV`; a missing or empty value takes the default.

    Raises:
        ConfigurationError: A value of the wrong type or out of range, naming the setting.
    """
    out: dict[str, Any] = {}

    def number(key: str, kind: type[float] | type[int], low: float, high: float) -> None:
        value = raw.get(key)
        if value in (None, ""):
            return
        where = f"{key} ({MODEL_ENV[key]})"
        try:
            if isinstance(value, bool) or (kind is int and isinstance(value, float)):
                raise ValueError
            parsed = kind(value)
        except (TypeError, ValueError):
            kind_name = "a whole number" if kind is int else "a number"
            raise ConfigurationError(f"{where} must be {kind_name}, not {value!r}") from None
        if not low <= parsed <= high or parsed != parsed:  # also refuses NaN
            raise ConfigurationError(f"{where} must be between {low:g} and {high:g}, not {value!r}")
        out[key] = parsed

    number("model_timeout", float, 0.001, 86_400)
    number("first_token_timeout", float, 0.001, 86_400)
    number("max_tokens", int, 1, 1_000_000)
    number("temperature", float, 0.0, 2.0)
    number("context_tokens", int, 256, 10_000_000)
    for key, allowed in (("tool_choice", TOOL_CHOICES), ("tool_mode", TOOL_MODES)):
        value = raw.get(key)
        if value in (None, ""):
            continue
        text = str(value).strip().lower()
        if text not in allowed:
            raise ConfigurationError(
                f"{key} ({MODEL_ENV[key]}) must be one of {', '.join(allowed)}, not {value!r}"
            )
        out[key] = text
    return out


def read_toml(path: Path) -> dict[str, Any]:
    """The whole TOML file; a broken one is a :class:`ConfigurationError` naming the file."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    section = read_toml(path).get("shelfhand", {})
    if not isinstance(section, dict):
        raise ConfigurationError(f"{path}: [shelfhand] must be a table")
    return section


def _read_limits(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    section = read_toml(path).get("limits", {})
    if not isinstance(section, dict):
        raise ConfigurationError(f"{path}: [limits] must be a table")
    return section
