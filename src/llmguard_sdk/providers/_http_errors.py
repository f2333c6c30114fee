"""An HTTP call's deadline as its timeouts, and its transport failures as typed errors.

What a provider's HTTP calls share: no single wait (connect, a read, ...) outlasts the
call's deadline, and an httpx or httpx2 error becomes a
:class:`~llmguard_sdk.errors.ProviderError` that says whether the request was sent.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping

import httpx

from .._http_library import HttpErrors, Library, library_module
from ..errors import (
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from .base import _check_timing

__all__ = [
    "HTTPX_ERRORS",
    "LONGEST_WAIT",
    "deadline_passed",
    "library_errors",
    "timeout_until",
    "transport_error",
]

HTTPX_ERRORS = HttpErrors.of(httpx)
"""httpx's errors, by what they mean (the sync calls' library)."""


@functools.cache
def library_errors(library: Library) -> HttpErrors:
    """``library``'s errors (httpx's or httpx2's), by what they mean."""
    return HttpErrors.of(library_module(library))


LONGEST_WAIT = 24 * 3600.0
"""The longest single wait (connect, a read, ...) of a call with no deadline (``math.inf``): a
socket's timeout cannot be infinite (OverflowError), and a day of silence is an answer."""


def timeout_until(deadline: float, route: str, idle: float | None = None) -> float:
    """The request's timeout (every one of httpx's: connect, read, write, pool): no single
    wait may outlast the deadline (or ``idle``). A deadline of ``math.inf`` is none; NaN, or
    what is not a number, is a :class:`~llmguard_sdk.errors.RequestValidationError`."""
    _check_timing(deadline, idle)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise ProviderTimeoutError(
            "the call's deadline passed before the request", route=route, request_sent=False
        )
    return min(remaining, LONGEST_WAIT if idle is None else idle, LONGEST_WAIT)


def deadline_passed(route: str) -> ProviderTimeoutError:
    """The error of a call whose deadline passed while it waited for the answer."""
    return ProviderTimeoutError(
        "the call's deadline passed while waiting for the answer", route=route
    )


def transport_error(
    exc: Exception,
    route: str,
    deadline: float,
    errors: HttpErrors = HTTPX_ERRORS,
    answered: tuple[int, Mapping[str, str]] | None = None,
) -> ProviderError:
    """``exc`` (an error of ``errors``' library) as the typed error of a call to ``route``:
    whether the request was sent, and a timeout where the deadline has passed.
    ``answered``: the status and headers of the answer whose body ``exc`` broke (they came),
    kept on the error as a stream's break keeps them: a 200 says the provider took the
    request (:func:`~llmguard_sdk._core.limits.bills_prompt`)."""
    error = _transport_error(exc, route, deadline, errors)
    if answered is not None:
        error.status_code, headers = answered
        error.headers = {name.lower(): value for name, value in headers.items()}
    return error


def _transport_error(
    exc: Exception, route: str, deadline: float, errors: HttpErrors
) -> ProviderError:
    sent = not isinstance(exc, errors.not_sent)  # not sent: safe to send again
    if time.monotonic() >= deadline:
        error = deadline_passed(route)
        error.request_sent = sent
        return error
    if isinstance(exc, errors.timeout):
        return ProviderTimeoutError(f"no answer in time: {exc!r}", route=route, request_sent=sent)
    if isinstance(exc, errors.decoding):
        return MalformedResponseError(f"undecodable response: {exc!r}", route=route)
    return ProviderUnavailableError(f"connection failed: {exc!r}", route=route, request_sent=sent)
