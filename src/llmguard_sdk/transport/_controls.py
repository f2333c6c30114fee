"""A call's cache controls in request headers: what ``Guard.chat``'s ``cacheable``,
``cache_tags``, ``cache_refresh``, ``cache_ttl`` and ``cache_max_age`` say, for an SDK (openai's,
anthropic's) that can only add headers to its request.

``x-llmguard-cache`` takes HTTP Cache-Control's request directives: ``no-cache`` (read nothing,
store the new answer: ``cache_refresh=True``), ``no-store`` (neither read nor store:
``cacheable=False``), comma-separated; ``x-llmguard-cache-ttl`` and ``x-llmguard-cache-max-age``
take seconds (``60``, ``0.5``); ``x-llmguard-cache-tags`` a comma-separated list of tags.
Like every ``x-llmguard-`` header they never reach the provider; a bad value is a
:class:`RequestValidationError` (a 400) naming the header. The look-alike client (what
``guard.client()`` is without openai) reads them from a call's ``extra_headers`` alike
(:func:`header_arguments`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ..cache._config import MAX_LIFETIME_S
from ..errors import RequestValidationError

CACHE = "x-llmguard-cache"
TTL = "x-llmguard-cache-ttl"
MAX_AGE = "x-llmguard-cache-max-age"
TAGS = "x-llmguard-cache-tags"
OWN_PREFIX = "x-llmguard-"
SCOPE_HEADERS = {"tenant": "x-llmguard-tenant", "feature": "x-llmguard-feature"}
_DIRECTIVES = {"no-cache": ("cache_refresh", True), "no-store": ("cacheable", False)}
_SECONDS = re.compile(r"\d+(\.\d+)?")  # (no sign, exponent, nan or inf)


def cache_controls(headers: Mapping[str, str]) -> dict[str, Any]:
    """The ``Guard.chat`` cache keywords the ``x-llmguard-cache*`` ``headers`` (lower-case
    names) ask for; none where none is set."""
    controls: dict[str, Any] = {}
    if CACHE in headers:
        for directive in headers[CACHE].split(","):
            found = _DIRECTIVES.get(directive.strip().lower())
            if found is None:
                raise RequestValidationError(
                    f"{CACHE} takes no-cache (refresh the entry) or no-store (skip the cache),"
                    f" got {headers[CACHE]!r:.80}"
                )
            controls[found[0]] = found[1]
    if TTL in headers:
        controls["cache_ttl"] = _seconds(TTL, headers[TTL], zero=False)
    if MAX_AGE in headers:
        controls["cache_max_age"] = _seconds(MAX_AGE, headers[MAX_AGE], zero=True)
    if headers.get(TAGS, "").strip():  # (an empty header: no tags)
        tags = [tag.strip() for tag in headers[TAGS].split(",")]
        if not all(tags):
            raise RequestValidationError(
                f"{TAGS} must be comma-separated tags, none empty, got {headers[TAGS]!r:.80}"
            )
        controls["cache_tags"] = tags
    return controls


def header_arguments(headers: Mapping[str, str]) -> tuple[dict[str, str] | None, dict[str, Any]]:
    """A look-alike client's ``extra_headers``, read as the seam reads a request's headers:
    those to send (``None``: none), without any ``x-llmguard-`` one (none reaches the
    provider), and the Guard keywords these ask for: the cache controls above, and the
    scope's ``tenant`` and ``feature`` (``x-llmguard-tenant``, ``x-llmguard-feature``)."""
    own = {
        name.lower(): value
        for name, value in headers.items()
        if isinstance(name, str) and name.lower().startswith(OWN_PREFIX)
    }
    if not own:
        return dict(headers) or None, {}
    sent = {
        name: value
        for name, value in headers.items()
        if not (isinstance(name, str) and name.lower().startswith(OWN_PREFIX))
    }
    arguments: dict[str, Any] = {
        key: own[name] for key, name in SCOPE_HEADERS.items() if name in own
    }
    arguments.update(cache_controls(own))
    return sent or None, arguments


def _seconds(name: str, value: str, *, zero: bool) -> float:
    """``value`` as seconds: a decimal number at most :data:`MAX_LIFETIME_S`, over 0 unless
    ``zero`` (a ``max-age`` of 0: nothing cached is young enough)."""
    text = value.strip()
    seconds = float(text) if _SECONDS.fullmatch(text) else math.nan
    if not (0 <= seconds <= MAX_LIFETIME_S) or (seconds == 0 and not zero):  # (NaN too)
        least = ">= 0" if zero else "> 0"
        raise RequestValidationError(
            f"{name} must be a number of seconds {least} and <= {MAX_LIFETIME_S:g},"
            f" got {value!r:.80}"
        )
    return seconds
