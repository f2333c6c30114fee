"""The one canonical JSON of the package (cache keys, prompt prefixes, the spend journal).

Private: :func:`canonical_json` is re-exported where users meet it
(:mod:`llmguard_sdk.prompts`, :mod:`llmguard_sdk.cache`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .errors import ConfigurationError

__all__ = ["canonical_json"]

_CANONICAL_OPTIONS: dict[str, Any] = {
    "sort_keys": True,
    "separators": (",", ":"),
    "ensure_ascii": False,
    "allow_nan": False,
}
_CANONICAL = json.JSONEncoder(**_CANONICAL_OPTIONS)  # keeps no state between calls


def canonical_json(value: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """``value`` as canonical JSON: sorted keys, no spaces, UTF-8 kept, no NaN or infinity.

    Two equal values always give the same text, whatever order their keys were built in.
    ``default`` turns values JSON lacks into ones it has (as for :func:`json.dumps`); a value
    that still is not JSON is a :class:`~llmguard_sdk.errors.ConfigurationError`.

    .. versionadded:: 0.2.0
    """
    try:
        if default is None:  # the shared encoder (json.dumps would build one a call)
            return _CANONICAL.encode(value)
        return json.JSONEncoder(**_CANONICAL_OPTIONS, default=default).encode(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"not JSON-serialisable: {exc}") from None
