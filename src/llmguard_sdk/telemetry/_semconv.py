"""Which GenAI semantic-convention names telemetry emits: today's or the previous ones.

The OpenTelemetry GenAI conventions renamed attributes after v1.36.0 (``gen_ai.system``
became ``gen_ai.provider.name``) and added cache and reasoning token attributes,
``gen_ai.request.stream`` and the stream chunk metrics. ``"latest"`` emits those (the models
of the conventions' last release, checked by ``tests/test_telemetry_semconv.py``);
``"previous"`` emits the v1.36.0 names, and what v1.36.0 has no name for under ``llmguard.*``
(or not at all where an ``llmguard.*`` attribute tells it already: the time to the first
chunk of a stream is the call span's ``llmguard.time_to_first_token_s`` and each attempt
span's ``llmguard.time_to_first_chunk_s``).

Chosen by ``Telemetry(semconv=...)``, else by ``OTEL_SEMCONV_STABILITY_OPT_IN`` as the
OpenTelemetry instrumentations read it: a list holding ``gen_ai_latest_experimental`` picks
``"latest"``; a list set without it picks ``"previous"`` (what the other instrumentations of
the process then emit); unset, ``"latest"``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigurationError

__all__ = ["LATEST", "OPT_IN_ENV", "PREVIOUS", "Names", "SemconvMode", "names_for"]

SemconvMode = Literal["latest", "previous"]
OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
_LATEST_TOKEN = "gen_ai_latest_experimental"


@dataclass(frozen=True)
class Names:
    """The names of one convention version (``None``: not emitted in that version)."""

    mode: SemconvMode
    provider: str
    cache_read_tokens: str
    cache_creation_tokens: str
    reasoning_tokens: str
    stream: str | None
    first_chunk: str | None  # attribute of the call's span (seconds)
    first_chunk_metric: str
    chunk_gap_metric: str


# attribute: (the latest conventions' name, the previous one's; None: not emitted)
_TABLE: dict[str, tuple[str, str | None]] = {
    "provider": ("gen_ai.provider.name", "gen_ai.system"),
    "cache_read_tokens": (
        "gen_ai.usage.cache_read.input_tokens",
        "llmguard.usage.cached_input_tokens",
    ),
    "cache_creation_tokens": (
        "gen_ai.usage.cache_creation.input_tokens",
        "llmguard.usage.cache_write_input_tokens",
    ),
    "reasoning_tokens": ("gen_ai.usage.reasoning.output_tokens", "llmguard.usage.reasoning_tokens"),
    "stream": ("gen_ai.request.stream", None),
    "first_chunk": ("gen_ai.response.time_to_first_chunk", None),
    "first_chunk_metric": (
        "gen_ai.client.operation.time_to_first_chunk",
        "llmguard.client.operation.time_to_first_chunk",
    ),
    "chunk_gap_metric": (
        "gen_ai.client.operation.time_per_output_chunk",
        "llmguard.client.operation.time_per_output_chunk",
    ),
}
LATEST = Names("latest", **{field: latest for field, (latest, _) in _TABLE.items()})
PREVIOUS = Names(
    "previous",
    stream=None,
    first_chunk=None,
    **{field: previous for field, (_, previous) in _TABLE.items() if previous is not None},
)


def names_for(mode: str | None, environ: Mapping[str, str] | None = None) -> Names:
    """The names for ``mode`` (``"latest"`` / ``"previous"``), or, with ``None``, for what
    ``OTEL_SEMCONV_STABILITY_OPT_IN`` in ``environ`` (default ``os.environ``) asks."""
    if mode is None:
        opt_in = (os.environ if environ is None else environ).get(OPT_IN_ENV)
        if opt_in is None or not opt_in.strip():
            return LATEST
        tokens = {token.strip() for token in opt_in.split(",")}
        return LATEST if _LATEST_TOKEN in tokens else PREVIOUS
    if mode == "latest":
        return LATEST
    if mode == "previous":
        return PREVIOUS
    raise ConfigurationError(f"semconv must be 'latest' or 'previous', not {mode!r}")
