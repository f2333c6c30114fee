"""Which provider errors move a call on to the chain's next route: :func:`is_route_failure`,
the Guard's rule when it was given no ``moves_on=`` of its own, and the rule to build on in
one (``Guard(moves_on=lambda e: isinstance(e, ContentPolicyError) or is_route_failure(e))``).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from ..errors import (
    AuthenticationError,
    ContextLengthExceededError,
    EmptyStreamError,
    ProviderBusyError,
    ProviderError,
    RateLimitedError,
    UnsupportedRequestError,
)

__all__ = ["is_route_failure"]

_ROUTE_STATUSES = frozenset({402, 404})  # no credit here; this route lacks the model or path


def is_route_failure(error: ProviderError) -> bool:
    """Whether ``error`` says something about the route rather than about the request, so
    the next route may serve the call: a retryable error (unavailable, a timeout, a 429, a
    malformed answer ...), bad credentials, a spent quota, a context window too small, a
    full local queue, a request the route cannot serve (a local model asked for a tool call
    or an image), a 402 or 404. Not a request the provider refused as wrong (a 400,
    422; a :class:`~llmguard_sdk.errors.ContentPolicyError`), which would fail everywhere."""
    return (
        error.retryable
        or isinstance(
            error,
            # a 429 not retried here (a spent quota, x-should-retry: false) is still the route's
            (
                AuthenticationError,
                ContextLengthExceededError,
                EmptyStreamError,  # this request fails on this route: another may serve it
                ProviderBusyError,
                RateLimitedError,
                UnsupportedRequestError,  # (a local model asked for a tool call, an image)
            ),
        )
        or error.status_code in _ROUTE_STATUSES
    )
