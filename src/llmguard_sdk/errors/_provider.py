"""A provider's failures (see :mod:`llmguard_sdk.errors`, which exports them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..telemetry import redaction  # (a module: redaction imported first imports this one)
from ._base import LLMGuardError

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "ContentPolicyError",
    "ContextLengthExceededError",
    "EmptyStreamError",
    "MalformedResponseError",
    "ProviderBusyError",
    "ProviderError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateLimitedError",
    "StreamInterruptedError",
    "UnsupportedRequestError",
]


class ProviderError(LLMGuardError):
    """A provider failed to give a usable answer.

    Attributes:
        route: name of the route (provider) that failed.
        status_code: HTTP status, or ``None`` when there was no HTTP answer.
        headers: the response headers, lower-case keys (empty when there was no answer).
        retry_after: seconds the provider asked us to wait, when it said so.
        retryable: whether the SDK's retry rules allow another attempt.
        request_sent: ``False`` when the request provably never reached the provider
            (connection refused, no connection in time), so even a non-idempotent call may be
            sent again.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        route: str = "",
        status_code: int | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after: float | None = None,
        body: str | None = None,
        request_sent: bool = True,
    ) -> None:
        # Providers echo credentials in error texts ("Incorrect API key provided: sk-...").
        super().__init__(redaction.redact_secrets(message))
        self.route = route
        self.status_code = status_code
        self.headers: dict[str, str] = {k.lower(): v for k, v in (headers or {}).items()}
        self.retry_after = retry_after
        self.body = redaction.redact_secrets(body) if body is not None else None
        self.request_sent = request_sent

    def __str__(self) -> str:
        where = f" [route={self.route}]" if self.route else ""
        status = f" (HTTP {self.status_code})" if self.status_code is not None else ""
        return f"{self.args[0]}{status}{where}"


class RateLimitedError(ProviderError):
    """The provider answered 429 Too Many Requests."""

    retryable = True


class ProviderUnavailableError(ProviderError):
    """The provider is down or cannot serve the call now: 5xx, 529, 409 (a lock timeout),
    425 Too Early, connection refused or reset."""

    retryable = True


class EmptyStreamError(ProviderUnavailableError):
    """A stream that ended without any answer: a 200 with no event, its last event alone
    (``[DONE]``, Claude's ``message_stop``), or a route of the user's own whose stream gave
    no chunk.

    A server answers so a stream request it failed before it began, and such a failure is
    this request's on this route: llama-cpp-python's server answers a prompt past its context
    window so (a plain call gets its 400). So, as a
    :class:`ContextLengthExceededError` is, it is not retried on the route, it is no failure
    of the route's circuit breaker (a healthy server refusing long prompts would open it),
    and the chain moves on to the next route. A route that answers every stream so is tried,
    and left, once a call.

    .. versionadded:: 0.2.0
    """

    retryable = False


class ProviderTimeoutError(ProviderError):
    """The provider did not answer within the call's deadline, or answered 408 (or a 400
    saying the request did not arrive in time: Anthropic's ``request_body_timeout``)."""

    retryable = True
    _filter_late: bool = False
    """Whether it is an async filter's wait past the call's deadline (the SDK's own flag:
    see ``llmguard_sdk._core.filters.late``)."""


class ProviderBusyError(ProviderError):
    """The route refused the call at once because it is at capacity (a local model's full
    queue). Not retried on the same route: the chain moves on without waiting."""


class BadRequestError(ProviderError):
    """The provider refused the request itself (400, 404, 422); retrying will not help."""


class ContextLengthExceededError(BadRequestError):
    """The prompt is longer than the model's context window."""


class ContentPolicyError(BadRequestError):
    """The provider's content filter refused the request: OpenAI's 400
    ``content_policy_violation``, Azure OpenAI's 400 ``content_filter`` (its ``innererror``
    ``ResponsibleAIPolicyViolation``), the Responses API's ``image_content_policy_violation``,
    ``bio_policy`` ... over HTTP or inside a stream. The message is the provider's; ``code``
    the code that named the refusal. Not retried, and the chain stops on it by default, as on
    any refused request (the prompt goes to no other provider); ``moves_on=`` can hand it on
    (:func:`~llmguard_sdk.router.is_route_failure`). The seam answers it with its code.

    .. versionadded:: 0.2.0
    """

    def __init__(self, message: str, *, code: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.code = code


class AuthenticationError(ProviderError):
    """The provider refused our credentials (401, 403)."""


class MalformedResponseError(ProviderError):
    """The provider's answer could not be understood (bad JSON, wrong type, missing fields)."""

    retryable = True


class StreamInterruptedError(ProviderError):
    """A stream broke after content had been delivered to the caller.

    It is never retried or replayed automatically: the caller has seen ``partial_text``
    already, and a replay would show it twice.
    """

    def __init__(self, message: str, *, partial_text: str = "", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.partial_text = partial_text


class UnsupportedRequestError(BadRequestError):
    """The route cannot serve this kind of call, though another route may: a local model
    asked to call a tool (``tool_choice`` ``"required"``, Anthropic's ``any``, a named tool)
    or to read a content part other than text (an image, audio, a file). Raised before the
    route does any work. As a :class:`~llmguard_sdk.errors.ContextLengthExceededError` is,
    it is not retried on the route, it is no failure of the route's circuit breaker, and the
    chain moves on to the next route (after the last one, to a stale cached answer, else
    :class:`~llmguard_sdk.errors.AllRoutesFailedError`).

    .. versionadded:: 0.2.0
    """
