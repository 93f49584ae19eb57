"""The one table of shelfhand's settings: name, environment variable, ``shelfhand.toml`` key,
kind, default, help and whether the value is a secret.

Loading (:mod:`shelfhand.core.settings`), ``shelfhand config`` and the configuration reference
(``docs/reference/configuration.md``, written by ``scripts/gen_config_reference.py``) all read
:data:`SETTINGS`; a setting added here is loaded, checked, shown and documented.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from shelfhand.core.errors import ConfigurationError
from shelfhand.core.pricing import PriceTable
from shelfhand.core.setting_kinds import (
    Choice,
    ImportSpecs,
    Invalid,
    Kind,
    Names,
    Number,
    PathKind,
    Prices,
    Switch,
    Text,
    Url,
    WordGroups,
)

__all__ = [
    "ANSWER_CHECKS",
    "ANSWER_JUDGES",
    "ANSWER_RETRIEVAL_MODES",
    "BUILTIN_TOOLS",
    "DEFAULT_KEYWORD_COMMON_SHARE",
    "DEFAULT_MIN_RELEVANCE",
    "DEFAULT_WORKSPACE",
    "FUSIONS",
    "RERANK_MODES",
    "RETRIEVAL_MODES",
    "SETTINGS",
    "SETTINGS_BY_NAME",
    "TOOL_CHOICES",
    "TOOL_MODES",
    "TRACING_MODES",
    "AnswerRetrieval",
    "Setting",
    "Source",
]

Source = Literal["default", "toml", "env", "flag"]
"""Where a setting's value came from (precedence: flag > env > toml > default)."""

RETRIEVAL_MODES = ("auto", "pg", "simple", "keyword")
AnswerRetrieval = Literal["context", "tool", "both"]
ANSWER_RETRIEVAL_MODES: tuple[AnswerRetrieval, ...] = ("context", "tool", "both")
TOOL_CHOICES = ("auto", "required", "none")
TOOL_MODES = ("native", "plain", "constrained")
RERANK_MODES = ("off", "endpoint", "llm")
TRACING_MODES = ("stored", "off")
BUILTIN_TOOLS = ("calculator", "current_time", "http_get", "remember")
"""The built-in tools an agent may opt into (setting ``builtin_tools``); none by default.
``remember`` (long-term memory per user) exists in the service only."""
ANSWER_CHECKS = ("fallback", "flag", "off")
ANSWER_JUDGES = ("off", "model", "rerank")
FUSIONS = ("convex", "rrf")
"""How hybrid search fuses its two sides (setting ``fusion``)."""
DEFAULT_WORKSPACE = ".shelfhand"
DEFAULT_MIN_RELEVANCE = 0.25
"""Calibrated on the sample case set (every not-in-the-documents query scores under it, every
answerable one above) and checked on SciFact and CMRC 2018: see docs/benchmarks/history.md, "Retrieval
quality (issue 13)"."""
DEFAULT_KEYWORD_COMMON_SHARE = 0.2
"""Query terms in more than this share of the chunks do not rank keyword hits while rarer
ones find enough (:func:`shelfhand.knowledge.retrieval.fusion.ranking_terms`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One setting.

    Attributes:
        name: The :class:`~shelfhand.core.settings.Settings` attribute.
        env: Its environment variable (``None``: not read from the environment).
        toml: Its key under ``[shelfhand]`` in ``shelfhand.toml`` (``None``: not read there).
        kind: What the value may be (see :mod:`shelfhand.core.setting_kinds`).
        default: The value when no source sets it.
        help: One line for people.
        secret: Never shown or logged (``shelfhand config`` masks it).
        label: How refusals name it, when not by ``name`` (``"retrieval mode"``).
    """

    name: str
    env: str | None
    toml: str | None
    kind: Kind
    default: Any
    help: str
    secret: bool = False
    label: str | None = None

    def parse(self, raw: object, source: Source) -> Any:
        """``raw`` (from ``source``) checked and converted.

        Raises:
            ConfigurationError: The value does not fit; the message names the setting, what
                fits and where to set it.
        """
        try:
            return self.kind.parse(raw)
        except Invalid as bad:
            label = self.label or self.name
            where = self.where(source)
            if not bad.show_value:
                raise ConfigurationError(f"{label} must be {bad.expected} ({where})") from None
            if isinstance(self.kind, Choice):
                message = f"{label} {raw!r} is not {bad.expected} ({where})"
            elif bad.out_of_range:
                message = f"{label} is out of range: must be {bad.expected}, not {raw!r} ({where})"
            else:
                message = f"{label} must be {bad.expected}, not {raw!r} ({where})"
            raise ConfigurationError(message) from None

    def where(self, source: Source | None = None) -> str:
        """Where to set it, in words (and that the value was a flag, when it was)."""
        places = [p for p in (self.env, self.toml and f"{self.toml} in shelfhand.toml") if p]
        text = f"set {' or '.join(places)}" if places else "a command-line option"
        if self.env and not self.toml:
            text += "; environment only"
        return f"given on the command line; {text}" if source == "flag" else text


def _unset(value: object) -> bool:
    return value is None or value == ""


def pick(
    setting: Setting,
    *,
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    toml: Mapping[str, Any],
) -> tuple[object, Source]:
    """The raw value of ``setting`` and its source, by precedence; an empty value (``""``,
    ``None``) counts as unset, so the next source decides."""
    if not _unset(flags.get(setting.name)):
        return flags[setting.name], "flag"
    if setting.env is not None and not _unset(env.get(setting.env)):
        return env[setting.env], "env"
    if setting.toml is not None and not _unset(toml.get(setting.toml)):
        return toml[setting.toml], "toml"
    return setting.default, "default"


def _s(name: str, env: str | None, kind: Kind, default: Any, help: str, **extra: Any) -> Setting:
    """A setting whose TOML key is its name (all but the environment-only ones)."""
    toml = extra.pop("toml", name)
    return Setting(name=name, env=env, toml=toml, kind=kind, default=default, help=help, **extra)


_SECONDS = Number(low=0.001, high=86_400)

SETTINGS: tuple[Setting, ...] = (
    _s("workspace", "SHELFHAND_WORKSPACE", PathKind(), DEFAULT_WORKSPACE,
       "Workspace folder: knowledge, sessions, audit log and shelfhand.toml (flag --workspace).",
       toml=None),
    _s("model", "SHELFHAND_MODEL", Text(), None,
       "Chat model id on the endpoint, or scripted:<file.json> to play a script."),
    _s("base_url", "OPENAI_BASE_URL", Text(), None,
       "OpenAI-compatible API root, e.g. http://127.0.0.1:8080/v1 (unset: OpenAI)."),
    _s("api_key", "OPENAI_API_KEY", Text(), None,
       "Key for the model endpoint (local servers need none).", secret=True),
    _s("model_timeout", "SHELFHAND_MODEL_TIMEOUT", _SECONDS, 60.0,
       "Seconds for a whole model call, retries included."),
    _s("first_token_timeout", "SHELFHAND_FIRST_TOKEN_TIMEOUT", _SECONDS, 30.0,
       "Seconds until a streamed reply's first token."),
    _s("max_tokens", "SHELFHAND_MAX_TOKENS", Number(low=1, high=1_000_000, whole=True), None,
       "Most tokens per model reply; not sent when unset (flag --max-tokens)."),
    _s("temperature", "SHELFHAND_TEMPERATURE", Number(low=0.0, high=2.0), None,
       "Sampling temperature; not sent when unset (flag --temperature)."),
    _s("prices", "SHELFHAND_PRICES", Prices(), PriceTable(),
       "Price per model and 1M tokens, input and output, for the cost of each turn (a TOML "
       "table, or JSON in the environment); a model without one has no cost."),
    _s("context_tokens", "SHELFHAND_CONTEXT_TOKENS",
       Number(low=256, high=10_000_000, whole=True), 8192,
       "The model's context window; the agent budgets its prompt with it."),
    _s("tool_choice", "SHELFHAND_TOOL_CHOICE", Choice(options=TOOL_CHOICES), "auto",
       "auto lets the model decide, required forces a call, none offers no tools "
       "(flag --tool-choice)."),
    _s("tool_mode", "SHELFHAND_TOOL_MODE", Choice(options=TOOL_MODES), "native",
       "How tools reach the model: the tools list, the prompt, or JSON-constrained replies "
       "(flag --tool-mode)."),
    _s("retrieval_mode", "SHELFHAND_RETRIEVAL_MODE", Choice(options=RETRIEVAL_MODES), "auto",
       "auto: embeddings when they work, else keywords; pg: PostgreSQL (needs database_url); "
       "simple: embeddings or fail; keyword: keywords only.", label="retrieval mode"),
    _s("embedder", "SHELFHAND_EMBEDDER", Text(), "default",
       "default (MiniLM for English, USE for Chinese), hashing, or openai:<model>."),
    _s("cross_language", "SHELFHAND_CROSS_LANGUAGE", Switch(), True,
       "With the default embedder, English chunks are embedded by USE too, so that a question "
       "in Chinese (or another language) finds an English passage."),
    _s("chunk_tokens", None, Number(low=32, whole=True), 400,
       "Tokens per chunk when documents are ingested."),
    _s("chunk_overlap", None, Number(low=0, whole=True), 40,
       "Tokens shared by neighbouring chunks; below chunk_tokens."),
    _s("embed_timeout", "SHELFHAND_EMBED_TIMEOUT", Number(low=0, high=3600, low_open=True), 2.0,
       "Seconds a query embedding may take before search falls back to keywords."),
    _s("turn_timeout", "SHELFHAND_TURN_TIMEOUT", Number(low=0, high=86_400, low_open=True), 120.0,
       "Seconds a service chat turn may wait on a silent model before it fails with 504."),
    _s("budget_lease", "SHELFHAND_BUDGET_LEASE", Number(low=1, high=2_678_400), 900.0,
       "Seconds a model call's budget reservation is held: one not settled by then (its "
       "process was killed mid-call) is given back."),
    _s("answer_retrieval", "SHELFHAND_ANSWER_RETRIEVAL",
       Choice(options=ANSWER_RETRIEVAL_MODES), "both",
       "Where chat answers get passages: context (retrieved up front), tool (the model calls "
       "retrieve) or both.", label="answer retrieval mode"),
    _s("compress", "SHELFHAND_COMPRESS", Switch(), False,
       "Cut each retrieved passage to the sentences that answer the query."),
    _s("compress_tokens", "SHELFHAND_COMPRESS_TOKENS",
       Number(low=16, high=100_000, whole=True), 200,
       "Tokens kept per passage when compress is on."),
    _s("rerank", "SHELFHAND_RERANK", Choice(options=RERANK_MODES), "off",
       "Rerank fused hits: off, endpoint (rerank_url) or llm (the chat model)."),
    _s("rerank_url", "SHELFHAND_RERANK_URL", Url(schemes=("http", "https")), None,
       "The reranker for rerank = endpoint (a TEI or vLLM rerank server)."),
    _s("rerank_model", "SHELFHAND_RERANK_MODEL", Text(), None,
       "Model name sent to the reranker (llm: another model on the chat endpoint)."),
    _s("rerank_api_key", "SHELFHAND_RERANK_API_KEY", Text(), None,
       "Key for the rerank endpoint (never read from shelfhand.toml).", secret=True, toml=None),
    _s("rerank_timeout", "SHELFHAND_RERANK_TIMEOUT", Number(low=0, high=3600, low_open=True), 5.0,
       "Seconds for a rerank; past it the fused order is kept."),
    _s("rerank_candidates", "SHELFHAND_RERANK_CANDIDATES",
       Number(low=1, high=200, whole=True), 20,
       "Fused hits shown to the reranker."),
    _s("builtin_tools", "SHELFHAND_BUILTIN_TOOLS", Names(options=BUILTIN_TOOLS), (),
       "Built-in tools offered to chat answers besides retrieve (none by default): "
       "calculator, current_time, http_get, remember (the service's long-term memory "
       "per user)."),
    _s("tools", "SHELFHAND_TOOLS", ImportSpecs(), (),
       "Your own tools, offered besides retrieve: a module (every @tool it defines) or "
       "module:name (a tool, a function or a list of them), importable from the folder "
       "shelfhand runs in or installed; imported when a command or the service starts."),
    _s("tool_result_chars", "SHELFHAND_TOOL_RESULT_CHARS",
       Number(low=1, high=100_000_000, whole=True), 100_000,
       "Longest tool result (or error) the model reads, in characters; a longer one is cut "
       "there with a line saying how long it was (a tool's own max_result_chars wins)."),
    _s("answer_check", "SHELFHAND_ANSWER_CHECK", Choice(options=ANSWER_CHECKS), "fallback",
       "Check each answer against its passages: fallback (an ungrounded answer becomes the "
       "passages' own sentences), flag (only flagged) or off."),
    _s("answer_judge", "SHELFHAND_ANSWER_JUDGE", Choice(options=ANSWER_JUDGES), "off",
       "The stronger answer check: model (the chat model judges each sentence against its "
       "passages), rerank (the rerank_url endpoint scores each sentence against its "
       "passages) or off; the lexical check stands when the judge fails."),
    _s("answer_judge_timeout", "SHELFHAND_ANSWER_JUDGE_TIMEOUT",
       Number(low=0.0, high=600.0, low_open=True), 20.0,
       "Seconds the judge's check of one answer may take; past it the lexical check stands."),
    _s("answer_judge_min_score", "SHELFHAND_ANSWER_JUDGE_MIN_SCORE", Number(), 0.5,
       "answer_judge = rerank: the score a sentence's best passage needs (0.5 suits "
       "endpoints scoring 0 to 1)."),
    _s("query_rewrite", "SHELFHAND_QUERY_REWRITE", Switch(), False,
       "The chat model rewrites a follow-up into a self-contained query for retrieval."),
    _s("min_relevance", "SHELFHAND_MIN_RELEVANCE", Number(low=0.0, high=1.0),
       DEFAULT_MIN_RELEVANCE,
       "Search hits with a relevance under this are dropped; 0 keeps every hit."),
    _s("keyword_common_share", "SHELFHAND_KEYWORD_COMMON_SHARE",
       Number(low=0.0, high=1.0, low_open=True), DEFAULT_KEYWORD_COMMON_SHARE,
       "Query terms in more than this share of the chunks do not rank keyword hits while "
       "rarer terms find enough; 1 keeps every term."),
    _s("synonyms", "SHELFHAND_SYNONYMS", WordGroups(), (),
       "Groups of words a search treats as one (\"开封 拆封\"), added to the built-in "
       "ones; a query holding one word of a group also searches for the others."),
    _s("fusion", "SHELFHAND_FUSION", Choice(options=FUSIONS), "convex",
       "How hybrid search fuses keyword and vector hits: convex (scores, the default) or rrf "
       "(ranks; with qdrant_url the Qdrant server fuses, one request per search)."),
    _s("database_url", "SHELFHAND_DATABASE_URL",
       Url(schemes=("postgresql", "postgres"), quote=False), None,
       "PostgreSQL (with pgvector) for knowledge, sessions, audit and ingest jobs.",
       secret=True),
    _s("pg_timeout", "SHELFHAND_PG_TIMEOUT", _SECONDS, 30.0,
       "Seconds a PostgreSQL search, session, usage, trace or audit query may wait for the "
       "server before its connection is hung up (a request then fails with 503)."),
    _s("redis_url", "SHELFHAND_REDIS_URL",
       Url(schemes=("redis", "rediss", "unix"), quote=False), None,
       "Redis for state shared by several service replicas.", secret=True),
    _s("tracing", "SHELFHAND_TRACING", Choice(options=TRACING_MODES), "stored",
       "Service turns' span trees: stored (the workspace's traces.db, or PostgreSQL with "
       "database_url) or off."),
    _s("trace_content", "SHELFHAND_TRACE_CONTENT", Switch(), False,
       "Record message contents, tool results and passage texts in spans (personal data)."),
    _s("trace_retention_days", "SHELFHAND_TRACE_RETENTION_DAYS",
       Number(low=0, high=36_500, low_open=True), 14.0,
       "Stored traces older than this many days are deleted."),
    _s("trace_max_traces", "SHELFHAND_TRACE_MAX_TRACES", Number(low=1, whole=True), 100_000,
       "At most this many stored traces; the oldest go first."),
    _s("trace_sample_ratio", "SHELFHAND_TRACE_SAMPLE_RATIO", Number(low=0.0, high=1.0), 1.0,
       "The share of service turns whose spans are recorded (stored and exported), chosen by "
       "trace id; /metrics counts every turn."),
    _s("otel_endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", Url(schemes=("http", "https")), None,
       "Export spans over OTLP/HTTP to this collector (needs shelfhand[otel]; "
       "OTEL_SERVICE_NAME and OTEL_TRACES_SAMPLER apply).", toml=None),
    _s("qdrant_url", "SHELFHAND_QDRANT_URL", Text(), None,
       "Search on Qdrant: a folder runs Qdrant Edge in process, http(s)://host:6333 a Qdrant "
       "server or cluster; the store (SQLite or PostgreSQL) keeps the records."),
    _s("qdrant_api_key", "SHELFHAND_QDRANT_API_KEY", Text(), None,
       "API key of the Qdrant server in qdrant_url, if it needs one.", secret=True),
)  # fmt: skip
"""Every setting, in the order ``shelfhand config`` and the reference list them."""

SETTINGS_BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}
