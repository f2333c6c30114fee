"""Reading the results and exceptions of code the SDK did not write (openai-python, httpx...).

Works by duck typing, so no provider SDK needs to be installed.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Mapping
from typing import Any

import httpx

from ._http_library import HttpErrors
from .budget._usage import plain_usage
from .errors import (
    MalformedResponseError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)
from .models import Usage
from .providers._error_kinds import error_answer
from .providers.wire import error_from_status, usage_from_payload

__all__ = ["classify_exception", "usage_from_result"]


def usage_from_result(result: object) -> Usage | None:
    """The token usage in an LLM call's result: openai-python objects or plain dicts."""
    usage = result.get("usage") if isinstance(result, Mapping) else getattr(result, "usage", None)
    return usage_from_payload(plain_usage(usage))[0]


def classify_exception(exc: BaseException, *, route: str = "") -> ProviderError | None:
    """The SDK's view of an exception raised by a provider SDK (openai, httpx, requests ...).

    Returns the matching :class:`~llmguard_sdk.errors.ProviderError` (itself when it already
    is one), or ``None`` when the exception is not a provider failure (a bug in the caller's
    code, say). Works by duck typing, so no provider SDK needs to be installed.

    An exception group (a task group's ``ExceptionGroup``) is classified by its members, nested
    groups too: when every member is a provider failure, it counts as its first member that is
    not worth retrying, else (all retryable) as the member that asked for the longest wait
    (the first, when none did); a member that is no provider failure leaves it unclassified.

    .. versionchanged:: 0.2.0 exception groups are classified by their members.
    """
    if isinstance(exc, ProviderError):
        return exc
    members = _group_members(exc)
    if members is not None:
        return _classify_group(members, route)
    found = _http_error(exc, route)
    if found is not None:
        return found
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):  # requests' HTTPError: the status is the response's
        status = getattr(response, "status_code", None)
        status = status if isinstance(status, int) and status >= 400 else None
    event = getattr(exc, "body", None)
    if isinstance(status, int) and status < 400 and isinstance(event, Mapping):
        return _event_error(exc, event, route)
    if isinstance(status, int):
        headers = dict(getattr(response, "headers", None) or {})
        body = _text(response) or str(exc)  # (a stream's answer, unread: the error's own)
        error = error_from_status(status, headers, body, route=route)
        error.__cause__ = exc
        return error
    # an SDK's error around its HTTP client's (openai's APIConnectionError): the cause says
    # whether the request left
    cause = _http_error(exc.__cause__, route) if exc.__cause__ is not None else None
    if cause is not None:
        return cause
    name = type(exc).__name__.lower()
    if isinstance(exc, TimeoutError) or "timeout" in name:
        return ProviderTimeoutError(str(exc) or name, route=route)
    if isinstance(exc, ConnectionError) or "connection" in name or "network" in name:
        return ProviderUnavailableError(str(exc) or name, route=route)
    if ("decod" in name or "json" in name) and _parsing_an_answer(exc):
        return MalformedResponseError(str(exc) or name, route=route)
    return None


def _group_members(exc: BaseException) -> tuple[BaseException, ...] | None:
    """The members of an exception group (the builtin, or the backport of Python 3.10), or
    ``None`` for any other exception."""
    if not any(kind.__name__ == "BaseExceptionGroup" for kind in type(exc).__mro__):
        return None
    members = getattr(exc, "exceptions", None)
    return members if isinstance(members, tuple) else None


def _classify_group(members: tuple[BaseException, ...], route: str) -> ProviderError | None:
    """A group's classification (see :func:`classify_exception`); a group whose chosen member
    provably never left while another did counts as sent (a retry would send one again)."""
    errors = [classify_exception(member, route=route) for member in members]
    failures = [error for error in errors if error is not None]
    if not failures or len(failures) < len(errors):
        return None
    stuck = [error for error in failures if not error.retryable]
    if stuck:
        return stuck[0]
    chosen = max(failures, key=lambda e: -1.0 if e.retry_after is None else e.retry_after)
    if not chosen.request_sent and any(error.request_sent for error in failures):
        chosen = copy.copy(chosen)
        chosen.request_sent = True
    return chosen


def _http_error(exc: BaseException, route: str) -> ProviderError | None:
    """The SDK's view of an error of httpx or httpx2 (openai 3.x and anthropic build on it;
    looked at only when something imported it), ``None`` for any other exception."""
    for module in (httpx, sys.modules.get("httpx2")):
        if module is None or not isinstance(exc, module.HTTPError):
            continue
        if isinstance(exc, module.HTTPStatusError):
            answer = exc.response
            return error_from_status(
                answer.status_code, dict(answer.headers), _text(answer), route=route
            )
        sent = not isinstance(exc, HttpErrors.of(module).not_sent)
        if isinstance(exc, module.TimeoutException):
            return ProviderTimeoutError(str(exc) or repr(exc), route=route, request_sent=sent)
        if isinstance(exc, module.TransportError):
            return ProviderUnavailableError(str(exc) or repr(exc), route=route, request_sent=sent)
        if isinstance(exc, module.DecodingError):
            return MalformedResponseError(str(exc) or repr(exc), route=route)
    return None


# Where an HTTP client or a provider SDK parses a provider's answer
_ANSWER_PARSERS = frozenset(
    {"aiohttp", "anthropic", "httpcore", "httpx", "httpx2", "openai", "requests"}
)
# The generic decoders: their frames say nothing about whose text was decoded
_DECODERS = frozenset({"json", "codecs", "encodings"})


def _parsing_an_answer(exc: BaseException) -> bool:
    """Whether a decode error is a provider's malformed answer: a library's own type (say
    requests' ``JSONDecodeError``), or a generic one (``json.JSONDecodeError``,
    ``UnicodeDecodeError``) that an HTTP client or provider SDK asked for; the same error
    raised by the caller's own code (a hook, a filter, its settings) is not."""
    if type(exc) not in (json.JSONDecodeError, UnicodeDecodeError):
        return True
    asker = ""
    frame = exc.__traceback__
    while frame is not None:  # the innermost frame outside the decoders asked for it
        package = str(frame.tb_frame.f_globals.get("__name__", "")).partition(".")[0]
        if package not in _DECODERS:
            asker = package
        frame = frame.tb_next
    return asker in _ANSWER_PARSERS


def _event_error(exc: BaseException, event: Mapping[str, Any], route: str) -> ProviderError:
    """An SDK's error for an error event inside its stream (anthropic's ``APIStatusError``
    of the stream's 200 answer, ``body`` the event): typed as the Guard types one."""
    error = event.get("error", event)
    body = json.dumps(dict(event), default=str).encode()
    found = error_answer(error, {}, body, route=route, default=str(exc))
    found.__cause__ = exc
    return found


def _text(response: Any) -> str:
    """An error answer's text ('' when its body was not read: a stream's)."""
    try:
        text = response.text
    except Exception:  # httpx's or httpx2's ResponseNotRead
        return ""
    return text if isinstance(text, str) else ""
