"""What a :class:`~llmguard_sdk.testing.FakeProvider` is told and what it reports: faults,
counters and the requests it received."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Fault", "ProviderStats", "ReceivedRequest"]


@dataclass(frozen=True)
class Fault:
    """How :class:`FakeProvider` should (mis)behave for one chat-completion request.

    ``Fault()`` with all defaults is a normal answer.  The delays (``latency``,
    ``first_token_delay``, ``inter_token_delay``) combine with a normal answer, so
    ``Fault(latency=0.2)`` is a slow success.  When several failure flags are set, the first
    of ``hang``, ``reset``, ``status``, ``wrong_content_type``, ``malformed_json``,
    ``missing_fields``, ``cut_stream_after`` wins (``stream_error_after`` comes before
    ``status`` for a streamed request, after it for one that does not stream).  ``headers``,
    ``retry_after`` and ``retry_after_ms`` are added to whatever response is sent.
    """

    status: int | None = None
    """Answer with this HTTP status (400-599) and an OpenAI-style error JSON body."""
    retry_after: float | str | None = None
    """``Retry-After`` header: a number becomes seconds text, a string is used verbatim."""
    retry_after_ms: int | None = None
    """``retry-after-ms`` header value."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers."""
    error_code: str | None = None
    """Goes into ``error.code`` of the error body (e.g. ``"context_length_exceeded"``); on the
    Anthropic Messages endpoint into ``error.details.error_code``, where Anthropic names an
    error's cause (e.g. ``"request_body_timeout"``)."""
    error_message: str | None = None
    """The error body's ``error.message`` (``None``: ``"fake error <status>"``), such as a
    provider's own words for an input too long.

    .. versionadded:: 0.2.0
    """
    latency: float = 0.0
    """Seconds to sleep before answering anything."""
    first_token_delay: float = 0.0
    """Streams: seconds to sleep before the first content chunk."""
    inter_token_delay: float = 0.0
    """Streams: seconds to sleep between content chunks."""
    hang: bool = False
    """Read the request, then never answer (until the server stops or ``hang_limit``)."""
    reset: bool = False
    """Read the request, then close the TCP connection abruptly (RST), no response."""
    cut_stream_after: int | None = None
    """Streams: send this many content chunks, then a partial ``data: {`` line, then close.

    For a non-streamed request the response headers and half of the body are sent before
    the connection is closed.
    """
    stream_error_after: int | None = None
    """Streams: send this many content pieces, then the API's own in-stream error, and end the
    stream cleanly (HTTP 200), as providers fail a stream they started: chat completions a
    ``data: {"error": {...}}`` chunk, the Responses API an ``error`` event, Anthropic an
    ``event: error`` (its ``error.type`` the one of ``status``, default 529:
    ``overloaded_error``), with ``error_message`` and ``error_code``. The official clients
    raise an ``APIError`` / ``APIStatusError`` on it. A request that does not stream is
    answered ``status`` (default 500) with the error body.

    .. versionadded:: 0.2.0
    """
    malformed_json: bool = False
    """200 with a body that is not valid JSON (streams: a ``data:`` line with broken JSON)."""
    wrong_content_type: bool = False
    """200 with ``Content-Type: text/html`` and an HTML body."""
    missing_fields: bool = False
    """200 with valid JSON that has no ``"choices"``."""
    omit_usage: bool = False
    """A normal answer without ``usage`` (streams: no usage chunk), as some servers give; a
    Claude stream cut by ``cut_stream_after`` then has no usage in its ``message_start``
    either (else the prompt's input tokens, as Claude's).

    .. versionchanged:: 0.2.0
       A cut Claude stream's ``message_start`` carries the prompt's usage.
    """
    omit_item_id: str | None = None
    """Responses streams: each server-side tool call item (a ``web_search_call`` ...) leaves
    its ``id`` out of its ``response.output_item.added`` event (``"added"``) or its
    ``response.output_item.done`` event (``"done"``), as a compatible server may; the item's
    ``output_index`` is on both.

    .. versionadded:: 0.2.0
    """

    @property
    def message(self) -> str:
        """The error body's message: ``error_message``, else ``"fake error <status>"``."""
        return self.error_message or f"fake error {self.status or 500}"

    def __post_init__(self) -> None:
        if self.status is not None and not 400 <= self.status <= 599:
            raise ValueError(f"Fault.status must be 400-599, got {self.status!r}")
        for name in ("latency", "first_token_delay", "inter_token_delay"):
            value = getattr(self, name)
            if not value >= 0.0 or math.isinf(value):  # also rejects NaN
                raise ValueError(f"Fault.{name} must be a finite number >= 0, got {value!r}")
        if self.cut_stream_after is not None and self.cut_stream_after < 0:
            raise ValueError("Fault.cut_stream_after must be >= 0")
        if self.stream_error_after is not None and self.stream_error_after < 0:
            raise ValueError("Fault.stream_error_after must be >= 0")
        if self.retry_after_ms is not None and self.retry_after_ms < 0:
            raise ValueError("Fault.retry_after_ms must be >= 0")
        if self.omit_item_id not in (None, "added", "done"):
            raise ValueError(
                f"Fault.omit_item_id must be 'added' or 'done', got {self.omit_item_id!r}"
            )

    @property
    def is_delay_only(self) -> bool:
        """True when this fault only delays (and decorates) an otherwise normal answer."""
        return not (
            self.status is not None
            or self.hang
            or self.reset
            or self.cut_stream_after is not None
            or self.stream_error_after is not None
            or self.malformed_json
            or self.wrong_content_type
            or self.missing_fields
        )


@dataclass(frozen=True)
class ProviderStats:
    """A snapshot of what a :class:`FakeProvider` has seen and answered.

    All counters except ``connections`` are about chat-completion requests only.
    """

    requests: int = 0
    """Chat-completion requests received (valid or not)."""
    streams: int = 0
    """Of those, requests asking for ``"stream": true``."""
    succeeded: int = 0
    """Normal 200 answers that were sent completely."""
    faults: int = 0
    """Requests answered with a :class:`Fault` other than a plain delay."""
    by_status: dict[int, int] = field(default_factory=dict)
    """How many responses were sent with each HTTP status."""
    rate_limited: int = 0
    """429 answers caused by the ``rpm`` / ``tpm`` limits."""
    input_tokens: int = 0
    """Sum of prompt tokens over successful answers."""
    output_tokens: int = 0
    """Sum of completion tokens over successful answers."""
    connections: int = 0
    """TCP connections accepted (any endpoint); shows whether clients keep connections alive."""
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those read from the emulated prefix cache (``prefix_cache=True``)."""
    cache_write_input_tokens: int = 0
    """Of ``input_tokens``, those written to the emulated Anthropic-style prefix cache."""


@dataclass(frozen=True)
class ReceivedRequest:
    """One HTTP request as the :class:`FakeProvider` received it."""

    method: str
    """HTTP method, e.g. ``"POST"``."""
    path: str
    """Request target as sent, including any query string."""
    headers: dict[str, str]
    """Request headers with lower-case names (repeated headers joined with ``", "``)."""
    body: Any
    """The parsed JSON body, or ``None`` when there was no body or it was not valid JSON."""
    time: float
    """``time.monotonic()`` when the request was read."""
