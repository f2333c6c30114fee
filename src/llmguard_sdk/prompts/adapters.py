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
from .._route_names import NOT_SENT
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
MOST_BREAKPOINTS = 4  # blocks with cache_control Claude takes in one request (400 to more)
_OVERFLOW = "other"  # the feature later new features count under, past max_features
logger = logging.getLogger("llmguard_sdk")
_KEY_CHARS = re.compile(r"[^A-Za-z0-9_.:-]+")
_MOST_KEY_CHARS = 64  # of a prompt_cache_key: OpenAI answers a longer one with a 400


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
    with characters other than ``A-Za-z0-9_.:-``, or over 47 of them, gets a digest of itself):
    64 characters at most, the most OpenAI takes (a longer key is a 400 on every call)."""
    if not isinstance(template, str) or not (tenant is None or isinstance(tenant, str)):
        raise ConfigurationError(
            f"prompt_cache_key needs a template name and a tenant id that are strings, "
            f"not {template!r:.40} and {tenant!r:.40}"
        )
    # (the name, ":" and the tenant's digest of 16: _MOST_KEY_CHARS)
    name = _KEY_CHARS.sub("-", template)[: _MOST_KEY_CHARS - 17]
    if name != template or not name:
        digest = hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:34]}-{digest}" if name.strip("-") else f"prompt-{digest}"
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
    automatic: object = None,
) -> None:
    """Put Anthropic ``cache_control`` breakpoints (in place) at the end of the static part.

    ``system`` and ``messages`` are Anthropic-shaped (``system`` a list of text blocks);
    breakpoints go on system block ``static_system_blocks - 1``, on the last content block of
    ``messages[history_end - 1]`` when ``history_end`` is given (the last before it that takes
    one, where that is a thinking block or an empty text: Claude answers 400 to a breakpoint
    there), and on the last tool, each ``{"type": "ephemeral"}`` (Claude's 5-minute lifetime,
    renewed by each read).

    Breakpoints the request has of its own (a caller's mark on a per-call document) are kept
    as they are, and these go beside them while the request holds four at most (Anthropic's
    limit, :data:`~llmguard_sdk.providers.anthropic.MAX_CACHE_BREAKPOINTS`); where there is
    not room for all, the last tool's is left out first (the static part's covers the tools),
    then the history's.
    None goes on a block the request marked itself, nor before a breakpoint of the request's
    that lives longer (``"ttl": "1h"``): Anthropic refuses a shorter-lived one before it
    (tools come first, then the system blocks, then the messages). ``automatic`` is the
    request's top-level ``cache_control`` (Claude's automatic caching), if any: a breakpoint of
    the request's own on its last block.

    .. versionchanged:: 0.2.0 the request's own breakpoints no longer switch these off (its
       static part was never read from the cache when a caller marked a later block).
    """
    own = own_breakpoints(system, messages, tools, automatic)
    room = MOST_BREAKPOINTS - len(own)
    marked = {place for place, _longer in own}
    longest = max((place for place, longer in own if longer), default=None)
    for place in _static_places(system, messages, tools, static_system_blocks, history_end):
        if room <= 0:
            break
        if place in marked or (longest is not None and place < longest):
            continue
        _mark(system, messages, tools, place)
        room -= 1


Place = tuple[int, int, int]
"""Where a breakpoint is, in the order Anthropic reads a request: ``(0, tool, 0)``,
``(1, system block, 0)``, ``(2, message, content block)``; ``(3, 0, 0)`` for automatic
caching's, after them all."""


def own_breakpoints(
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    automatic: object = None,
) -> list[tuple[Place, bool]]:
    """The request's own Anthropic breakpoints (``cache_control``), in the order Claude reads
    them: each one's place and whether it lives longer than Claude's default 5 minutes;
    ``automatic``, a top-level ``cache_control`` (automatic caching), is one after them all."""
    own = _breakpoints(system, messages, tools)
    if automatic is not None:  # (on the last block: after every other)
        own.append(((3, 0, 0), _longer({"cache_control": automatic})))
    return own


def _breakpoints(
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
) -> list[tuple[Place, bool]]:
    """The request's own breakpoints, one per marked block: its place, and whether it lives
    longer than Claude's default 5 minutes (a tool result's inner blocks at the result's)."""
    blocks: list[tuple[Place, Any]] = [((0, i, 0), tool) for i, tool in enumerate(tools or ())]
    blocks += [((1, i, 0), block) for i, block in enumerate(system)]
    for i, message in enumerate(messages):
        content = message.get("content")
        for j, block in enumerate(content if isinstance(content, list) else ()):
            inner = block.get("content") if isinstance(block, dict) else None
            blocks += [((2, i, j), part) for part in [block, *_listed(inner)]]
    return [(p, _longer(b)) for p, b in blocks if isinstance(b, dict) and "cache_control" in b]


def _longer(block: Mapping[str, Any]) -> bool:
    """Whether the breakpoint on ``block`` lives longer than Claude's default 5 minutes."""
    control = block["cache_control"]
    ttl = control.get("ttl") if isinstance(control, Mapping) else None
    return ttl not in (None, "5m")


def _listed(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _static_places(
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    static_system_blocks: int,
    history_end: int | None,
) -> list[Place]:
    """Where the static part's breakpoints go, the most valuable first: after the static
    system blocks, after the history, after the last tool."""
    places: list[Place] = []
    if 0 < static_system_blocks <= len(system):
        places.append((1, static_system_blocks - 1, 0))
    if history_end is not None and 0 < history_end <= len(messages):
        history = _last_markable(messages, history_end)
        if history is not None:
            places.append(history)
    if tools:
        places.append((0, len(tools) - 1, 0))
    return places


_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})  # Claude: "Extra inputs" (400)


def _last_markable(messages: list[dict[str, Any]], end: int) -> Place | None:
    """The last block of ``messages[:end]`` that may carry a breakpoint: not a thinking block,
    nor an empty text (Claude answers 400 to one there); None when there is none."""
    for index in range(end - 1, -1, -1):
        content = messages[index].get("content")
        if isinstance(content, str) and content:
            return (2, index, 0)
        blocks = content if isinstance(content, list) else []
        for block in range(len(blocks) - 1, -1, -1):
            if isinstance(blocks[block], dict) and _markable(blocks[block]):
                return (2, index, block)
    return None


def _markable(block: Mapping[str, Any]) -> bool:
    return block.get("type") not in _UNMARKABLE and block.get("text", True) != ""


def _mark(
    system: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    place: Place,
) -> None:
    """Put a 5-minute breakpoint on the block at ``place`` (a copy of it, in place)."""
    where, index, block = place
    if where == 0 and tools is not None:
        tools[index] = {**tools[index], "cache_control": dict(_EPHEMERAL)}
    elif where == 1:
        system[index] = {**system[index], "cache_control": dict(_EPHEMERAL)}
    else:
        message = messages[index]
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        marked = {**content[block], "cache_control": dict(_EPHEMERAL)}
        messages[index] = {**message, "content": [*content[:block], marked, *content[block + 1 :]]}


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
        if usage is None or event.cost_source == "cached" or event.route in NOT_SENT:
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
