"""How long a call's cache writes are kept, when its usage does not say: as its request asked.

A provider's usage splits its cache writes by retention (Anthropic's
``cache_creation.ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``, OpenAI's
``cache_write_tokens_details.ttl_30m_tokens`` / ``ttl_12h_tokens``, or the 12-hour ones flat
as ``cache_write_12h_tokens``), read by :mod:`._usage`;
each is priced at its own rate. A usage that reports no write kept longer than the default (one
that does not split them: an older API version's, a proxy's) leaves them to the
request, when it asked one lifetime for all of its writes:

* OpenAI: ``prompt_cache_options.ttl`` (in ``extra_body``) is the minimum lifetime of every
  breakpoint the request writes; ``"12h"`` makes them 12-hour writes. ``prompt_cache_retention``
  (``"in_memory"``, ``"24h"``) is a maximum retention, independent of it, and billed alike: it
  changes no write's price.
* Anthropic: a request whose every ``cache_control`` breakpoint (on its messages' content
  parts, its tools, or the top-level one in ``extra_body``) says ``"ttl": "1h"`` writes for an
  hour. With breakpoints of both TTLs, which one wrote what is unknown: the writes keep the
  5-minute rate.

Only a call with such writes reads its request for this.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Literal

from ..models import ChatRequest, Usage

__all__ = ["asked_retention", "attributed"]


def attributed(usage: Usage, request: ChatRequest) -> Usage:
    """``usage`` with its cache writes counted as kept for as long as ``request`` asked (see
    the module docs), when it reports none kept longer than the default; ``usage`` itself when
    it does (its split is the provider's) or the request asked for no one longer lifetime."""
    written = usage.cache_write_input_tokens
    if not written or usage.cache_write_1h_input_tokens or usage.cache_write_12h_input_tokens:
        return usage
    asked = asked_retention(request)
    if asked is None:
        return usage
    field = "cache_write_12h_input_tokens" if asked == "12h" else "cache_write_1h_input_tokens"
    return usage.model_copy(update={field: written})


def asked_retention(request: ChatRequest) -> Literal["1h", "12h"] | None:
    """The longer lifetime ``request`` asks every cache write of it to be kept for: OpenAI's
    ``"12h"``, Anthropic's ``"1h"``; ``None``: the default one, or lifetimes that differ."""
    extra = request.extra_body or {}
    options = extra.get("prompt_cache_options")
    if isinstance(options, Mapping) and options.get("ttl") == "12h":
        return "12h"
    ttls = {_ttl(marked) for marked in _breakpoints(request, extra)}
    return "1h" if ttls == {"1h"} else None


def _breakpoints(request: ChatRequest, extra: Mapping[str, object]) -> Iterator[object]:
    """Every ``cache_control`` of ``request``: the top-level one, its tools', its messages'
    content parts'."""
    if "cache_control" in extra:
        yield extra["cache_control"]
    for tool in request.tools or ():
        if "cache_control" in tool:
            yield tool["cache_control"]
    for message in request.messages:
        if isinstance(message.content, list):
            for part in message.content:
                if "cache_control" in part:
                    yield part["cache_control"]


def _ttl(marked: object) -> str:
    """A breakpoint's TTL (Anthropic's default: five minutes)."""
    ttl = marked.get("ttl") if isinstance(marked, Mapping) else None
    return ttl if isinstance(ttl, str) else "5m"
