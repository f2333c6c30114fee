"""The :class:`~llmguard_sdk.Guard`'s helpers for adopting it in existing code: the
``protect`` decorator, openai clients and HTTP clients its routes answer, feedback on answers.

(Split from :mod:`llmguard_sdk.guard`, which builds the Guard and runs its calls.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, overload

from ._core.stages import Stages
from .context import Hook
from .models import ChatResponse

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

    from .guard import Guard

__all__ = ["Adoption"]

F = TypeVar("F", bound=Callable[..., Any])


class Adoption:
    """The Guard's adoption helpers (a part of :class:`~llmguard_sdk.Guard`)."""

    _stages: Stages

    def _guard(self) -> Guard:
        return cast("Guard", self)  # the mixin is always a Guard's part

    def _protect_hooks(self) -> tuple[Hook, ...]:
        telemetry = self._stages.telemetry
        if telemetry is None:
            return self._stages.hooks
        return (*self._stages.hooks, telemetry.on_protect_event)

    @overload
    def protect(
        self,
        func: F,
        *,
        route: str = ...,
        tenant: str | None = ...,
        feature: str | None = ...,
        user: str | None = ...,
        timeout: float | None = ...,
    ) -> F: ...

    @overload
    def protect(
        self,
        func: None = None,
        *,
        route: str = ...,
        tenant: str | None = ...,
        feature: str | None = ...,
        user: str | None = ...,
        timeout: float | None = ...,
    ) -> Callable[[F], F]: ...

    def protect(
        self,
        func: F | None = None,
        *,
        route: str = "protected",
        tenant: str | None = None,
        feature: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
    ) -> F | Callable[[F], F]:
        """Decorate an existing function that calls an LLM, sync or async.

        Use as ``@guard.protect`` or ``@guard.protect(feature="search")``. The function runs
        unchanged and returns what it returned (an SDK stream watched, below); the Guard
        retries it with its retry policy and budget when it fails with a retryable provider
        error (429, 5xx, timeouts, from openai-python, httpx or this SDK; Retry-After
        honoured), reads the usage from the result (openai objects and plain dicts), reports
        a :class:`~llmguard_sdk.CallEvent` to its hooks, and bounds async functions by
        ``timeout`` (raising :class:`~llmguard_sdk.errors.ProviderTimeoutError`; one that is
        not a positive, finite number of seconds is a
        :class:`~llmguard_sdk.errors.ConfigurationError` at once, as is a ``func`` that is no
        function: ``@guard.protect("summaries")`` names no feature, its options are keywords).
        The last exception propagates unchanged; the event records how the SDK classified it. A
        :class:`~llmguard_sdk.errors.RetryMultiplicationWarning` says when the function uses
        an openai client that retries on its own. A generator or async generator (a streaming
        function) is guarded while it is iterated: retried only before its first item, reported
        when it ends with the usage its items carried (an async one bounded by ``timeout`` from
        the call to its last item). A provider SDK's stream the function returns (openai's or
        anthropic's ``Stream`` / ``AsyncStream``) is returned watched, a drop-in reported when
        it is read to its end, fails, or is closed or dropped (cancelled, with what it used so
        far: the usage its items told, else its prompt and delivered output counted, an
        estimate). So is the stream entered from a stream manager it returns
        (``client.chat.completions.stream(...)``, ``client.responses.stream(...)``,
        ``client.messages.stream(...)``; a request failing as it is entered is retried, the
        function called again for a new manager; an async one's requests and first item
        bounded by ``timeout`` from the entry). For such a stream
        ``timeout`` bounds the wait for each item, not the whole stream: the first item within
        ``timeout`` of the call, each later one within ``timeout`` of being asked for (an idle
        bound; the caller's own time between items does not count), an async stream raising
        :class:`~llmguard_sdk.errors.ProviderTimeoutError` past it. A sync stream's reads
        cannot be interrupted, so there the rule is not enforced: its client's own timeout
        (openai's and anthropic's ``timeout=``, a read timeout) bounds them. The usage is read
        from OpenAI chat chunks, Anthropic's ``message_start`` / ``message_delta`` or the
        Responses API's ``response.completed``. A plain ``def`` that returns a coroutine
        (``return async_client.chat.completions.create(...)``) is guarded as an async function
        is: the wrapper returns a coroutine, and the awaited call is retried, bounded and
        reported.

        .. versionchanged:: 0.2.0 a plain function returning a coroutine is guarded as an
           async one (it was reported ``"ok"`` before the call ran, and never retried); a
           returned SDK stream (or stream manager) is reported when it ends, with its usage
           (closed early: what it used so far); an async one's ``timeout`` bounds each item's
           wait, not the whole stream.
        """
        from .protect import protect_function

        def decorate(fn: F) -> F:
            return protect_function(
                fn,
                hooks=self._protect_hooks(),
                route=route,
                scope_keywords=(tenant, feature, user),
                timeout=self._stages.timeout if timeout is None else timeout,
                retry=self._stages.retry,
                budget=self._stages.retry_budget,
            )

        return decorate(func) if func is not None else decorate

    def client(self) -> OpenAI:
        """openai's own ``OpenAI`` client whose requests this Guard answers:
        ``client.chat.completions.create(...)``, ``client.responses.create(...)``,
        ``with_raw_response`` ... return openai's objects (see :mod:`llmguard_sdk.client`);
        without openai installed, the look-alike :class:`~llmguard_sdk.GuardedClient`. A
        failed call raises the Guard's error, which is also openai's for it
        (``openai.RateLimitError`` ...: what the transport seam answers).

        .. versionchanged:: 0.2.0 openai's own client where openai is installed; its errors
           are openai's as well as the Guard's.
        """
        from .client import _openai_client

        return _openai_client(self._guard())  # type: ignore[no-any-return]

    def aclient(self) -> AsyncOpenAI:
        """The async twin of :meth:`client` (``openai.AsyncOpenAI``)."""
        from .client import _async_openai_client

        return _async_openai_client(self._guard())  # type: ignore[no-any-return]

    def http_client(self, *, library: Literal["httpx", "httpx2"] | None = None) -> Any:
        """An HTTP client for ``OpenAI(http_client=...)`` / ``Anthropic(http_client=...)``
        whose requests this Guard answers, whatever its routes speak (the transport seam,
        :mod:`llmguard_sdk.transport`): httpx2 where installed, else httpx.

        .. versionadded:: 0.2.0
        """
        from .transport import http_client

        return http_client(self._guard(), library=library)

    def async_http_client(self, *, library: Literal["httpx", "httpx2"] | None = None) -> Any:
        """The async twin of :meth:`http_client` (``AsyncOpenAI(http_client=...)``).

        .. versionadded:: 0.2.0
        """
        from .transport import async_http_client

        return async_http_client(self._guard(), library=library)

    def feedback(self, call_id: str, score: float, *, label: str | None = None) -> bool:
        """Record a score for the answer whose ``metadata["call_id"]`` is ``call_id`` (a
        thumb, a grader's): :meth:`~llmguard_sdk.telemetry.Telemetry.feedback` and, with a
        release, the canary's count on the call's arm; whether the score was recorded
        anywhere (telemetry knew the call, or the canary counted it: a call's first score,
        while its stage lasts). False when neither did.

        .. versionadded:: 0.2.0
        """
        telemetry, releases = self._stages.telemetry, self._stages.releases
        known = telemetry.feedback(call_id, score, label=label) if telemetry else False
        counted = False
        if releases is not None:  # the canary counts scores on the call's arm (once valid)
            counted = releases.feedback(call_id, score)
        return known or counted

    def report_false_hit(self, response: ChatResponse) -> bool:
        """Report that ``response``, served from the cache, answered another question: feeds
        the cache's ``stats.false_hit_rate`` and its monitor (see
        :meth:`ResponseCache.report_false_hit <llmguard_sdk.cache.ResponseCache.report_false_hit>`);
        whether it counted (only answers this Guard's cache found by similarity do; False
        without a cache).

        .. versionadded:: 0.2.0
        """
        cache = self._stages.cache
        return cache.report_false_hit(response) if cache is not None else False

    def invalidate_cached(self, response: ChatResponse) -> bool:
        """Delete the cached answer ``response`` was served from, in every process sharing
        the cache (see :meth:`ResponseCache.invalidate
        <llmguard_sdk.cache.ResponseCache.invalidate>`): the next call asks a route again.
        Whether an entry was deleted (False for an answer not from the cache, or without a
        cache).

        .. versionadded:: 0.2.0
        """
        cache = self._stages.cache
        return cache.invalidate(response) if cache is not None else False

    async def ainvalidate_cached(self, response: ChatResponse) -> bool:
        """Async twin of :meth:`invalidate_cached` (Redis is not waited on in the loop).

        .. versionadded:: 0.2.0
        """
        cache = self._stages.cache
        return await cache.ainvalidate(response) if cache is not None else False
