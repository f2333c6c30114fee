"""The checks of :class:`~llmguard_sdk.cache.ResponseCache`'s options and of a call's scope:
a value of the wrong type is a typed error at once, not a ``TypeError`` from a comparison or an
``AttributeError`` at the first lookup.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real

from .._keywords import check_keywords
from ..context import Scope
from ..errors import ConfigurationError, RequestValidationError
from ..models import ChatRequest, ChatResponse
from .entry import CacheOptions
from .keys import CacheKeys
from .monitor import FalseHitMonitor

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ENTRY_BYTES",
    "MAX_LIFETIME_S",
    "check_call",
    "check_controls",
    "check_matching",
    "check_parts",
    "check_policy",
    "check_scope",
    "check_target",
]

MAX_LIFETIME_S = 1e10
"""The longest ``ttl`` or ``stale_ttl`` (seconds, about 317 years): Redis refuses a write
whose expiry, in milliseconds, does not fit 64 bits (a "forever" of 1e300 failed every store)."""


class _Default(int):
    """A default number told apart from the same number given (``is``): a Redis cache takes
    the memory cache's default byte bound without a word, and refuses one given."""


DEFAULT_MAX_BYTES: int = _Default(256 * 1024 * 1024)
"""The in-memory cache's default ``max_bytes``: 256 MiB of entries (10,000 answers of 1 MB
each held 10 GB before)."""

DEFAULT_MAX_ENTRY_BYTES = 1024 * 1024
"""The default ``max_entry_bytes``: 1 MiB, as LiteLLM's in-memory cache caps an item."""


def _real(value: object) -> bool:
    if type(value) is float or type(value) is int:  # (nearly every value: no ABC check)
        return True
    return isinstance(value, Real) and not isinstance(value, bool)


def check_policy(
    *,
    ttl: object,
    stale_ttl: object,
    max_entries: object,
    max_bytes: object,
    max_entry_bytes: object,
    namespace: object,
    version: object,
    sync_interval: object,
    vector_search: object,
) -> None:
    """The cache's policy options (:class:`ConfigurationError` for the first bad one)."""
    for name, value in (("ttl", ttl), ("stale_ttl", stale_ttl), ("sync_interval", sync_interval)):
        if not _real(value):
            raise ConfigurationError(f"{name} must be a number, got {value!r}")
    if not 0 < ttl <= MAX_LIFETIME_S or not 0 <= stale_ttl <= MAX_LIFETIME_S:  # type: ignore[operator]  # (NaN too)
        raise ConfigurationError(
            "ttl must be positive and stale_ttl not negative, each at most "
            f"{MAX_LIFETIME_S:g} s (about 317 years)"
        )
    if not sync_interval >= 0:  # type: ignore[operator]  # (NaN too; inf: read once)
        raise ConfigurationError(f"sync_interval must be >= 0, got {sync_interval!r}")
    if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 1:
        raise ConfigurationError(f"max_entries must be a whole number >= 1, got {max_entries!r}")
    for name, bound in (("max_bytes", max_bytes), ("max_entry_bytes", max_entry_bytes)):
        if bound is not None and (
            not isinstance(bound, int) or isinstance(bound, bool) or bound < 1
        ):
            raise ConfigurationError(f"{name} must be a whole number >= 1 or None, got {bound!r}")
    if (
        not isinstance(namespace, str)
        or not isinstance(version, str)
        or not namespace
        or not version
    ):
        raise ConfigurationError("namespace and version must be strings, not empty")
    if vector_search not in ("local", "server"):
        raise ConfigurationError("vector_search must be 'local' or 'server'")


def check_matching(threshold: object, margin: object, verify_band: object) -> None:
    """The semantic match's numbers (``None`` where a default will be chosen)."""
    for name, value in (("threshold", threshold), ("margin", margin), ("verify_band", verify_band)):
        if value is not None and not _real(value):
            raise ConfigurationError(f"{name} must be a number, got {value!r}")


def check_target(target: object) -> None:
    """``target_precision``: a number in (0, 1)."""
    if not _real(target) or not 0.0 < target < 1.0:  # type: ignore[operator]
        raise ConfigurationError("target_precision must be in (0, 1)")


def check_scope(scope: Scope) -> Scope:
    """``scope``, a :class:`Scope` whose ids are strings or ``None``
    (:class:`RequestValidationError` otherwise: a tenant's name given as the scope failed
    deep inside)."""
    if not isinstance(scope, Scope):
        raise RequestValidationError(
            f"scope must be a Scope (Scope(tenant=...)), got {scope!r:.80}"
        )
    for name in ("tenant", "feature", "user"):
        value = getattr(scope, name)
        if value is not None and not isinstance(value, str):
            raise RequestValidationError(f"{name} must be a string, got {value!r}")
    return scope


def check_parts(embedder: object, verifier: object, monitor: object, **switches: object) -> None:
    """The cache's parts (``None`` where the default is taken) and its on/off switches
    (``strict`` may be ``None``): a ``"no"`` would be taken as true."""
    from .embedders import Embedder  # (a cache's build imports them: not a call's checks)

    if embedder is not None and not isinstance(embedder, Embedder):
        raise ConfigurationError(f"embedder must be an Embedder, got {embedder!r}")
    if verifier is not None and not callable(verifier):
        raise ConfigurationError(f"verifier must be a function of two texts, got {verifier!r}")
    if monitor is not None and not isinstance(monitor, FalseHitMonitor):
        raise ConfigurationError(f"monitor must be a FalseHitMonitor, got {monitor!r}")
    for name, value in switches.items():
        if not isinstance(value, bool) and not (name == "strict" and value is None):
            raise ConfigurationError(f"{name} must be True or False, got {value!r}")


def check_call(
    request: object, response: object = None, options: Mapping[str, object] | None = None
) -> None:
    """A lookup's or store's arguments: a :class:`~llmguard_sdk.ChatRequest`, a
    :class:`~llmguard_sdk.ChatResponse` (stores) and the :class:`CacheOptions` that are not
    checked elsewhere (``tags`` are, when the keys are computed): no keyword it does not
    declare (``ttl_s=600`` was taken and ignored), a deadline that is a number,
    ``cacheable`` True or False, ``keys`` a :class:`CacheKeys` (or ``None``).
    :class:`RequestValidationError` otherwise."""
    if not isinstance(request, ChatRequest):
        raise RequestValidationError(f"the cache needs a ChatRequest, got {request!r:.80}")
    if response is not None and not isinstance(response, ChatResponse):
        raise RequestValidationError(f"the cache stores a ChatResponse, got {response!r:.80}")
    if not options:
        return
    check_keywords(options, CacheOptions, "the response cache", RequestValidationError)
    deadline, keys = options.get("deadline"), options.get("keys")
    if deadline is not None and (not _real(deadline) or deadline != deadline):  # (NaN)
        raise RequestValidationError(
            f"deadline must be a time.monotonic() instant, got {deadline!r:.80}"
        )
    if not isinstance(options.get("cacheable", True), bool):  # ("no" would be true)
        raise RequestValidationError(
            f"cacheable must be True or False, got {options['cacheable']!r:.80}"
        )
    if keys is not None and not isinstance(keys, CacheKeys):
        raise RequestValidationError(f"keys must be a CacheKeys, got {keys!r:.80}")
    check_controls(options.get("refresh", False), options.get("ttl"), options.get("max_age"))


def check_controls(refresh: object, ttl: object, max_age: object, prefix: str = "") -> None:
    """A call's own cache controls (named with ``prefix``, a Guard call's ``cache_``):
    ``refresh`` True or False, ``ttl`` seconds in (0, :data:`MAX_LIFETIME_S`], ``max_age``
    seconds >= 0 (each ``None``: the cache's own). :class:`RequestValidationError` otherwise."""
    if not isinstance(refresh, bool):  # ("no" would be true)
        raise RequestValidationError(f"{prefix}refresh must be True or False, got {refresh!r:.80}")
    if ttl is not None and not (_real(ttl) and 0 < ttl <= MAX_LIFETIME_S):  # type: ignore[operator]
        raise RequestValidationError(
            f"{prefix}ttl must be a number of seconds in (0, {MAX_LIFETIME_S:g}], got {ttl!r:.80}"
        )
    if max_age is not None and not (_real(max_age) and max_age >= 0):  # type: ignore[operator]
        raise RequestValidationError(
            f"{prefix}max_age must be a number of seconds >= 0, got {max_age!r:.80}"
        )
