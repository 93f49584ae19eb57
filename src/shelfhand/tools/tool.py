"""``@tool``: a plain function becomes a typed, permissioned tool (docs/design.md T1–T3).

Example::

    @tool(read_only=True)
    def lookup_order(ctx: UserContext, order_id: str) -> dict:
        \"\"\"Look up one of the caller's orders.

        Args:
            order_id: The order number, e.g. SO-1001.
        \"\"\"
        ...

The result is a :class:`Tool` that is still callable like the function. Everything the hot
path needs (schema, argument model, which parameters are injected context) is computed once,
at decoration.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeAlias, TypedDict, TypeVar, Unpack, overload

import pydantic_core
from pydantic import BaseModel, ValidationError

from shelfhand.core.context import PermissionLevel, RunContext, UserContext, permission_rank
from shelfhand.core.errors import InvalidArgumentError, ToolArgumentError, ToolError
from shelfhand.core.messages import Citation
from shelfhand.core.slots import twin
from shelfhand.tools.limits import parse_rate
from shelfhand.tools.schema import FunctionSchema, function_schema
from shelfhand.tools.workers import run_sync

__all__ = [
    "BreakerKey",
    "Tool",
    "ToolExample",
    "ToolOptions",
    "ToolOutput",
    "format_validation_error",
    "serialise_result",
    "tool",
]

BreakerKey: TypeAlias = Callable[[Mapping[str, Any], UserContext], str]
"""Derives a call's breaker target from its (unvalidated) arguments and its caller."""

P = ParamSpec("P")
R = TypeVar("R")

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

_DONE = "done"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutput:
    """What a tool returns to the model; return one to attach citations or flag an error."""

    content: str
    citations: tuple[Citation, ...] = ()
    is_error: bool = False
    data: Any = None
    """The structured value behind ``content`` (for the caller; the model sees ``content``)."""


@dataclass(frozen=True, slots=True)
class ToolExample:
    """A request this tool is made for, written by whoever deploys the tool, optionally with
    the arguments the call should get. Shown to the model with the tool's description (see
    :func:`~shelfhand.providers.tool_modes.tools_prompt`): small models route by them."""

    request: str
    arguments: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"request": self.request}
        if self.arguments is not None:
            out["arguments"] = dict(self.arguments)
        return out


ExampleSpec = str | Mapping[str, Any] | ToolExample
"""An example as declared: a request, ``{"request": ..., "arguments": {...}}`` or a
:class:`ToolExample`."""

MAX_EXAMPLES = 8
"""The most examples one tool may declare (each costs prompt tokens on every model call)."""
_MAX_EXAMPLE_CHARS = 300


class ToolOptions(TypedDict, total=False):
    """The options of a tool, as :func:`tool` and :class:`Tool` take them (all optional).

    Keys:
        name: Model-facing name (``^[A-Za-z0-9_-]{1,64}$``); default: the function's name.
        description: Model-facing description; default: the docstring summary.
        read_only: The tool changes nothing (safe to retry and cache). Default ``False``.
        concurrency_safe: May run in parallel with other calls; default: ``read_only``.
        external: The model only emits the call; the caller executes it, not the toolkit
            (the agent stops and returns the call). Default ``False``.
        permission: Level a caller needs: ``user`` (default), ``admin`` or ``system``.
        timeout: Seconds before the call is abandoned (default: the toolkit's, 5 s).
        idempotent: Repeating the call has no further effect (safe to retry). Default
            ``False``.
        strict: Emit an OpenAI strict-mode schema. Default ``False``.
        group: The tool group it belongs to by default (see ``Toolkit``).
        retries: Extra attempts after a transient failure (default: the toolkit's, 2, i.e.
            3 attempts). Only ``read_only`` or ``idempotent`` tools are ever retried.
        rate_limit: Calls allowed per caller, ``"<n>/<second|minute|hour|day>"``, e.g.
            ``"30/minute"`` (default: the toolkit's, unlimited).
        total_rate_limit: Calls allowed for all callers together, same form.
        cache_ttl: Seconds a read-only result is reused for the same caller and arguments.
            Opt-in: without it (or with ``0``) results are never cached. Needs
            ``read_only=True``.
        confirm: A human must approve each call before it runs (see ``Approvals``; writes
            that matter). Default ``False``.
        circuit: Name of a circuit breaker shared with other tools (e.g. one per MCP
            server), on top of the tool's own; only "unreachable" failures
            (``ConnectionError``, ``ToolUnavailableError``) open it. Default: none.
        inline: Run a sync function on the event loop instead of a worker thread. Only for
            fast functions that never block (pure computation): it saves the thread hop
            (two thread wake-ups per call, see :mod:`shelfhand.tools.workers`) but a slow
            inline function stalls every run, and a timeout cannot interrupt it. Default
            ``False``.
        breaker_key: ``(arguments, user) -> target``: the tool's breakers are kept per
            target (e.g. per host), so failures of one target never block others. Default:
            one breaker for the whole tool.
        max_result_chars: Longest result the model reads, in characters; a longer one is cut
            there, with a line saying how long it was (default: the toolkit's, 100,000).
        examples: Up to 8 requests the tool is made for, each a string,
            ``{"request": ..., "arguments": {...}}`` or a :class:`ToolExample` (the arguments
            are checked against the tool's parameters). Shown to the model with the
            description; small local models choose tools by them (docs/benchmarks/history.md, "After
            issue 9 round 4").
    """

    name: str | None
    description: str | None
    read_only: bool
    concurrency_safe: bool | None
    external: bool
    permission: PermissionLevel
    timeout: float | None
    idempotent: bool
    strict: bool
    group: str | None
    retries: int | None
    rate_limit: str | None
    total_rate_limit: str | None
    cache_ttl: float | None
    confirm: bool
    circuit: str | None
    inline: bool
    breaker_key: BreakerKey | None
    max_result_chars: int | None
    examples: Sequence[ExampleSpec]


_OPTIONS = ToolOptions.__optional_keys__


def _check_options(options: ToolOptions, where: str) -> None:
    """Refuse a keyword that is not an option, as a signature would (``**options`` takes any)."""
    unknown = sorted(options.keys() - _OPTIONS)
    if unknown:
        raise TypeError(f"{where} got an unexpected keyword argument {unknown[0]!r}")


class Tool(Generic[P, R]):
    """A function with a model-facing name, description and schema, and a policy.

    Build one with :func:`tool`. Calling the tool calls the function unchanged;
    :meth:`invoke` is the model's way in: it validates arguments, injects context, runs the
    function (sync functions in a worker thread) and serialises the result.

    Attributes:
        name, description, read_only, concurrency_safe, external, permission, timeout,
        idempotent, retries, rate_limit, total_rate_limit, cache_ttl, confirm, circuit,
        breaker_key, inline, strict, group, max_result_chars: The options it was built with (see
            :class:`ToolOptions`), defaults resolved (``concurrency_safe`` is ``read_only``
            unless given; a name or description not given comes from the function).
        examples: Requests the tool is made for (:class:`ToolExample`), shown to the model
            with the description; in :meth:`schema` as ``function["examples"]``.
        func: The wrapped function.
        is_async: Whether ``func`` is a coroutine function.
        injects_run: Whether ``func`` takes the run's ``RunContext`` (injected).
    """

    dedup: bool = True
    """Identical concurrent read-only calls may share one execution (off for results that
    belong to one run, e.g. ``retrieve``'s run-numbered passages)."""

    numbered_elsewhere: bool = False
    """Its results' citations carry numbers of their own (an MCP server's): the toolkit
    numbers them in the calling run, and the passages' lines in the content with them."""

    def __init__(self, func: Callable[P, R], **options: Unpack[ToolOptions]) -> None:
        _check_options(options, "Tool()")
        tool_name: str = options.get("name") or str(getattr(func, "__name__", ""))
        if not _NAME_RE.match(tool_name):
            raise InvalidArgumentError(
                f"tool name {tool_name!r} is not allowed: use 1-64 ASCII letters, digits, "
                "'_' or '-' (pass name=... to @tool)"
            )
        read_only = options.get("read_only", False)
        permission = options.get("permission", "user")
        timeout = options.get("timeout")
        retries = options.get("retries")
        cache_ttl = options.get("cache_ttl")
        rate_limit = options.get("rate_limit")
        total_rate_limit = options.get("total_rate_limit")
        breaker_key = options.get("breaker_key")
        strict = options.get("strict", False)
        permission_rank(permission)  # raises ValueError naming the allowed levels
        if timeout is not None and timeout <= 0:
            raise InvalidArgumentError(f"tool {tool_name}: timeout must be positive, got {timeout}")
        if retries is not None and retries < 0:
            raise InvalidArgumentError(
                f"tool {tool_name}: retries must be 0 or more, got {retries}"
            )
        if cache_ttl is not None and cache_ttl < 0:
            raise InvalidArgumentError(
                f"tool {tool_name}: cache_ttl must be 0 or more, got {cache_ttl}"
            )
        if cache_ttl and not read_only:
            raise InvalidArgumentError(
                f"tool {tool_name}: cache_ttl needs read_only=True (results of tools that "
                "change something are never reused)"
            )
        for limit in (rate_limit, total_rate_limit):
            if limit is not None:
                parse_rate(limit)  # raises ValueError with the accepted forms
        max_result_chars = options.get("max_result_chars")
        if max_result_chars is not None and max_result_chars < 1:
            raise InvalidArgumentError(
                f"tool {tool_name}: max_result_chars must be 1 or more, got {max_result_chars}"
            )
        if breaker_key is not None and not callable(breaker_key):
            raise InvalidArgumentError(f"tool {tool_name}: breaker_key must be a function or None")
        spec = function_schema(func, strict=strict)
        self.examples: tuple[ToolExample, ...] = _examples(
            tool_name, options.get("examples", ()), spec
        )
        self.func = func
        self.name: str = tool_name
        description = options.get("description")
        self.description: str = spec.description if description is None else description
        self.read_only = read_only
        concurrency_safe = options.get("concurrency_safe")
        self.concurrency_safe = read_only if concurrency_safe is None else concurrency_safe
        self.external = options.get("external", False)
        self.permission: PermissionLevel = permission
        self.timeout = timeout
        self.idempotent = options.get("idempotent", False)
        self.strict = strict
        self.group = options.get("group")
        self.retries = retries
        self.rate_limit = rate_limit
        self.total_rate_limit = total_rate_limit
        self.cache_ttl = cache_ttl
        self.confirm = options.get("confirm", False)
        self.circuit = options.get("circuit")
        self.breaker_key = breaker_key
        self.inline = options.get("inline", False)
        self.max_result_chars = max_result_chars
        self.is_async = _is_async(func)
        self.spec: FunctionSchema = spec
        self._schema: dict[str, Any] | None = None
        # Hot-path constants, unpacked once.
        self._validate = _validator(spec.arguments_model)
        self._fields = spec.fields
        self._injected = spec.injected
        # whether the function takes the run's RunContext (then it may read the step)
        self.injects_run = any(kind == "run" for _, kind in spec.injected)
        self._positional = frozenset(spec.positional)
        self._null_defaults = spec.null_means_default
        functools.update_wrapper(self, func, updated=())

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r}, permission={self.permission!r})"

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema (built once; do not mutate it)."""
        if self._schema is None:
            function: dict[str, Any] = {
                "name": self.name,
                "description": self.description,
                "parameters": self.spec.parameters,
            }
            if self.strict:
                function["strict"] = True
            if self.examples:
                function["examples"] = [e.as_dict() for e in self.examples]
            self._schema = {"type": "function", "function": function}
        return self._schema

    def bind(
        self, arguments: Mapping[str, Any], run: RunContext
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Validate ``arguments`` and add injected context: the ``(args, kwargs)`` to call with.

        Raises:
            ToolArgumentError: the arguments do not match the schema; the message says which
                fields are wrong, for the model to fix its call.
        """
        if self._null_defaults:
            arguments = {
                k: v for k, v in arguments.items() if v is not None or k not in self._null_defaults
            }
        try:
            values = self._validate(arguments).__dict__
        except ValidationError as exc:
            raise ToolArgumentError(format_validation_error(self.name, exc)) from None
        kwargs = {param: values[field] for field, param in self._fields}
        for param, kind in self._injected:
            kwargs[param] = run if kind == "run" else run.user
        if not self._positional:
            return (), kwargs
        args = tuple(kwargs.pop(p) for p in self.spec.positional)
        return args, kwargs

    async def invoke(self, arguments: Mapping[str, Any], *, run: RunContext) -> ToolOutput:
        """Validate, inject, call and serialise: the model's way of calling this tool.

        Raises:
            ToolArgumentError: invalid arguments (see :meth:`bind`).
            Exception: whatever the function raises, unchanged.
        """
        args, kwargs = self.bind(arguments, run)
        if self.is_async:
            result = await self.func(*args, **kwargs)  # type: ignore[misc]
        elif self.inline:
            result = self.func(*args, **kwargs)
        else:
            # a worker thread (see .workers): on cancel the call is abandoned, a timed-out
            # sync tool cannot be stopped, only not waited for; context variables travel
            result = await run_sync(self.func, *args, **kwargs)
        return serialise_result(result)


def _examples(
    tool_name: str, declared: Sequence[ExampleSpec], spec: FunctionSchema
) -> tuple[ToolExample, ...]:
    """Check the declared examples: a non-empty request each, arguments that the tool would
    accept. A wrong example fails at declaration, not in front of the model."""
    if isinstance(declared, str | Mapping | ToolExample):
        raise InvalidArgumentError(f"tool {tool_name}: examples must be a list of examples")
    if len(declared) > MAX_EXAMPLES:
        raise InvalidArgumentError(
            f"tool {tool_name}: at most {MAX_EXAMPLES} examples (each one is sent to the model "
            f"on every call), got {len(declared)}"
        )
    out: list[ToolExample] = []
    for number, item in enumerate(declared, 1):
        where = f"tool {tool_name}, example {number}"
        if isinstance(item, str):
            example = ToolExample(item)
        elif isinstance(item, ToolExample):
            example = item
        elif isinstance(item, Mapping):
            if unknown := set(item) - {"request", "arguments"}:
                raise InvalidArgumentError(
                    f"{where}: unknown key(s) {sorted(unknown)} (request, arguments)"
                )
            arguments = item.get("arguments")
            if arguments is not None and not isinstance(arguments, Mapping):
                raise InvalidArgumentError(f"{where}: arguments must be an object")
            example = ToolExample(str(item.get("request") or ""), arguments)
        else:
            raise InvalidArgumentError(f"{where}: expected a request string or an object")
        if not isinstance(example.request, str) or not example.request.strip():
            raise InvalidArgumentError(f"{where}: the request must be non-empty text")
        if len(example.request) > _MAX_EXAMPLE_CHARS:
            raise InvalidArgumentError(
                f"{where}: the request is longer than {_MAX_EXAMPLE_CHARS} characters"
            )
        if example.arguments is not None:
            try:
                spec.arguments_model.model_validate(dict(example.arguments))
            except ValidationError as exc:
                problem = format_validation_error(tool_name, exc).split(": ", 1)[1]
                raise InvalidArgumentError(f"{where}: {problem.split('. Fix')[0]}") from None
            example = ToolExample(example.request.strip(), dict(example.arguments))
        else:
            example = ToolExample(example.request.strip())
        out.append(example)
    return tuple(out)


def _validator(model: type[BaseModel]) -> Callable[[Any], BaseModel]:
    """``model.model_validate``, without its Python wrapper when the model is complete (its
    schema validator built): the validator's own method, the same validation."""
    validator = model.__pydantic_validator__
    if isinstance(validator, pydantic_core.SchemaValidator):
        return validator.validate_python  # type: ignore[no-any-return]
    return model.model_validate  # a model that still has to be rebuilt builds on first use


def _is_async(func: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 - a callable object's async __call__
    return inspect.iscoroutinefunction(call)


def serialise_result(result: Any) -> ToolOutput:
    """Turn a tool's return value into what the model reads.

    ``str`` as is; a :class:`ToolOutput` unchanged; ``None`` → ``"done"``; anything else
    (pydantic models, dataclasses, dicts, lists, numbers) → compact JSON, non-ASCII kept.
    """
    if isinstance(result, str):
        return _output(result, None)
    if isinstance(result, ToolOutput):
        return result
    if result is None:
        return _output(_DONE, None)
    # Unknown objects fall back to str() rather than failing a call that already happened.
    try:
        content = pydantic_core.to_json(result, fallback=str)
    except pydantic_core.PydanticSerializationError as exc:
        raise ToolError(f"its result could not be written as JSON: {_why_not_json(exc)}") from None
    return _output(content.decode("utf-8"), result)


def _why_not_json(exc: pydantic_core.PydanticSerializationError) -> str:
    """What pydantic's serialisation error means: its "Circular reference detected (depth
    exceeded)" is said of a list nested a few hundred levels deep, which refers to nothing."""
    text = str(exc)
    if "depth exceeded" in text:
        return "it is nested too deeply (more than 250 levels of lists or objects)"
    if "id repeated" in text:
        return "it contains itself (a circular reference)"
    return text.removeprefix("Error serializing to JSON: ")


_OutputFields = twin(ToolOutput)


def _output(content: str, data: Any) -> ToolOutput:
    """``ToolOutput(content=content, data=data)``: one per tool call, built as a twin (see
    :mod:`shelfhand.core.slots`)."""
    output = _OutputFields()
    output.content = content
    output.citations = ()
    output.is_error = False
    output.data = data
    output.__class__ = ToolOutput
    built: ToolOutput = output
    return built


def format_validation_error(tool_name: str, exc: ValidationError) -> str:
    """A message that tells the model which arguments are wrong and how."""
    problems: list[str] = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        kind = err["type"]
        if kind == "missing":
            problems.append(f"{where}: missing (required)")
        elif kind == "extra_forbidden":
            problems.append(f"{where}: unexpected argument")
        else:
            got = repr(err.get("input"))
            if len(got) > 80:
                got = got[:77] + "..."
            problems.append(f"{where}: {err['msg']} (got {got})")
    return (
        f"invalid arguments for tool {tool_name}: "
        + "; ".join(problems)
        + ". Fix these arguments and call the tool again."
    )


@overload
def tool(func: Callable[P, R], /) -> Tool[P, R]: ...


@overload
def tool(**options: Unpack[ToolOptions]) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    func: Callable[P, R] | None = None, /, **options: Unpack[ToolOptions]
) -> Tool[P, R] | Callable[[Callable[P, R]], Tool[P, R]]:
    """Make a function a :class:`Tool`; use bare (``@tool``) or with options (``@tool(...)``).

    Args:
        func: The function (sync or async). Parameters typed ``RunContext`` / ``UserContext``
            are injected and hidden from the model.
        **options: The tool's options (:class:`ToolOptions`: ``name``, ``read_only``,
            ``permission``, ``timeout``, ``retries``, ``rate_limit``, ``cache_ttl``,
            ``confirm``, ``circuit``, ``breaker_key``, ``examples``, ...).

    Governance (timeouts, retries, rate limits, cache, breaker, confirmation, audit) is applied
    by :class:`~shelfhand.tools.toolkit.Toolkit` from these attributes; calling the tool
    directly bypasses it.

    Raises:
        ValueError: a bad name, permission level or timeout, a strict schema that cannot
            be expressed, or an example that is empty or has arguments the tool rejects.
        TypeError: unresolvable type hints, ``*args``/``**kwargs`` parameters, or a keyword
            that is not an option.
    """
    _check_options(options, "tool()")

    def wrap(f: Callable[P, R]) -> Tool[P, R]:
        if isinstance(f, Tool):
            f = f.func
        return Tool(f, **options)

    if func is not None:
        return func if isinstance(func, Tool) else wrap(func)
    return wrap
