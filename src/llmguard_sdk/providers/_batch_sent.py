"""What of a call's ``extra_headers`` and ``extra_query`` a batch route sends.

A batch is one set of HTTP requests (create it, poll it, read its results) carrying many
calls; neither batch API takes headers or a query per call (OpenAI's JSON Lines rows are
``custom_id``, ``method``, ``url``, ``body``; Anthropic's ``custom_id`` and ``params``). So
the headers and query of a call are the batch's: ``anthropic-beta`` turns a beta on for
every call of a Claude batch, ``OpenAI-Project`` or an Azure ``api-version`` apply to the
batch's requests. Calls that ask for different ones go into different batches.

Two kinds of header are the call's alone and left out (they never split a batch): the
Guard's idempotency key (a batch's ``custom_id`` does that work) and the trace context of
the call's attempt span (``traceparent``, ``tracestate``, ``baggage`` and whatever else the
OpenTelemetry propagator writes): no request of a batch is one call's. Any other header is
the batch's, whatever it means: one unique to each call (a request id) sends every call in a
batch of its own, which :class:`~llmguard_sdk.errors.BatchSplitWarning` says (once a window,
see :func:`split_note`), never leaving a header out that the caller may need.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping

from .._ids import IDEMPOTENCY_PREFIX
from ..models import ChatRequest
from ._anthropic_only import sent_headers
from .wire import ANTHROPIC_ONLY_KEY, named_keys

__all__ = ["BatchOptions", "batch_options", "split_note"]

BatchOptions = tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]
"""A batch's headers and query, each as sorted ``(name, value)`` pairs (header names in
lower case): calls with equal options share a batch."""

_PER_CALL = frozenset({"idempotency-key", "traceparent", "tracestate", "baggage"})


def _trace_fields() -> frozenset[str]:
    """The header names the OpenTelemetry propagator writes (where it has been imported: the
    Guard's trace context is set only then), with W3C's."""
    propagate = sys.modules.get("opentelemetry.propagate")
    textmap = getattr(propagate, "get_global_textmap", None)
    fields = getattr(textmap(), "fields", ()) if callable(textmap) else ()
    return _PER_CALL | {name.lower() for name in fields if isinstance(name, str)}


def batch_options(request: ChatRequest, *, anthropic: bool) -> BatchOptions:
    """The headers and query ``request`` asks its batch to be sent with: its
    ``extra_headers`` as the plain route of the API sends them (a non-Anthropic batch leaves
    Claude's own out where the request names them), less the call's own idempotency key and
    trace context; its ``extra_query``."""
    headers: Mapping[str, str] | None = request.extra_headers
    if not anthropic:
        headers = sent_headers(headers, named_keys(request, ANTHROPIC_ONLY_KEY))
    per_call = _trace_fields() if headers else _PER_CALL
    kept = {
        name.lower(): value
        for name, value in (headers or {}).items()
        if name.lower() not in per_call and not value.startswith(IDEMPOTENCY_PREFIX)
    }
    return tuple(sorted(kept.items())), tuple(sorted((request.extra_query or {}).items()))


def _differing(options: BatchOptions, other: BatchOptions) -> list[str]:
    """The headers and query parameters ``options`` and ``other`` do not share as they are."""
    headers = {name for name, _ in set(options[0]) ^ set(other[0])}
    query = {name for name, _ in set(options[1]) ^ set(other[1])}
    return [f"header {n!r}" for n in sorted(headers)] + [f"query {n!r}" for n in sorted(query)]


def split_note(route: str, options: BatchOptions, waiting: Collection[BatchOptions]) -> str | None:
    """What a call sent with ``options`` says as it starts a batch of its own beside those
    ``waiting`` in its window (None: it joins one of them, or none waits): the names (never the
    values) by which it differs from the nearest of them."""
    if options in waiting:
        return None
    found = [_differing(options, other) for other in waiting]
    if not found:
        return None
    nearest: list[str] = min(found, key=len)
    names = ", ".join(nearest)
    return (
        f"{route}: calls of one batch window go into separate batches, as they differ in"
        f" {names} (a batch is sent with one set of extra_headers and extra_query); a header"
        " unique to each call, such as a request id, sends every call in a batch of its own"
    )
