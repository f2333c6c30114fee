"""What providers need to reuse a prompt's prefix: cache keys, breakpoints, hit ratios.

* OpenAI caches prefixes automatically and routes requests with the same ``prompt_cache_key``
  to the same cache: :func:`prompt_cache_key` gives one per template and tenant (the tenant id
  hashed, never sent as it is).
* Anthropic caches only up to explicit ``cache_control`` breakpoints:
  :func:`add_cache_breakpoints` puts them at the end of a request's static part (the last
  tool, the last static system block and, optionally, the last message of the history).
  :class:`~llmguard_sdk.providers.AnthropicProvider` does it by itself for requests built by a
  :class:`~llmguard_sdk.prompts.PromptBuilder`.
* Both report cached tokens in their usage; the SDK reads them into
  :attr:`~llmguard_sdk.Usage.cached_input_tokens` and
  :attr:`~llmguard_sdk.Usage.cache_write_input_tokens`. :class:`PrefixCacheStats`, a Guard
  hook, sums them per feature and gives the prefix-cache hit ratio.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._json import canonical_json
from ..context import CallEvent
from ..errors import ConfigurationError

__all__ = [
    "CACHE_HISTORY_KEY",
    "PREFIX_HASH_KEY",
    "STATIC_MESSAGES_KEY",
    "TEMPLATE_KEY",
    "FeatureCacheStats",
    "PrefixCacheStats",
    "add_cache_breakpoints",
    "prompt_cache_key",
    "static_prefix_hash",
]

TEMPLATE_KEY = "llmguard.prompt.template"
"""``ChatRequest.metadata`` key: the name of the template a request was built from."""
PREFIX_HASH_KEY = "llmguard.prompt.prefix_hash"
"""``ChatRequest.metadata`` key: the hash of the request's static prefix."""
STATIC_MESSAGES_KEY = "llmguard.prompt.static_messages"
"""``ChatRequest.metadata`` key: how many leading messages are static (a decimal string)."""
CACHE_HISTORY_KEY = "llmguard.prompt.cache_history"
"""``ChatRequest.metadata`` key: ``"1"`` to also put a breakpoint after the history."""

_EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
_OVERFLOW = "other"  # the feature later new features count under, past max_features
_NOT_SENT = ("cache", "degraded")  # the routes of answers no provider gave (the Guard's names)
logger = logging.getLogger("llmguard_sdk")
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.:-]+")


def static_prefix_hash(system: str, tools: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The prefix hash of a static part: its system message's text and its tools (as canonical
    JSON, in their order). :attr:`PromptBuilder.prefix_hash
    <llmguard_sdk.prompts.PromptBuilder.prefix_hash>` is this hash of its static part; a
    :class:`~llmguard_sdk.releases.Release` whose system prompt replaces that part stamps the
    request with this hash of what it sends. A lone surrogate is hashed as
    :func:`prompt_cache_key` hashes one."""
    listed = canonical_json([dict(t) for t in tools]) if tools else ""
    document = canonical_json({"system": system, "tools": listed})
    return hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def prompt_cache_key(template: str, tenant: str | None = None) -> str:
    """OpenAI's ``prompt_cache_key`` for ``template`` and ``tenant``: stable across calls and
    processes, different per template and tenant, and without the tenant id in clear (a name
    with characters other than ``A-Za-z0-9_.:-``, or over 48 of them, gets a digest of itself)."""
    if not isinstance(template, str) or not (tenant is None or isinstance(tenant, str)):
        raise ConfigurationError(
            f"prompt_cache_key needs a template name and a tenant id that are strings, "
            f"not {template!r:.40} and {tenant!r:.40}"
        )
    name = _KEY_CHARS.sub("-", template)[:48]
    if name != template or not name:
        digest = hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:35]}-{digest}" if name.strip("-") else f"prompt-{digest}"
    if tenant is None:
        return name
    # (an id read from JSON may hold a lone surrogate: hashed all the same)
    digest = hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{name}:{digest}"


def add_cache_breakpoints(
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    static_system_blocks: int,
    history_end: int | None = None,
) -> None:
    """Put Anthropic ``cache_control`` breakpoints (in place) at the end of the static part.

    ``system`` and ``messages`` are Anthropic-shaped (``system`` a list of text blocks);
    breakpoints go on the last tool, on system block ``static_system_blocks - 1`` and, when
    ``history_end`` is given, on the last content block of ``messages[history_end - 1]``.
    Nothing is added when the request already has breakpoints of its own; Anthropic allows
    four at most, so none is added beyond that.
    """
    if _has_breakpoint([*system, *(tools or [])]) or any(
        isinstance(m.get("content"), list) and _has_breakpoint(m["content"]) for m in messages
    ):
        return
    if tools:
        tools[-1] = {**tools[-1], "cache_control": dict(_EPHEMERAL)}
    if 0 < static_system_blocks <= len(system):
        index = static_system_blocks - 1
        system[index] = {**system[index], "cache_control": dict(_EPHEMERAL)}
    if history_end is not None and 0 < history_end <= len(messages):
        message = messages[history_end - 1]
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if isinstance(content, list) and content and isinstance(content[-1], dict):
            blocks = [*content[:-1], {**content[-1], "cache_control": dict(_EPHEMERAL)}]
            messages[history_end - 1] = {**message, "content": blocks}


def _has_breakpoint(blocks: Sequence[Any]) -> bool:
    return any(isinstance(b, dict) and "cache_control" in b for b in blocks)


@dataclass(frozen=True)
class FeatureCacheStats:
    """Prefix-cache figures of one feature: calls, input tokens, and how many of them were
    read from (``cached_tokens``) or written to (``written_tokens``) the provider's cache."""

    feature: str | None
    calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    written_tokens: int = 0
    calls_with_hits: int = 0

    @property
    def hit_ratio(self) -> float:
        """Share of input tokens read from the prefix cache (0.0 without input)."""
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


class PrefixCacheStats:
    """A Guard hook that sums cached input tokens per feature: ``Guard(hooks=[stats])``.

    Every call a provider answered counts (with estimated usage too, which never has cached
    tokens); an answer from the SDK's response cache (``cost_source="cached"``) or a degraded
    answer reached no provider and does not. ``stats.hit_ratio("support")`` is the share of
    that feature's input tokens that the providers read from their prefix caches. At most
    ``max_features`` features are kept apart; calls of later new ones count under ``"other"``
    (logged once), as telemetry's labels do. Thread-safe.
    """

    def __init__(self, *, max_features: int = 1000) -> None:
        if isinstance(max_features, bool) or not (
            isinstance(max_features, int) and max_features >= 1
        ):
            raise ConfigurationError(f"max_features must be an int >= 1, not {max_features!r:.40}")
        self.max_features = max_features
        self._lock = threading.Lock()
        self._features: dict[str | None, FeatureCacheStats] = {}

    def __call__(self, event: CallEvent) -> None:
        """Record one call (the Guard calls this after every call)."""
        usage = event.usage
        if usage is None or event.cost_source == "cached" or event.route in _NOT_SENT:
            return
        feature = event.scope.feature
        with self._lock:
            if feature not in self._features and len(self._features) >= self.max_features:
                if _OVERFLOW not in self._features:
                    logger.warning(
                        "llmguard prefix-cache stats: over max_features=%d features (an id "
                        "passed as a feature?); later new ones count under %r",
                        self.max_features,
                        _OVERFLOW,
                    )
                feature = _OVERFLOW
            old = self._features.get(feature) or FeatureCacheStats(feature)
            self._features[feature] = FeatureCacheStats(
                feature=feature,
                calls=old.calls + 1,
                input_tokens=old.input_tokens + usage.input_tokens,
                cached_tokens=old.cached_tokens + usage.cached_input_tokens,
                written_tokens=old.written_tokens + usage.cache_write_input_tokens,
                calls_with_hits=old.calls_with_hits + (usage.cached_input_tokens > 0),
            )

    def feature(self, feature: str | None) -> FeatureCacheStats:
        """The figures of one feature (``None``: calls without a feature)."""
        with self._lock:
            return self._features.get(feature) or FeatureCacheStats(feature)

    def hit_ratio(self, feature: str | None) -> float:
        """Share of ``feature``'s input tokens read from a prefix cache."""
        return self.feature(feature).hit_ratio

    def snapshot(self) -> dict[str | None, FeatureCacheStats]:
        """Every feature's figures."""
        with self._lock:
            return dict(self._features)

    def reset(self) -> None:
        """Forget every figure."""
        with self._lock:
            self._features.clear()
