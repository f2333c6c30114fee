"""Cascades: try the small tier first, escalate to the large one when a check rejects the
answer.

A :class:`Cascade` names two or more tiers of a :class:`~llmguard_sdk.router.TaskRouter`,
cheapest first. Each tier but the last answers under the cascade's checks: when one rejects
the answer (it is not valid JSON or not of the schema, a validator of yours says no, it was
cut at ``max_tokens``, paused unfinished or stopped by a content filter), or an output filter
of the Guard refuses it, or every route of the tier failed, the call goes on to the next tier.
The last tier's answer is served unchecked.

A check is any ``check(request, response) -> str | None``: ``None`` accepts the answer, a
string is the reason it was rejected (the call's span reports it as it is; the metric
``llmguard.cascade.calls`` labels a reason that is not the SDK's own ``custom``). The ones here:
:func:`finish_reason`, :func:`json_schema`, :func:`not_empty`, :func:`validator`.

Every tier's call is a call of its own for budgets (reserved and settled each), rate limits,
breakers and the cache (a rejected answer is never cached); the response the caller gets
carries the cascade's total ``cost_usd`` and, in ``metadata["cascade"]``, each tier tried,
its cost and why it was rejected. A cascade's stream is buffered: an answer must pass the
checks before the caller sees any of it, so ``stream=True`` on a call whose tier is a cascade
runs the cascade as a plain call and delivers the served answer as one chunk (no token by
token delivery; its first token comes with the whole answer). Route streams that need tokens
as they come to a plain tier with a rule.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..models import ChatRequest, ChatResponse, openai_finish_reason

__all__ = ["Cascade", "Check", "finish_reason", "json_schema", "not_empty", "validator"]

Check = Callable[[ChatRequest, ChatResponse], str | None]
"""``check(request, response)``: ``None`` accepts the answer, a string says why not."""


@dataclass(frozen=True)
class Cascade:
    """Tiers tried cheapest first; the answer of each but the last must pass ``checks``.

    Args:
        tiers: two or more tier names of the :class:`~llmguard_sdk.router.TaskRouter`.
        checks: run in order on each answer of a tier but the last; the first to reject it
            sends the call to the next tier (default: :func:`finish_reason`).
        on_error: escalate when every route of a tier failed (a provider error each
            route's fault, open breakers, no rate-limit room), instead of raising. An error
            of the request itself that stops the tier's chain (a 400, a content policy
            refusal: one the Guard's ``moves_on`` does not move on from) is raised, as a
            plain chain raises it. An output filter that ran past the call's deadline is
            raised (the next tier would have no time left).
        on_output_filter: escalate when an output filter of the Guard refuses a tier's
            answer (a :class:`~llmguard_sdk.errors.GuardrailRejectedError`), instead of
            raising.
    """

    tiers: Sequence[str]
    checks: Sequence[Check] = ()
    on_error: bool = True
    on_output_filter: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.tiers, Sequence) or not isinstance(self.checks, Sequence):
            raise ConfigurationError("a cascade takes a list of tiers and a list of checks")
        tiers = tuple(self.tiers) if not isinstance(self.tiers, str) else (self.tiers,)
        if not all(isinstance(tier, str) for tier in tiers):
            raise ConfigurationError(f"a cascade's tiers are tier names, got {tiers}")
        if len(tiers) < 2 or len(set(tiers)) != len(tiers):
            raise ConfigurationError(f"a cascade needs two or more distinct tiers, got {tiers}")
        checks = tuple(self.checks) or (finish_reason(),)
        for check in checks:
            if not callable(check):
                raise ConfigurationError(f"cascade check {check!r} is not callable")
        object.__setattr__(self, "tiers", tiers)
        object.__setattr__(self, "checks", checks)

    def rejects(self, request: ChatRequest, response: ChatResponse) -> str | None:
        """Why the first check that rejects ``response`` does, or ``None``."""
        for check in self.checks:
            reason = check(request, response)
            if reason is not None and not isinstance(reason, str):
                raise ConfigurationError(
                    f"cascade check {check!r} returned {reason!r}: a check returns None "
                    "(accepted) or the reason (a string); wrap a yes/no test in validator()"
                )
            if reason is not None:
                return reason
        return None


def finish_reason(*rejected: str) -> Check:
    """Reject an answer that ended for one of ``rejected`` (default: the incomplete ones,
    :data:`~llmguard_sdk.models.INCOMPLETE_FINISH_REASONS` in any case: ``length``, cut at
    ``max_tokens``, Claude's ``pause_turn``, a server's own word for a cut answer such as
    Mistral's ``model_length``; and the refused or blocked ones, ``content_filter``, Claude's
    ``refusal`` or Gemini's ``SAFETY`` relayed raw); the reason is
    ``finish_reason:<value>``, the value as the answer said it."""
    refused = frozenset(rejected)

    def rejects(reason: str | None) -> bool:
        if refused:
            return reason in refused
        return openai_finish_reason(reason) in ("length", "content_filter")

    def check(request: ChatRequest, response: ChatResponse) -> str | None:
        if rejects(response.finish_reason):
            return f"finish_reason:{response.finish_reason}"
        return None

    return check


def not_empty() -> Check:
    """Reject an answer with no text and no tool calls (reason ``empty``)."""

    def check(request: ChatRequest, response: ChatResponse) -> str | None:
        return None if response.text.strip() or response.tool_calls else "empty"

    return check


def validator(accept: Callable[[ChatResponse], bool], *, reason: str = "validator") -> Check:
    """Reject an answer ``accept(response)`` says no to (reason ``reason``)."""
    if not callable(accept):
        raise ConfigurationError(f"validator {accept!r} is not callable")

    def check(request: ChatRequest, response: ChatResponse) -> str | None:
        return None if accept(response) else reason

    return check


def json_schema(schema: Mapping[str, Any] | None = None) -> Check:
    """Reject an answer whose text is not JSON of ``schema`` (reason ``json_schema``).

    Without ``schema``: the one of the request's ``response_format`` (``json_schema``), else
    any JSON value. The schema subset checked: ``type``, ``enum``, ``const``, ``required``,
    ``properties``, ``additionalProperties: false``, ``items``, ``minimum``, ``maximum``,
    ``minLength``, ``maxLength``, ``minItems``, ``maxItems``. An answer in a Markdown code
    fence is read inside it.
    """
    if schema is not None and not isinstance(schema, Mapping):  # ("x" raised ValueError)
        raise ConfigurationError(f"json_schema needs a JSON schema object, got {schema!r:.60}")
    fixed = dict(schema) if schema is not None else None

    def check(request: ChatRequest, response: ChatResponse) -> str | None:
        try:
            value = json.loads(_unfenced(response.text))
        except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
            return "json_schema"
        wanted = fixed if fixed is not None else _requested_schema(request)
        return None if wanted is None or _fits(value, wanted) else "json_schema"

    return check


def _unfenced(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) > 6:
        inner = stripped[3:-3]
        if inner[:4].lower() != "json":
            return inner
        _tag, newline, rest = inner.partition("\n")  # the tag, alone on its line or not
        return rest if newline else inner[4:]
    return stripped


def _requested_schema(request: ChatRequest) -> dict[str, Any] | None:
    spec = (request.response_format or {}).get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def _fits(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether ``value`` is of ``schema`` (the subset :func:`json_schema` names)."""
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    if kinds and not any(_TYPES.get(k, lambda v: True)(value) for k in kinds):
        return False
    if "enum" in schema and not any(_equal(value, item) for item in schema["enum"]):
        return False
    if "const" in schema and not _equal(value, schema["const"]):
        return False
    if not _in_bounds(value, schema):
        return False
    if isinstance(value, dict):
        return _object_fits(value, schema)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return all(_fits(item, schema["items"]) for item in value)
    return True


def _equal(value: Any, other: Any) -> bool:
    """JSON equality: a boolean is no number (Python's ``True == 1`` is not JSON's)."""
    if isinstance(value, bool) or isinstance(other, bool):
        return isinstance(value, bool) and isinstance(other, bool) and value == other
    if isinstance(value, list) and isinstance(other, list):
        return len(value) == len(other) and all(map(_equal, value, other))
    if isinstance(value, dict) and isinstance(other, dict):
        return value.keys() == other.keys() and all(_equal(value[k], other[k]) for k in value)
    return bool(value == other)


def _bound(schema: Mapping[str, Any], name: str) -> float | None:
    """``schema[name]`` when it is a number (anything else bounds nothing)."""
    value = schema.get(name)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _in_bounds(value: Any, schema: Mapping[str, Any]) -> bool:
    size: float  # an int of any size: compared exactly, never through float() (OverflowError)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high, size = _bound(schema, "minimum"), _bound(schema, "maximum"), value
    elif isinstance(value, str):
        low, high, size = _bound(schema, "minLength"), _bound(schema, "maxLength"), len(value)
    elif isinstance(value, list):
        low, high, size = _bound(schema, "minItems"), _bound(schema, "maxItems"), len(value)
    else:
        return True
    if isinstance(size, float) and not math.isfinite(size):
        return False
    return (low is None or size >= low) and (high is None or size <= high)


def _object_fits(value: dict[str, Any], schema: Mapping[str, Any]) -> bool:
    required = schema.get("required") or ()
    if not all(key in value for key in required):
        return False
    properties = schema.get("properties") or {}
    if schema.get("additionalProperties") is False and set(value) - set(properties):
        return False
    return all(
        _fits(value[key], sub)
        for key, sub in properties.items()
        if key in value and isinstance(sub, Mapping)
    )
