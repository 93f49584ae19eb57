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
nothing; default :data:`DEFAULT_MIN_RELEVANCE`, 0 keeps every hit).

``shelfhand.toml`` in the workspace may hold the same keys in lower case under ``[shelfhand]``
(``model``, ``base_url``, ``api_key``, ``model_timeout``, ``first_token_timeout``,
``max_tokens``, ``temperature``, ``context_tokens``, ``tool_choice``, ``tool_mode``,
``retrieval_mode``, ``embedder``, ``chunk_tokens``, ``chunk_overlap``, ``embed_timeout``,
``turn_timeout``, ``answer_retrieval``, ``min_relevance``). Reading limits live in a ``[limits]`` table (see
:mod:`shelfhand.knowledge.limits`); they are kept here as given and checked when the
knowledge base opens.

``answer_retrieval`` is how chat answers get their passages: ``context`` retrieves before the
model is asked and puts the numbered passages in the prompt; ``tool`` leaves it to the model to
call ``retrieve``; ``both`` (the default) does the first retrieval up front and lets the model
call ``retrieve`` for more.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from shelfhand.core.errors import ConfigurationError

RETRIEVAL_MODES = ("auto", "simple", "keyword")
AnswerRetrieval = Literal["context", "tool", "both"]
ANSWER_RETRIEVAL_MODES: tuple[AnswerRetrieval, ...] = ("context", "tool", "both")
DEFAULT_WORKSPACE = ".shelfhand"
TOOL_CHOICES = ("auto", "required", "none")
TOOL_MODES = ("native", "plain", "constrained")
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
    min_relevance: float = DEFAULT_MIN_RELEVANCE

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
            min_relevance = _min_relevance(pick("SHELFHAND_MIN_RELEVANCE", "min_relevance"))
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
            **options,
        )


def _min_relevance(value: object) -> float:
    if value is None or value == "":
        return DEFAULT_MIN_RELEVANCE
    number = float(value)  # type: ignore[arg-type]
    if not 0.0 <= number <= 1.0:
        raise ConfigurationError(
            f"min_relevance {number:g} is out of range: use 0..1 "
            "(SHELFHAND_MIN_RELEVANCE or min_relevance in shelfhand.toml; 0 keeps every hit)"
        )
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
