"""Attribute helpers of :mod:`~llmguard_sdk.telemetry._otel`: what a call's scope, answer and
route tell, under the names of the chosen conventions."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._state.stores import hash_id
from ..errors import ConfigurationError
from ._redacting import redacted
from ._semconv import Names
from .redaction import redact, redact_secrets

if TYPE_CHECKING:
    from ..context import CallContext, RetryDetails, Scope
    from ..models import ChatRequest, ChatResponse, Usage
    from ..providers.base import Provider

__all__ = [
    "Attributes",
    "add_first_chunk",
    "add_request",
    "add_response",
    "add_scope",
    "add_server",
    "add_unserved",
    "call_route",
    "captured",
    "check_options",
    "error_status",
    "exception_type",
    "input_messages",
    "operation",
    "provider_name",
    "quality_labels",
    "requested_model",
    "route_named",
    "route_of",
    "scope_label",
    "wall_ns",
]

Attributes = dict[str, Any]
_SHORTEST_ID = 4  # a tenant or user id this long is masked wherever an error names it
_OUTPUT_TYPES = {"text": "text", "json_object": "json", "json_schema": "json"}  # response_format
_EXTRA_NUMBERS = (  # extra_body parameters the conventions name: (key, attribute, type)
    ("frequency_penalty", "gen_ai.request.frequency_penalty", float),
    ("presence_penalty", "gen_ai.request.presence_penalty", float),
    ("n", "gen_ai.request.choice.count", int),
)
_PROVIDER_NAMES = {
    "AnthropicProvider": "anthropic",
    "LocalProvider": "llama.cpp",
    "OpenAICompatibleProvider": "openai",
}


def check_options(max_content_chars: int, log_level: int | None) -> tuple[int, int | None]:
    """``Telemetry``'s ``max_content_chars`` and ``log_level``, checked: a level that is no
    number (``"INFO"``) failed every call's log record, a negative count cut content."""
    if log_level is not None and (isinstance(log_level, bool) or not isinstance(log_level, int)):
        raise ConfigurationError(f"log_level must be a level number or None, not {log_level!r}")
    if isinstance(max_content_chars, bool) or not isinstance(max_content_chars, int):
        raise ConfigurationError(f"max_content_chars must be an int, not {max_content_chars!r}")
    if max_content_chars < 0:
        raise ConfigurationError(f"max_content_chars must be >= 0, not {max_content_chars}")
    return max_content_chars, log_level


def error_status(error: BaseException, scope: Scope) -> str:
    """A span's status text for ``error``: its message with credentials, e-mail addresses,
    phone and card numbers, SSNs and IBANs masked (a provider's error may quote the prompt),
    the call's tenant id hashed as the ``llmguard.tenant`` attribute has it and its user id masked
    (a budget's refusal names its scope, ``tenant:acme``), cut to 500 characters."""
    text = redact(str(error))
    for kind, value, shown in (
        ("tenant", scope.tenant, hash_id(scope.tenant) if scope.tenant else ""),
        ("user", scope.user, "[user]"),
    ):
        if value:
            text = text.replace(f"{kind}:{value}", f"{kind}:{shown}")
            if len(value) >= _SHORTEST_ID:  # shorter ones: too likely ordinary words
                text = text.replace(value, shown)
    return text[:500]


def exception_type(error: BaseException) -> str:
    """The exception conventions' ``exception.type``: the class's fully qualified name
    (``llmguard_sdk.errors.AllRoutesFailedError``; a builtin's bare, ``TimeoutError``)."""
    cls = type(error)
    module = cls.__module__
    return cls.__qualname__ if module in (None, "builtins") else f"{module}.{cls.__qualname__}"


def input_messages(text: str) -> str:
    """``gen_ai.input.messages`` holding one user message of ``text`` (captured, redacted),
    as the conventions' input messages JSON schema has it (a JSON string on spans)."""
    message = {"role": "user", "parts": [{"type": "text", "content": text}]}
    return json.dumps([message], ensure_ascii=False)


def captured(redact: Callable[[str], str], text: str, max_chars: int) -> str:
    """``text`` as captured content: credentials masked, ``redact`` applied, cut to
    ``max_chars``. A ``redact`` that fails (raises, or gives no string) costs the content
    alone, never the call's spans and points: ``[redaction failed]`` in its place (logged
    once, then counted; by the error's class, whose message may quote the content)."""
    return redacted(redact, text)[:max_chars]


def provider_name(route: Provider | None) -> str:
    """The ``gen_ai.provider.name`` of a route (``openai`` for any OpenAI-compatible one)."""
    if route is None:
        return "unknown"
    named = getattr(route, "provider_name", None)
    if isinstance(named, str):
        return named
    for cls in type(route).__mro__:
        if cls.__name__ in _PROVIDER_NAMES:
            return _PROVIDER_NAMES[cls.__name__]
    return type(route).__name__.lower()


def add_server(attributes: Attributes, route: Provider | None) -> None:
    """The ``server.address`` and ``server.port`` of ``route``, as it read them off its base
    URL when it was made (a route without them, a local model or your own: none)."""
    address = getattr(route, "server_address", None)
    if isinstance(address, str) and address:
        attributes["server.address"] = address
        port = getattr(route, "server_port", None)
        if isinstance(port, int):
            attributes["server.port"] = port


def operation(
    names: Names, route: Provider | None, model: str, *, server: bool = True
) -> Attributes:
    """What names a call's GenAI operation, known as it starts and given to the sampler then
    (the attributes the conventions ask at span creation): the operation, the provider of
    ``route`` (the one it goes to first) and its server (unless ``server`` is false: no
    request went out), the requested ``model``."""
    attributes: Attributes = {
        "gen_ai.operation.name": "chat",
        names.provider: provider_name(route),
        "gen_ai.request.model": model,
    }
    if server:
        add_server(attributes, route)
    return attributes


def route_named(routes: Sequence[Provider], name: str | None) -> Provider | None:
    """The route called ``name`` (route names are unique), or None."""
    for route in routes:
        if route.name == name:
            return route
    return None


def route_of(ctx: CallContext, routes: Sequence[Provider], name: str | None) -> Provider | None:
    """The route called ``name`` among the Guard's ``routes`` or the call's own (ranked
    for it: a deployment group's, a release's, a tier's), or None."""
    return route_named(routes, name) or route_named(ctx.route_order, name)


def call_route(ctx: CallContext, routes: Sequence[Provider]) -> Provider | None:
    """The route a call goes to first: its first attempt's, else the first of its ranked
    routes (none yet, or none at all: a cache hit), else the Guard's first."""
    if ctx.attempt_log:
        return route_of(ctx, routes, ctx.attempt_log[0].route)
    order = ctx.route_order or routes
    return order[0] if order else None


def requested_model(ctx: CallContext, route: Provider | None) -> str:
    """``gen_ai.request.model``: the request's model, else the model of the call's first
    ``route`` ("" if neither names one)."""
    return ctx.request.model or (route.model if route is not None else None) or ""


def add_request(attributes: Attributes, request: ChatRequest) -> None:
    """The request's parameters the conventions name: ``max_tokens``, ``temperature``,
    ``top_p``, ``stop_sequences``, ``seed``, the penalties and ``choice.count`` (which only
    ``extra_body`` carries), and ``gen_ai.output.type`` when a ``response_format`` asks."""
    if request.output_limit is not None:
        attributes["gen_ai.request.max_tokens"] = request.output_limit
    if request.temperature is not None:
        attributes["gen_ai.request.temperature"] = float(request.temperature)
    if request.top_p is not None:
        attributes["gen_ai.request.top_p"] = float(request.top_p)
    if request.stop is not None:
        stop = [request.stop] if isinstance(request.stop, str) else request.stop
        attributes["gen_ai.request.stop_sequences"] = list(stop)
    if request.seed is not None:
        attributes["gen_ai.request.seed"] = request.seed
    extra = request.extra_body or {}
    for key, name, kind in _EXTRA_NUMBERS:
        value = extra.get(key)
        if isinstance(value, kind if kind is int else (int, float)) and not isinstance(value, bool):
            attributes[name] = kind(value)
    output = (request.response_format or {}).get("type")
    if isinstance(output, str) and output in _OUTPUT_TYPES:
        attributes["gen_ai.output.type"] = _OUTPUT_TYPES[output]


def add_scope(attributes: Attributes, scope: Scope, retries: Sequence[RetryDetails]) -> None:
    """A call's feature, its tenant (hashed) and the time it waited between retries."""
    if scope.feature is not None:
        attributes["llmguard.feature"] = scope.feature
    if scope.tenant is not None:
        attributes["llmguard.tenant"] = hash_id(scope.tenant)
    if retries:
        attributes["llmguard.retry_wait_s"] = round(sum(r.wait for r in retries), 6)


def quality_labels(ctx: CallContext, call: Attributes) -> Attributes:
    """The labels of a call's quality signals and feedback: feature, route, release."""
    labels: Attributes = {}
    if ctx.scope.feature is not None:
        labels["llmguard.feature"] = ctx.scope.feature
    if "llmguard.served_by" in call:
        labels["llmguard.served_by"] = call["llmguard.served_by"]
    release = ctx.release or (ctx.request.metadata or {}).get("release")
    if release:
        labels["llmguard.release"] = release
    return labels


def scope_label(scope: str) -> str:
    """A budget scope as a metric attribute: ``"tenant:acme"`` -> ``"tenant"`` (user ids
    too: a series per tenant, even hashed, grew the meter's state with every tenant ever
    seen); a feature's or tag's scope, a fixed set, as it is (``"feature:faq"``)."""
    kind, _, _value = scope.partition(":")
    return kind if kind in ("tenant", "user") else scope


def wall_ns(ctx: CallContext, instant: float) -> int:
    """A ``time.monotonic`` instant of this call as Unix nanoseconds (for span times)."""
    return ctx.started_ns + int((instant - ctx.started) * 1e9)


def add_first_chunk(attributes: Attributes, ctx: CallContext, names: Names) -> None:
    """A stream's time to its first chunk (``gen_ai.response.time_to_first_chunk``, today's
    conventions only): from the request of the attempt that streamed the answer."""
    if names.first_chunk is None:
        return
    for attempt in reversed(ctx.attempt_log):
        if attempt.first_token_at is not None:
            attributes[names.first_chunk] = attempt.first_token_at - attempt.started
            return


def add_response(attributes: Attributes, response: ChatResponse, names: Names) -> None:
    """What a call's answer tells: who served it, its model, id, finish reason, usage, cost."""
    attributes["llmguard.served_by"] = response.route
    if response.model:
        attributes["gen_ai.response.model"] = response.model
    if response.id:
        attributes["gen_ai.response.id"] = redact_secrets(response.id)
    if response.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = [response.finish_reason]
    if response.usage is not None:
        attributes["gen_ai.usage.input_tokens"] = response.usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = response.usage.output_tokens
        if response.usage.cached_input_tokens:
            attributes[names.cache_read_tokens] = response.usage.cached_input_tokens
        if response.usage.cache_write_input_tokens:
            attributes[names.cache_creation_tokens] = response.usage.cache_write_input_tokens
        if response.usage.reasoning_tokens:
            attributes[names.reasoning_tokens] = response.usage.reasoning_tokens
        attributes["llmguard.usage.estimated"] = response.usage.estimated
    if response.cost_usd is not None:
        attributes["llmguard.cost_usd"] = response.cost_usd
        attributes["llmguard.cost_source"] = response.cost_source or "unknown"
    if response.metadata.get("degraded"):
        attributes["llmguard.degraded"] = True


def add_unserved(attributes: Attributes, usage: Usage | None, usd: float | None) -> None:
    """What the attempts of a call that ended without an answer used (``usage``: tokens,
    ``llmguard.usage.estimated`` where counted here) and cost (``usd``, estimated), as its
    budgets were charged for them; nothing where none went out."""
    if usage is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        attributes["llmguard.usage.estimated"] = usage.estimated
    if usd is not None:
        attributes["llmguard.cost_usd"] = usd
        attributes["llmguard.cost_source"] = "estimated"
