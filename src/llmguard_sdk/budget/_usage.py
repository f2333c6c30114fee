"""Every provider's usage object read into one :class:`~llmguard_sdk.models.Usage`.

Shapes, all ending with ``input_tokens`` = every input token (cache reads and writes among
them) and ``output_tokens`` = every output token (reasoning among them):

* OpenAI chat completions (also the last chunk of a stream with ``include_usage``):
  ``prompt_tokens`` (cache reads and writes included), ``prompt_tokens_details.cached_tokens``
  and ``.cache_write_tokens`` (every write), split by retention in
  ``.cache_write_tokens_details.ttl_30m_tokens`` / ``.ttl_12h_tokens``, ``completion_tokens``
  (reasoning included), ``completion_tokens_details.reasoning_tokens``; the tier is the
  response's top-level ``service_tier``; the audio among them,
  ``prompt_tokens_details.audio_tokens`` and ``completion_tokens_details.audio_tokens``
  (OpenAI's audio models, Gemini's OpenAI-compatible endpoint), billed at audio rates. A
  usage that reports writes without that split may give the 12-hour ones flat, as
  ``.cache_write_12h_tokens`` (the name of OpenAI's usage API,
  ``input_cache_write_12h_tokens``; a proxy's flattening of the split): read as the same count.
  DeepSeek's OpenAI-compatible usage gives its cache reads as ``prompt_cache_hit_tokens`` (and
  the rest of the input as ``prompt_cache_miss_tokens``; the two sum to ``prompt_tokens``):
  read as the cached tokens, once where ``prompt_tokens_details.cached_tokens`` counts them too.
* OpenAI Responses API: ``input_tokens`` (cache reads and writes included),
  ``input_tokens_details.cached_tokens``, ``.cache_write_tokens`` and its
  ``.cache_write_tokens_details``, as above, ``output_tokens`` (reasoning included),
  ``output_tokens_details.reasoning_tokens`` (and any ``audio_tokens`` in both details, as
  chat's). OpenAI's newer models bill a cache write above
  an input token (30-minute retention: 1.25x, the price table's ``cache_write``; 12-hour
  retention: 2x, its ``cache_write_12h``); the others report none, or price it as input. How
  long the writes are kept is their ``prompt_cache_options.ttl``; ``prompt_cache_retention``
  (``"24h"``) is a maximum retention, which does not change their price.
* Anthropic messages (and the merged ``message_start`` / ``message_delta`` usage of a
  stream): ``input_tokens`` *without* ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens``, the writes split by TTL in
  ``cache_creation.ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``;
  ``output_tokens`` counts thinking; ``usage.service_tier`` is ``standard``, ``priority`` or
  ``batch``; ``server_tool_use.web_search_requests`` counts the web searches Claude ran
  (billed per search; the stream's ``message_delta`` gives the call's total).

A count the parser reads above :data:`MOST_TOKENS` is no count (a provider's bad answer): the
usage is unusable, as a missing one is (the Guard estimates it), and a warning says so. Only
the counts read are checked, a few lookups per call whatever else a usage holds (image,
per-modality details); a count not read cannot make a usage unusable. A
:class:`~llmguard_sdk.models.Usage` that a provider object reports with such a count is
unusable too (:func:`usable_usage`). A reported cost counts only in [0, 1e12) USD
(:func:`usable_cost`).

Both bounds are needed, each for its own input: :func:`usage_from_payload` reads what a
provider sent (the SDK's providers' answers and stream chunks, ``guard.protect``'s results,
which pass no route) and sees the detail counts a
:class:`~llmguard_sdk.models.Usage` no longer holds (a cached count is clamped to the
input); :func:`usable_usage` bounds the usage of any route's answer, a provider object's of the
user's own among them. A usage the parser built is bounded already: :func:`usable_usage`
passes it without reading its counts again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from ..models import _MOST_OUTPUT_TOKENS, Usage
from ..telemetry._repeats import log_repeated

__all__ = ["MOST_TOKENS", "plain_usage", "usable_cost", "usable_usage", "usage_from_payload"]

MOST_TOKENS = _MOST_OUTPUT_TOKENS
"""The most tokens one usage count may report, 2**31 - 1: ``max_tokens``'s bound (an int32, as
the chat APIs take), far above any model's context window. A larger count (``10**400`` made the rate
limit's settle an OverflowError; 2**31 drained the limits and budgets) is the provider's
error, not a count."""

_ANTHROPIC = ("cache_read_input_tokens", "cache_creation_input_tokens", "cache_creation")


Path = tuple[str, ...]


def _fields(*names: str) -> tuple[Path, ...]:
    """Dotted names as paths of keys (``a.b``: ``raw["a"]["b"]``)."""
    return tuple(tuple(name.split(".")) for name in names)


# the counts each shape's parser reads, in the order it reads them: the only ones checked
# against MOST_TOKENS (a few lookups, whatever else a usage holds)
_CHAT = _fields(
    "prompt_tokens",
    "completion_tokens",
    "prompt_tokens_details.cached_tokens",
    "prompt_tokens_details.cache_write_tokens",
    "completion_tokens_details.reasoning_tokens",
    "prompt_tokens_details.cache_write_tokens_details.ttl_30m_tokens",
    "prompt_tokens_details.cache_write_tokens_details.ttl_12h_tokens",
)
_RESPONSES = _fields(
    "input_tokens",
    "output_tokens",
    "input_tokens_details.cached_tokens",
    "input_tokens_details.cache_write_tokens",
    "output_tokens_details.reasoning_tokens",
    "input_tokens_details.cache_write_tokens_details.ttl_30m_tokens",
    "input_tokens_details.cache_write_tokens_details.ttl_12h_tokens",
    "output_tokens_details.thinking_tokens",
)
# the 12-hour writes given flat beside the total (chat, responses): read for a call that
# wrote to the cache without the split above, one lookup more
_FLAT_12H = (
    _fields("prompt_tokens_details.cache_write_12h_tokens"),
    _fields("input_tokens_details.cache_write_12h_tokens"),
)
# the audio tokens among the input and among the output (chat, responses): two lookups more
_AUDIO = (
    _fields("prompt_tokens_details.audio_tokens", "completion_tokens_details.audio_tokens"),
    _fields("input_tokens_details.audio_tokens", "output_tokens_details.audio_tokens"),
)
# a Predicted Output's tokens accepted and rejected (chat): two lookups more
_PREDICTION = _fields(
    "completion_tokens_details.accepted_prediction_tokens",
    "completion_tokens_details.rejected_prediction_tokens",
)
# DeepSeek's cache reads and the rest of its input, beside prompt_tokens (chat): two lookups
_HIT_MISS = _fields("prompt_cache_hit_tokens", "prompt_cache_miss_tokens")
_MESSAGES = _fields(
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens_details.reasoning_tokens",
    "cache_creation.ephemeral_5m_input_tokens",
    "cache_creation.ephemeral_1h_input_tokens",
    "output_tokens_details.thinking_tokens",
)

logger = logging.getLogger("llmguard_sdk")

# the usage the parser built last in this thread (bounded as it was read): the route's answer
# that carries it is not bounded again (a usage is frozen: the same object, the same counts)
_parsed = threading.local()


def _count(value: object) -> int | None:
    """A token count, or None for anything that is not one."""
    if type(value) is int:  # (nearly every count: one test, no bool or subclass to rule out)
        return value if value >= 0 else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _read(raw: Mapping[str, Any], fields: tuple[Path, ...]) -> list[object]:
    """The values of ``fields`` in ``raw``: a top-level one as it is (0 when absent), a
    detail's a count (0 when absent or not a count)."""
    found: list[object] = []
    for path in fields:
        if len(path) == 1:
            found.append(raw.get(path[0], 0))
            continue
        value: object = raw
        for key in path:  # (a dict, as parsed JSON is, before the slower Mapping check)
            if type(value) is not dict and (value is None or not isinstance(value, Mapping)):
                value = None
                break
            value = value.get(key)
        found.append(_count(value) or 0)
    return found


def _absurd(fields: tuple[Path, ...], values: list[object]) -> str | None:
    """The name of the first of the counts read (``values`` of ``fields``) above
    :data:`MOST_TOKENS`, if any."""
    for path, value in zip(fields, values, strict=True):
        if type(value) is int:  # (nearly every count: one test)
            if value > MOST_TOKENS:
                return ".".join(path)
        elif isinstance(value, int) and not isinstance(value, bool) and value > MOST_TOKENS:
            return ".".join(path)
    return None


def _warn_absurd(name: str) -> None:
    """Say (once, then counted) that a usage's count ``name`` was above :data:`MOST_TOKENS`."""
    log_repeated(
        logger,
        logging.WARNING,
        "usage:absurd",
        "llmguard: a provider reported usage.%s above %d tokens; the call's usage is "
        "estimated instead",
        name,
        MOST_TOKENS,
    )


def usable_usage(usage: Usage | None) -> Usage | None:
    """``usage`` as a provider object reported it, or ``None`` (estimate it) when one of its
    counts is above :data:`MOST_TOKENS` (warned as a parsed usage's is): a
    :class:`~llmguard_sdk.models.Usage` built by a provider of the user's own passed no
    parser, and ``10**400`` made the rate limit's settle an OverflowError."""
    if usage is None or usage is getattr(_parsed, "usage", None):
        return usage  # (none, or the parser's own)
    counts = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_input_tokens": usage.cached_input_tokens,
        "cache_write_input_tokens": usage.cache_write_input_tokens,
        "cache_write_1h_input_tokens": usage.cache_write_1h_input_tokens,
        "cache_write_12h_input_tokens": usage.cache_write_12h_input_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "audio_input_tokens": usage.audio_input_tokens,
        "audio_output_tokens": usage.audio_output_tokens,
        "accepted_prediction_tokens": usage.accepted_prediction_tokens,
        "rejected_prediction_tokens": usage.rejected_prediction_tokens,
        "web_search_requests": usage.web_search_requests,
        "file_search_calls": usage.file_search_calls,
        "code_executions": usage.code_executions,
    }
    if max(counts.values()) <= MOST_TOKENS:  # (every call's: named only when one is not)
        return usage
    _warn_absurd(next(name for name, count in counts.items() if count > MOST_TOKENS))
    return None


def usable_cost(cost: object) -> float | None:
    """A reported cost in USD as a float, or ``None`` (estimate it) for anything but a number
    in [0, 1e12): a NaN, an infinite or a negative one (a parsed ``usage.cost``, or a
    provider object's ``cost_usd``: 1e300 made the budget's settle an OverflowError)."""
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and 0 <= cost < 1e12:
        return float(cost)
    return None


def _shape(raw: Mapping[str, Any]) -> tuple[Path, ...] | None:
    """The counts the parser reads from ``raw``'s shape; None for no usage."""
    if "prompt_tokens" in raw or "completion_tokens" in raw:  # OpenAI chat completions
        return _CHAT
    if "input_tokens" not in raw and "output_tokens" not in raw:
        return None
    return _MESSAGES if any(key in raw for key in _ANTHROPIC) else _RESPONSES


def _tokens(fields: tuple[Path, ...], values: list[object]) -> tuple[int, ...] | None:
    """(input, output, cached, written, written for 1 hour, written for 12 hours, reasoning)
    from the ``values`` read of ``fields``, every input token counted in input and every
    output token in output; None for no usable usage."""
    counted = (_count(values[0]), _count(values[1]))
    if counted[0] is None or counted[1] is None:
        return None
    counts = [value if isinstance(value, int) else 0 for value in values]
    reasoning = counts[4] or (counts[7] if len(counts) > 7 else 0)  # (or Claude's thinking)
    if fields is not _MESSAGES:  # OpenAI: every write, and its split by retention
        written = max(counts[3], counts[5] + counts[6])
        return counted[0], counted[1], counts[2], written, 0, counts[6], reasoning
    read, created = _count(values[2] or 0), _count(values[3] or 0)
    if read is None or created is None:
        return None
    short, hour = counts[5], counts[6]
    created = max(created, short + hour)
    return counted[0] + read + created, counted[1], read, created, hour, 0, reasoning


def _hits_and_misses(raw: Mapping[str, Any], values: list[object]) -> str | None:
    """Fold DeepSeek's ``prompt_cache_hit_tokens`` / ``prompt_cache_miss_tokens`` into the
    chat ``values`` read (in place): the hits are the cached tokens (the same tokens as any
    ``prompt_tokens_details.cached_tokens``: the larger count, not their sum), and the input
    is at least the hits and misses; the name of one above :data:`MOST_TOKENS`, if any."""
    found = _read(raw, _HIT_MISS)
    absurd = _absurd(_HIT_MISS, found)
    hit, miss = _count(found[0]) or 0, _count(found[1]) or 0
    if absurd is None and (hit or miss):
        values[2] = max(_count(values[2]) or 0, hit)
        prompt = _count(values[0])
        if prompt is not None:  # (a prompt_tokens that is no count leaves the usage unusable)
            values[0] = max(prompt, hit + miss)
    return absurd


def plain_usage(usage: object) -> Mapping[str, Any] | None:
    """A usage object as a mapping (a pydantic model's dump, an object's attributes), or
    ``None`` when it is none."""
    if usage is None or isinstance(usage, Mapping):
        return usage
    dump = getattr(usage, "model_dump", None)
    plain = dump() if callable(dump) else getattr(usage, "__dict__", None)
    return plain if isinstance(plain, Mapping) else None


def usage_from_payload(
    raw: object, *, service_tier: object = None
) -> tuple[Usage | None, float | None]:
    """Read a usage object of any shape above, and any reported cost (``usage.cost``).

    ``service_tier`` is the response's own (OpenAI reports it beside the usage; Anthropic
    inside it). Returns ``(None, None)`` when there is no usable usage.
    """
    if type(raw) is not dict and not isinstance(raw, Mapping):
        return None, None
    reported = usable_cost(raw.get("cost"))
    fields = _shape(raw)
    if fields is None:
        return None, reported
    values = _read(raw, fields)
    absurd = _absurd(fields, values)
    if fields is not _MESSAGES and values[3] and not (values[5] or values[6]):  # flat, if any
        flat = _FLAT_12H[fields is _RESPONSES]
        values[6] = _read(raw, flat)[0]
        absurd = absurd or _absurd(flat, values[6:7])
    predicted: list[object] = [0, 0]
    if fields is _CHAT:
        absurd = absurd or _hits_and_misses(raw, values)
        predicted = _read(raw, _PREDICTION)
        absurd = absurd or _absurd(_PREDICTION, predicted)
    audio: list[object] = [0, 0]
    if fields is not _MESSAGES:  # (Anthropic's messages carry no audio)
        audio = _read(raw, _AUDIO[fields is _RESPONSES])
        absurd = absurd or _absurd(_AUDIO[fields is _RESPONSES], audio)
    searches = _searches(raw.get("server_tool_use"))  # (Anthropic's server tools: a lookup)
    if searches > MOST_TOKENS:
        absurd = absurd or "server_tool_use.web_search_requests"
    counted = None if absurd is not None else _tokens(fields, values)
    if counted is not None and max(counted[:2]) > MOST_TOKENS:  # (input: Anthropic's sum)
        absurd = "input_tokens"
        counted = None
    if absurd is not None:
        _warn_absurd(absurd)
    if counted is None:
        return None, reported
    input_tokens, output_tokens, cached, written, hour, half_day, reasoning = counted
    cached = min(cached, input_tokens)
    written = min(written, input_tokens - cached)  # an input token is read or written, once
    tier = raw.get("service_tier", service_tier)
    _parsed.usage = usage = Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached,
        cache_write_input_tokens=written,
        cache_write_1h_input_tokens=min(hour, written),
        cache_write_12h_input_tokens=min(half_day, written),
        reasoning_tokens=min(reasoning, output_tokens),
        service_tier=tier if isinstance(tier, str) and tier else None,
        audio_input_tokens=min(_count(audio[0]) or 0, input_tokens),
        audio_output_tokens=min(_count(audio[1]) or 0, output_tokens),
        accepted_prediction_tokens=_count(predicted[0]) or 0,
        rejected_prediction_tokens=min(_count(predicted[1]) or 0, output_tokens),
        web_search_requests=searches,
    )
    return usage, reported


def _searches(used: object) -> int:
    """The web searches an Anthropic ``usage.server_tool_use`` counts (0: none, or no
    count)."""
    if used is None or not isinstance(used, Mapping):
        return 0
    return _count(used.get("web_search_requests")) or 0
