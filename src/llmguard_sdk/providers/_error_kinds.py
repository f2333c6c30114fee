"""Which typed error an error answer is, where its HTTP status alone does not settle it.

- ``x-should-retry: true|false`` is the server's own word on retrying (OpenAI sends it;
  openai-python obeys it over the status): it sets the ``retryable`` of the error its HTTP
  answer is, never of an error event later inside a stream (the header is the 200 answer's).
- An error object that came in a 200 answer (an error event inside a stream: OpenAI's
  ``{"error": {...}}``, Anthropic's ``error`` event, the Responses API's ``error``; a router's
  200 answer whose model failed) names its kind in ``type`` or ``code`` (a router's: the HTTP
  status). Two tables (:data:`EXACT_STATUSES`: whole names, where a word would mislead;
  :data:`NAMED_STATUSES`: words) give each named kind the HTTP status it comes with as an
  error answer (``rate_limit_error`` 429, ``overloaded_error`` 529, ``timeout_error`` 504
  ...), and from there the error is that answer's: the same class (by
  :func:`status_error_kind`), the same ``status_code`` and the same retry verdict
  (:func:`judge_retry`: a spent quota is not retried), whether it came as an HTTP error, a
  200 error answer or an event inside a stream. A kind the tables do not know is a
  :class:`~llmguard_sdk.errors.ProviderUnavailableError` with the answer's own status.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType

from ..errors import (
    AuthenticationError,
    BadRequestError,
    ContentPolicyError,
    ContextLengthExceededError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitedError,
    StreamInterruptedError,
)

__all__ = [
    "CONTEXT_LENGTH_MARKERS",
    "EXACT_STATUSES",
    "NAMED_STATUSES",
    "POLICY_CODES",
    "UNAVAILABLE_4XX",
    "body_error",
    "body_object",
    "error_answer",
    "error_kind",
    "judge_retry",
    "judged_error",
    "policy_code",
    "quota_spent",
    "server_says_retry",
    "status_error_kind",
]

UNAVAILABLE_4XX = frozenset({409, 425})
"""4xx statuses that say "not now" rather than "not this request", so another attempt may
succeed: :class:`~llmguard_sdk.errors.ProviderUnavailableError`, retryable. 409 Conflict is a
lock timeout at OpenAI and Anthropic (openai-python and anthropic-sdk-python retry it unless
``x-should-retry: false``); 425 Too Early was not processed, send it again later."""

CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",  # also llama-cpp-python's "Requested tokens (N) exceed context window of M"
    "too many tokens",
    "prompt is too long",  # Anthropic
    # llama.cpp's server (llama-server): its error type, stable, and its words, which moved
    # between builds ("the request exceeds the available context size, try increasing it",
    # "request (N tokens) exceeds the available context size (M tokens) ...", "request (N
    # tokens) exceeds context size (M tokens)"; a multimodal input's "input (N tokens) is
    # larger than the max context size (M tokens)")
    "exceed_context_size_error",
    "exceeds the available context size",
    "exceeds context size",
    "larger than the max context size",
)
"""Words of a refused request that say the input is longer than the model's context: read in
the answer's body (or the error object's type, code and message), they make the refusal a
:class:`~llmguard_sdk.errors.ContextLengthExceededError` (the chain moves on to a route
with room) instead of a plain bad request."""
NAMED_STATUSES: tuple[tuple[str, int], ...] = (
    ("insufficient_quota", 429),  # OpenAI's spent quota: a 429 not retried (quota_spent)
    ("rate_limit", 429),  # rate_limit_exceeded (OpenAI), rate_limit_error (Anthropic)
    ("authentication", 401),
    ("invalid_api_key", 401),
    ("permission", 403),
    ("billing", 402),  # Anthropic's billing_error: no credit on this route
    ("not_found", 404),  # not_found_error (Anthropic), model_not_found (OpenAI)
    ("request_too_large", 413),
    ("invalid_request", 400),
    ("invalid_prompt", 400),  # the Responses API's
    ("bad_request", 400),
    ("overloaded", 529),  # Anthropic's overloaded_error
    ("api_error", 500),  # Anthropic's
    ("server_error", 500),  # OpenAI's
)
"""An error object's named kind (a word in its ``type`` or ``code``, first match wins) and the
HTTP status an error answer of that kind has: the one table by which an error inside a
stream (or a 200 answer) is read as the HTTP error answer it stands for. A name that
:data:`EXACT_STATUSES` holds is read there first."""
_REQUEST_FAULTS = (  # the Responses API's (openai-python's ResponseError.code): a bad input
    "invalid_image",
    "invalid_image_format",
    "invalid_base64_image",
    "invalid_image_url",
    "image_too_large",
    "image_too_small",
    "image_parse_error",
    "invalid_image_mode",
    "image_file_too_large",
    "unsupported_image_media_type",
    "empty_image_file",
    "failed_to_download_image",
    "image_file_not_found",
    "data_residency_mismatch",  # the project's data residency does not allow the request
)
POLICY_CODES = frozenset(
    {
        "content_policy_violation",  # OpenAI's 400 (images, moderated models)
        "content_filter",  # Azure OpenAI's 400 (its innererror: ResponsibleAIPolicyViolation)
        "responsibleaipolicyviolation",
        # the Responses API's: refused by a usage policy
        "image_content_policy_violation",
        "bio_policy",
        "misalignment_policy_violation",
    }
)
"""Codes (an error object's ``code`` or ``type``, Azure's ``innererror.code``; compared in
lower case) that name a content filter's refusal: a refused request
(:data:`EXACT_STATUSES`: 400) is a :class:`~llmguard_sdk.errors.ContentPolicyError`."""
EXACT_STATUSES: Mapping[str, int] = MappingProxyType(
    {
        **dict.fromkeys(POLICY_CODES, 400),
        "timeout_error": 504,  # Anthropic's 504 (its GatewayTimeoutError)
        "vector_store_timeout": 504,  # the Responses API's: file_search's store was too slow
        "request_timeout": 408,  # OpenAI's (a batch row's, a session turn's): a timeout
        # Anthropic's 400 whose body did not arrive in time (its details.error_code): nothing
        # was done, and another attempt may arrive in time: HTTP's 408 in all but its status
        "request_body_timeout": 408,
        **dict.fromkeys(_REQUEST_FAULTS, 400),
    }
)
"""Names of an error object's kind (its whole ``type`` or ``code``, or the cause Anthropic
names in ``details.error_code``) that no word of :data:`NAMED_STATUSES` tells, or whose word
would mislead (any name holding ``timeout`` was a 504 unavailable, OpenAI's
``request_timeout`` among them), and the HTTP status each stands for; read before
:data:`NAMED_STATUSES`. One that stands for 408, a request that did not arrive in time
(Anthropic's ``request_body_timeout``, which comes as a 400), makes a 400 answer naming it
a timeout too (:func:`error_kind`), retried. Another name ending in ``timeout`` that no word
of :data:`NAMED_STATUSES` tells but a 5xx one (``gateway_timeout``, ``read_timeout``) stands
for 504, a timeout on the way. The Responses API's request faults (a bad image,
``invalid_image_url``, ``image_too_large`` ...; a ``data_residency_mismatch``) and content
filters' refusals (:data:`POLICY_CODES`: ``content_filter``, ``bio_policy`` ...) are 400s.
Gemini's ``DEADLINE_EXCEEDED`` comes with its numeric ``code`` (504), which decides, as
vLLM's does."""
_QUOTA_SPENT = "insufficient_quota"  # OpenAI's: a billing state, not back within the call
# Anthropic's spent credit: a 400 invalid_request_error "Your credit balance is too low to
# access the Anthropic API ...", a billing state too (told by its words: the type is any 400's)
_CREDIT_SPENT = ("invalid_request_error", "credit balance is too low")


def server_says_retry(headers: Mapping[str, str]) -> bool | None:
    """``x-should-retry``'s verdict: True or False, ``None`` when absent or unclear."""
    for name, value in headers.items():
        if name.lower() == "x-should-retry":
            verdict = value.strip().lower()
            return True if verdict == "true" else False if verdict == "false" else None
    return None


def body_object(body: str) -> dict[str, object] | None:
    """The JSON object of an error answer's body: the object itself, or the one object of a
    list of one (Gemini's OpenAI-compatible endpoint answers ``[{"error": {...}}]``);
    ``None`` for any other body."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError, RecursionError):
        return None
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    return data if isinstance(data, dict) else None


def body_error(body: str) -> object:
    """The ``error`` member of an error answer's JSON body (:func:`body_object`); ``None``
    without one."""
    data = body_object(body)
    return data.get("error") if data is not None else None


def quota_spent(error: object) -> bool:
    """Whether an error object names a spent quota or credit (OpenAI's 429
    ``insufficient_quota``; Anthropic's 400 ``invalid_request_error`` whose message says the
    credit balance is too low): a billing state that no wait within the call ends, so it is
    a :class:`~llmguard_sdk.errors.RateLimitedError` (:func:`error_kind`), not retryable, and
    the chain moves on."""
    if not isinstance(error, Mapping):
        return False
    if any(error.get(field) == _QUOTA_SPENT for field in ("type", "code")):
        return True
    kind, words = _CREDIT_SPENT
    message = error.get("message")
    return error.get("type") == kind and isinstance(message, str) and words in message.lower()


def judge_retry(error: ProviderError, headers: Mapping[str, str], error_object: object) -> None:
    """Set ``error.retryable`` where the answer says more than its status: a spent quota
    (:func:`quota_spent` of its ``error_object``) is not retried; ``x-should-retry``, the
    server's own word, wins over both."""
    if isinstance(error, RateLimitedError) and quota_spent(error_object):
        error.retryable = False
    verdict = server_says_retry(headers)
    if verdict is not None:
        error.retryable = verdict


def error_kind(error: object, answered: int, text: str = "") -> tuple[type[ProviderError], int]:
    """The typed error, and its ``status_code``, of a failure answered with HTTP status
    ``answered`` and carrying the error object ``error`` (``None`` without one; ``text``:
    the answer's body, where words may tell a context-length refusal, else the object's).

    An error answer (``answered`` >= 400) is its status's error, but for a 400 whose error
    object names a request that did not arrive in time (:data:`EXACT_STATUSES`' 408s:
    Anthropic's ``details.error_code`` ``request_body_timeout``): a
    :class:`~llmguard_sdk.errors.ProviderTimeoutError`, retryable (its ``status_code`` stays
    the answer's 400). An error object in a 200
    answer (a stream's error event, a router's error answer) stands for the HTTP status its
    numeric ``code`` gives (``408`` or ``"408"``; a router's: the status of the failure
    behind it), else for the status of its named kind (:data:`NAMED_STATUSES`), and is
    that status's error; one that names no known kind is a
    :class:`~llmguard_sdk.errors.ProviderUnavailableError` with status ``answered``.
    Either way a refused request whose words say the context is too long is a
    :class:`~llmguard_sdk.errors.ContextLengthExceededError`. A spent quota or credit
    (:func:`quota_spent`; Anthropic's comes as a 400) is a
    :class:`~llmguard_sdk.errors.RateLimitedError`, as OpenAI's 429 is."""
    status = answered if answered >= 400 else _named_status(error)
    if answered == 400 and _exact_status(error) == 408:  # a request that came too slowly
        return ProviderTimeoutError, answered
    if quota_spent(error):
        return RateLimitedError, status or answered
    words = (text or _words(error, ("type", "code", "message"))).lower()
    too_long = any(marker in words for marker in CONTEXT_LENGTH_MARKERS)
    if status is None:
        return (ContextLengthExceededError if too_long else ProviderUnavailableError), answered
    kind = status_error_kind(status)
    if kind is BadRequestError and policy_code(error) is not None:
        kind = ContentPolicyError
    elif kind is BadRequestError and too_long:
        kind = ContextLengthExceededError
    return kind, status


def policy_code(error: object) -> str | None:
    """The code by which an error object names a content filter's refusal
    (:data:`POLICY_CODES`: its ``code``, its ``type``, Azure's ``innererror.code``), as the
    provider wrote it; ``None`` for another error."""
    if not isinstance(error, Mapping):
        return None
    inner = error.get("innererror")
    found = [error.get("code"), error.get("type")]
    found.append(inner.get("code") if isinstance(inner, Mapping) else None)
    return next((c for c in found if isinstance(c, str) and c.lower() in POLICY_CODES), None)


def _named_status(error: object) -> int | None:
    """The HTTP status an error object stands for: its numeric ``code`` where that is one
    (an HTTP error status, 400-599, also as a string of three digits), else its named
    kind's (:data:`EXACT_STATUSES`, then :data:`NAMED_STATUSES`, then 504 for another name
    ending in ``timeout``); ``None`` for none of these."""
    code = error.get("code") if isinstance(error, Mapping) else None
    if isinstance(code, str) and len(code) == 3 and code.isascii() and code.isdigit():
        code = int(code)  # LiteLLM's proxy sends "408"
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    exact = _exact_status(error)
    if exact is not None:
        return exact
    named = _words(error, ("type", "code")).lower()
    found = next((status for word, status in NAMED_STATUSES if word in named), None)
    # gateway_timeout, read_timeout ...: a timeout on the way, as timeout_error; a 4xx word
    # (invalid_request_error) still says the request is at fault, a 5xx one says less
    if (found is None or found >= 500) and any(w.endswith("timeout") for w in named.split(" ")):
        return 504
    return found


def _exact_status(error: object) -> int | None:
    """The status :data:`EXACT_STATUSES` gives the first of an error object's names that it
    holds (its ``type``, its ``code``, Anthropic's ``details.error_code``); ``None`` for none."""
    names = _words(error, ("type", "code")).lower().split(" ")
    details = error.get("details") if isinstance(error, Mapping) else None
    cause = details.get("error_code") if isinstance(details, Mapping) else None
    if isinstance(cause, str):
        names.append(cause.lower())
    return next((EXACT_STATUSES[name] for name in names if name in EXACT_STATUSES), None)


def _words(error: object, fields: tuple[str, ...]) -> str:
    if not isinstance(error, Mapping):
        return ""
    return " ".join(str(error[field]) for field in fields if isinstance(error.get(field), str))


def error_answer(
    error: object,
    headers: Mapping[str, str],
    body: bytes,
    *,
    route: str,
    default: str = "the provider answered an error",
) -> ProviderError:
    """The typed error of a 200 answer whose JSON is an ``error`` object (``default``: its
    message where the error has none), with the answer's headers and body: the error, status
    and retry verdict the same failure answered as an HTTP error has (:func:`error_kind`,
    :func:`judge_retry`)."""
    said = error.get("message") if isinstance(error, dict) else error
    text = body[:2000].decode("utf-8", errors="replace")
    message = said if isinstance(said, str) and said else default

    def build(kind: type[ProviderError], status: int) -> ProviderError:
        return kind(message, route=route, status_code=status, headers=headers, body=text)

    return judged_error(error, build, headers=headers)


def judged_error(
    error: object,
    build: Callable[[type[ProviderError], int], ProviderError],
    *,
    answered: int = 200,
    headers: Mapping[str, str] | None = None,
    text: str = "",
) -> ProviderError:
    """The typed error of an error object ``error`` that came in an answer of HTTP status
    ``answered`` (an HTTP error answer's, a 200 answer's, a stream's error event, a batch's
    result row): ``build(kind, status)`` makes it from the kind and status
    :func:`error_kind` gives (``text``: the answer's body, whose words may tell a
    context-length refusal), and :func:`judge_retry` sets its retry verdict (``headers``:
    the answer's own, whose ``x-should-retry`` wins; none for an event inside a stream or a
    result row). A :class:`~llmguard_sdk.errors.StreamInterruptedError` (text was
    delivered) is never retried: no verdict is set on it."""
    kind, status = error_kind(error, answered, text)
    failure = build(kind, status)
    if isinstance(failure, ContentPolicyError) and failure.code is None:
        failure.code = policy_code(error)
    if not isinstance(failure, StreamInterruptedError):
        judge_retry(failure, headers or {}, error)
    return failure


def status_error_kind(status: int) -> type[ProviderError]:
    """The error of an HTTP error status (400-599 and beyond), whether an answer's or a
    numeric ``code`` in an error object (the HTTP status of a router's failure); a
    context-length refusal, which its words tell, is the caller's to find."""
    if status == 429:
        return RateLimitedError
    if status in (401, 403):
        return AuthenticationError
    if status == 408:
        return ProviderTimeoutError
    if status >= 500 or status in UNAVAILABLE_4XX:
        return ProviderUnavailableError
    return BadRequestError
