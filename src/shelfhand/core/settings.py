"""Settings: command-line flags, then environment variables, then ``<workspace>/shelfhand.toml``
(keys in lower case under ``[shelfhand]``), then defaults.

Every setting (its environment variable, TOML key, kind, default and help) is a row of
:data:`~shelfhand.core.settings_table.SETTINGS`; loading reads that table, so every setting is
checked the same way and a bad value's message names the setting, what fits and where to set
it. Boolean settings share one vocabulary: ``on|off|true|false|yes|no|1|0``
(case-insensitive). ``shelfhand config`` shows each value and where it came from, and
``docs/reference/configuration.md`` lists them all (generated from the table).

Four tables of ``shelfhand.toml`` are not settings of the table: ``[limits]`` (reading limits
per file, see :mod:`shelfhand.knowledge.reading.limits`; kept here as given and checked when the
knowledge base opens), ``[budgets]`` (per tenant and user, see :mod:`shelfhand.usage.budgets`;
checked when the service starts), ``[[api_keys]]`` (see :mod:`shelfhand.core.auth`) and
``[mcp]`` (see :mod:`shelfhand.mcp.config`). Anything else in the file (a key under
``[shelfhand]`` that no setting reads, another table) is a typo that would run without what
it meant to set: loading refuses it, naming the nearest key.

``answer_retrieval`` is how chat answers get their passages: ``context`` retrieves before the
model is asked and puts the numbered passages in the prompt; ``tool`` leaves it to the model to
call ``retrieve``; ``both`` (the default) does the first retrieval up front and lets the model
call ``retrieve`` for more. Secrets (``api_key``, ``rerank_api_key``, the passwords inside
``database_url`` and ``redis_url``) are never shown in a ``repr`` or a message.
"""

from __future__ import annotations

import difflib
import logging
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shelfhand.core.errors import ConfigurationError
from shelfhand.core.pricing import PriceTable
from shelfhand.core.settings_table import (
    ANSWER_RETRIEVAL_MODES,
    DEFAULT_KEYWORD_COMMON_SHARE,
    DEFAULT_MIN_RELEVANCE,
    DEFAULT_WORKSPACE,
    RERANK_MODES,
    RETRIEVAL_MODES,
    SETTINGS,
    SETTINGS_BY_NAME,
    TOOL_CHOICES,
    TOOL_MODES,
    AnswerRetrieval,
    Source,
    pick,
)

__all__ = [
    "ANSWER_RETRIEVAL_MODES",
    "DEFAULT_KEYWORD_COMMON_SHARE",
    "DEFAULT_MIN_RELEVANCE",
    "DEFAULT_WORKSPACE",
    "MODEL_ENV",
    "OTHER_ENV",
    "RERANK_MODES",
    "RETRIEVAL_MODES",
    "TOOL_CHOICES",
    "TOOL_MODES",
    "AnswerRetrieval",
    "ResolvedSettings",
    "Settings",
    "check_answer_retrieval",
    "check_values",
    "model_options",
    "read_toml",
    "resolve_settings",
]

MODEL_OPTIONS = (
    "model_timeout",
    "first_token_timeout",
    "max_tokens",
    "temperature",
    "context_tokens",
    "tool_choice",
    "tool_mode",
)
MODEL_ENV: Mapping[str, str] = {name: str(SETTINGS_BY_NAME[name].env) for name in MODEL_OPTIONS}
"""Model options: settings attribute (and ``shelfhand.toml`` key) → environment variable."""

_D: dict[str, Any] = {s.name: s.default for s in SETTINGS}

OTHER_ENV = frozenset(
    {
        "SHELFHAND_API_KEYS",  # the service's callers (shelfhand.core.auth)
        # the project's own scripts: tests, benchmarks, the local model
        "SHELFHAND_TEST_WORKERS",
        "SHELFHAND_TEST_ARTIFACTS",
        "SHELFHAND_CHROMIUM",
        "SHELFHAND_LOCAL_MODEL_CACHE",
        "SHELFHAND_A2A03_PYTHON",
        "SHELFHAND_AGENT_HARNESS",
        "SHELFHAND_BENCH_DATA",
    }
)
"""``SHELFHAND_*`` variables read elsewhere than the settings table; any other is a typo that
:func:`resolve_settings` warns about."""
_ENV = frozenset(s.env for s in SETTINGS if s.env and s.env.startswith("SHELFHAND_")) | OTHER_ENV
_TOML_KEYS = {s.toml: s for s in SETTINGS if s.toml}
"""Each setting by its key under ``[shelfhand]``."""
_warned: set[str] = set()
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every setting's value; defaults and meanings are those of
    :data:`~shelfhand.core.settings_table.SETTINGS`. Build with :meth:`load`."""

    workspace: Path
    model: str | None = _D["model"]
    base_url: str | None = _D["base_url"]
    api_key: str | None = field(default=_D["api_key"], repr=False)
    model_timeout: float = _D["model_timeout"]
    first_token_timeout: float = _D["first_token_timeout"]
    max_tokens: int | None = _D["max_tokens"]
    temperature: float | None = _D["temperature"]
    prices: PriceTable = _D["prices"]
    context_tokens: int = _D["context_tokens"]
    tool_choice: str = _D["tool_choice"]
    tool_mode: str = _D["tool_mode"]
    retrieval_mode: str = _D["retrieval_mode"]
    embedder: str = _D["embedder"]
    cross_language: bool = _D["cross_language"]
    chunk_tokens: int = _D["chunk_tokens"]
    chunk_overlap: int = _D["chunk_overlap"]
    limits: Mapping[str, Any] = field(default_factory=dict)
    """The ``[limits]`` table of shelfhand.toml (reading limits per file), as written."""
    budgets: Mapping[str, Any] = field(default_factory=dict)
    """The ``[budgets]`` table of shelfhand.toml, as written."""
    embed_timeout: float = _D["embed_timeout"]
    turn_timeout: float = _D["turn_timeout"]
    budget_lease: float = _D["budget_lease"]
    answer_retrieval: AnswerRetrieval = _D["answer_retrieval"]
    compress: bool = _D["compress"]
    compress_tokens: int = _D["compress_tokens"]
    rerank: str = _D["rerank"]
    rerank_url: str | None = _D["rerank_url"]
    rerank_model: str | None = _D["rerank_model"]
    rerank_api_key: str | None = field(default=_D["rerank_api_key"], repr=False)
    rerank_timeout: float = _D["rerank_timeout"]
    rerank_candidates: int = _D["rerank_candidates"]
    builtin_tools: tuple[str, ...] = _D["builtin_tools"]
    tools: tuple[str, ...] = _D["tools"]
    tool_result_chars: int = _D["tool_result_chars"]
    answer_check: str = _D["answer_check"]
    answer_judge: str = _D["answer_judge"]
    answer_judge_timeout: float = _D["answer_judge_timeout"]
    answer_judge_min_score: float = _D["answer_judge_min_score"]
    query_rewrite: bool = _D["query_rewrite"]
    min_relevance: float = _D["min_relevance"]
    keyword_common_share: float = _D["keyword_common_share"]
    synonyms: tuple[tuple[str, ...], ...] = _D["synonyms"]
    fusion: str = _D["fusion"]
    database_url: str | None = field(default=_D["database_url"], repr=False)
    pg_timeout: float = _D["pg_timeout"]
    redis_url: str | None = field(default=_D["redis_url"], repr=False)
    tracing: str = _D["tracing"]
    trace_content: bool = _D["trace_content"]
    trace_retention_days: float = _D["trace_retention_days"]
    trace_max_traces: int = _D["trace_max_traces"]
    trace_sample_ratio: float = _D["trace_sample_ratio"]
    otel_endpoint: str | None = _D["otel_endpoint"]
    qdrant_url: str | None = field(default=_D["qdrant_url"], repr=False)
    qdrant_api_key: str | None = field(default=_D["qdrant_api_key"], repr=False)

    @classmethod
    def load(
        cls,
        workspace: str | Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        flags: Mapping[str, Any] | None = None,
    ) -> Settings:
        """Read settings (see :func:`resolve_settings`).

        Raises:
            ConfigurationError: An invalid value, naming the setting and where to set it.
        """
        resolved = resolve_settings(workspace, env=env, flags=flags)
        for warning in resolved.warnings:
            if warning not in _warned:  # once a process: settings load more than once
                _warned.add(warning)
                logger.warning("%s", warning)
        return resolved.settings


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedSettings:
    """Settings with where each value came from.

    Attributes:
        settings: The values.
        sources: Setting name → ``default``, ``toml``, ``env`` or ``flag``.
        warnings: ``SHELFHAND_*`` environment variables nothing reads (a typo such as
            ``SHELFHAND_RETRIVAL_MODE``), each with the nearest name: the environment is
            shared by other processes and versions, so they are told, not refused.
    """

    settings: Settings
    sources: Mapping[str, Source]
    warnings: tuple[str, ...] = ()


def resolve_settings(
    workspace: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> ResolvedSettings:
    """Every setting by precedence: ``flags`` (setting name → value; ``None`` is not given),
    then ``env`` (default ``os.environ``), then ``[shelfhand]`` of
    ``<workspace>/shelfhand.toml``, then the default. ``workspace`` counts as a flag.

    Raises:
        ConfigurationError: An invalid value (the message names the setting, what fits and
            where to set it), a broken ``shelfhand.toml`` (or one with a key or a table
            nothing reads), or settings that contradict each other (``rerank = endpoint``
            without ``rerank_url``, ``retrieval_mode = pg`` without ``database_url``).
    """
    env = os.environ if env is None else env
    flags = dict(flags or {})
    if workspace is not None:
        flags["workspace"] = workspace
    ws_raw, ws_source = pick(SETTINGS_BY_NAME["workspace"], flags=flags, env=env, toml={})
    ws = SETTINGS_BY_NAME["workspace"].parse(ws_raw, ws_source)
    path = ws / "shelfhand.toml"
    document = read_toml(path) if path.is_file() else {}
    _check_placement(document, path)
    toml = _table(document, "shelfhand", path)
    _check_keys(toml, path)
    values: dict[str, Any] = {"workspace": ws}
    sources: dict[str, Source] = {"workspace": ws_source}
    for setting in SETTINGS[1:]:
        raw, source = pick(setting, flags=flags, env=env, toml=toml)
        values[setting.name] = raw if source == "default" else setting.parse(raw, source)
        sources[setting.name] = source
    _check_together(values)
    return ResolvedSettings(
        warnings=tuple(
            f"{name} is not a shelfhand setting: it is ignored{_nearest_env(name)}"
            for name in sorted(env)
            if name.startswith("SHELFHAND_") and name not in _ENV
        )
        + _elsewhere(path),
        settings=Settings(
            **values,
            limits=_table(document, "limits", path),
            budgets=_table(document, "budgets", path),
        ),
        sources=sources,
    )


def _elsewhere(read: Path) -> tuple[str, ...]:
    """A warning for a ``shelfhand.toml`` in the current folder that is not the one ``read``
    (the workspace's): written beside a project, with the default workspace ``./.shelfhand``,
    it was ignored without a word."""
    here = Path("shelfhand.toml")
    try:
        if not here.is_file() or here.resolve() == read.resolve():
            return ()
    except OSError:  # (the current folder is gone)
        return ()
    return (
        f"./shelfhand.toml is not read: settings are read from the workspace's, {read} "
        "(move it there, or name its folder as the workspace with -w or SHELFHAND_WORKSPACE)",
    )


TABLES = ("shelfhand", "limits", "budgets", "api_keys", "mcp")
"""What ``shelfhand.toml`` may hold at its top: the settings and four tables read elsewhere."""


def _check_placement(document: Mapping[str, Any], path: Path) -> None:
    """A setting written above ``[shelfhand]`` (``retrieval_mode = "keyword"`` as the file's
    first line, or a ``[prices]`` table), or a table nothing reads (``[budget]``,
    ``[shelfhands]``), is never read: say so at start-up instead of running without it."""
    for key in document:
        setting = _TOML_KEYS.get(key)
        if setting is not None:
            where = f" (or {setting.env})" if setting.env else ""
            raise ConfigurationError(
                f"{path}: {key!r} is above [shelfhand], where no setting is read: move it "
                f"under [shelfhand]{where}"
            )
        if key not in TABLES:
            hint = _nearest(key, TABLES) or _nearest(key, list(_TOML_KEYS), " under [shelfhand]")
            raise ConfigurationError(
                f"{path}: {key!r} is not read{hint}; the file holds "
                f"[shelfhand] (the settings), [limits], [budgets], [[api_keys]] and [mcp]"
            )


def _check_keys(toml: Mapping[str, Any], path: Path) -> None:
    """Every key under ``[shelfhand]`` is a setting's: a typo (``modle``) or a secret that is
    only read from the environment (``rerank_api_key``) would otherwise run without it."""
    for key in toml:
        if key in _TOML_KEYS:
            continue
        setting = SETTINGS_BY_NAME.get(key)
        if setting is not None and setting.env:
            why = " (a secret is kept out of files)" if setting.secret else ""
            raise ConfigurationError(
                f"{path}: {key!r} is not read from shelfhand.toml{why}: set {setting.env} instead"
            )
        raise ConfigurationError(
            f"{path}: {key!r} under [shelfhand] is not a setting{_nearest(key, list(_TOML_KEYS))}; "
            "`shelfhand config` lists them"
        )


_ENV_BY_REST = {known.removeprefix("SHELFHAND_"): known for known in sorted(_ENV)}
"""Each known variable by its name without the ``SHELFHAND_`` they all share."""


def _nearest_env(name: str) -> str:
    """The nearest variable name, compared without the ``SHELFHAND_`` they all share."""
    close = _closest(name.removeprefix("SHELFHAND_"), list(_ENV_BY_REST))
    return f" (did you mean {_ENV_BY_REST[close]!r}?)" if close else ""


def _nearest(key: str, names: Sequence[str], where: str = "") -> str:
    close = _closest(key, names)
    return f" (did you mean {close!r}{where}?)" if close else ""


def _closest(key: str, names: Sequence[str]) -> str | None:
    close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
    return close[0] if close else None


def _check_together(values: Mapping[str, Any]) -> None:
    """The rules that span settings."""
    if values["chunk_overlap"] >= values["chunk_tokens"]:
        raise ConfigurationError(
            f"chunk_overlap ({values['chunk_overlap']}) must be below chunk_tokens "
            f"({values['chunk_tokens']}): set them in shelfhand.toml"
        )
    if values["rerank"] == "endpoint" and values["rerank_url"] is None:
        raise ConfigurationError(
            "rerank = endpoint needs a URL: set SHELFHAND_RERANK_URL or rerank_url "
            "(e.g. http://127.0.0.1:8080 for a TEI or vLLM reranker)"
        )
    if values["answer_judge"] == "rerank" and values["rerank_url"] is None:
        raise ConfigurationError(
            "answer_judge = rerank needs a rerank endpoint: set SHELFHAND_RERANK_URL or "
            "rerank_url (e.g. http://127.0.0.1:8080 for a TEI or vLLM reranker)"
        )
    if values["retrieval_mode"] == "pg" and values["database_url"] is None:
        raise ConfigurationError(
            "retrieval mode 'pg' needs a PostgreSQL URL: set SHELFHAND_DATABASE_URL "
            "(postgresql://user@host:5432/db) or database_url in shelfhand.toml"
        )


def check_values(raw: Mapping[str, Any], *, source: Source = "env") -> dict[str, Any]:
    """The settings named in ``raw`` (setting name → raw value), checked and converted as
    loading does; a missing or empty value is left out.

    Raises:
        ConfigurationError: A value that does not fit, naming the setting.
        KeyError: A name that is not a setting.
    """
    return {
        name: SETTINGS_BY_NAME[name].parse(value, source)
        for name, value in raw.items()
        if value is not None and value != ""
    }


def model_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Validated model options from raw values (environment strings or TOML values) keyed
    as in :data:`MODEL_ENV`; a missing or empty value is left out (the default applies).

    Raises:
        ConfigurationError: A value of the wrong type or out of range, naming the setting.
    """
    return check_values({name: raw.get(name) for name in MODEL_OPTIONS})


def check_answer_retrieval(value: object, *, where: str = "") -> AnswerRetrieval:
    """``value`` as an answer retrieval mode; anything else is a :class:`ConfigurationError`
    that names the allowed modes (and ``where`` to fix it)."""
    mode = str(value).strip().lower()
    for allowed in ANSWER_RETRIEVAL_MODES:
        if mode == allowed:
            return allowed
    hint = f" ({where})" if where else ""
    raise ConfigurationError(
        f"answer retrieval mode {value!r} is not one of {', '.join(ANSWER_RETRIEVAL_MODES)}{hint}"
    )


def read_toml(path: Path) -> dict[str, Any]:
    """The whole TOML file; a broken one is a :class:`ConfigurationError` naming the file."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"{path} is not valid TOML: {exc}") from None


def _table(document: Mapping[str, Any], name: str, path: Path) -> dict[str, Any]:
    section = document.get(name, {})
    if not isinstance(section, dict):
        raise ConfigurationError(f"{path}: [{name}] must be a table")
    return section
