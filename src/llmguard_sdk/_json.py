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


def canonical_json(value: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """``value`` as canonical JSON: sorted keys, no spaces, UTF-8 kept, no NaN or infinity.

    Two equal values always give the same text, whatever order their keys were built in.
    ``default`` turns values JSON lacks into ones it has (as for :func:`json.dumps`); a value
    that still is not JSON is a :class:`~llmguard_sdk.errors.ConfigurationError`.

    .. versionadded:: 0.2.0
    """
    try:
        return json.dumps(
            value,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=default,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"not JSON-serialisable: {exc}") from None
