"""A route that answers through a provider's batch API, at the batch discount.

:class:`BatchProvider` collects the calls it is given for ``window`` seconds (or until
``max_batch`` of them wait), submits them as one batch (OpenAI's Batch API: a JSON Lines file
and ``POST /batches``; Anthropic's Message Batches: ``POST /messages/batches``), polls until
the batch ends and hands each caller its own answer (results are matched by ``custom_id``).
Each call is an ordinary call of the Guard: its budget hold, settle and telemetry are its own,
and its usage says ``service_tier="batch"``, so it is priced at the batch rates (half price at
OpenAI and Anthropic)::

    guard = Guard(
        [OpenAICompatibleProvider("https://api.openai.com/v1", model="gpt-5-mini", api_key=key,
                                  name="openai"),
         BatchProvider("https://api.openai.com/v1", api="openai", model="gpt-5-mini",
                       api_key=key, window=5.0)],
        budgets=budgets, store=store,
    )
    guard.chat(question)                                    # interactive: the first route
    futures = [pool.submit(guard.chat, q, priority="batch", timeout=86400) for q in questions]

A Guard whose chain holds a batch route sends the calls with ``priority="batch"`` to its batch
routes, and never the others (the spend stage picks the routes, as it does for downgrades).

Each call's body is the one the API's plain route sends for it (Anthropic:
:func:`~llmguard_sdk.providers.anthropic.claude_payload`, openai's cache breakpoints as
Claude's ``cache_control`` and all). A call a Claude model refused for a sampling parameter
("`temperature` is deprecated for this model.") joins the next batch without it, and later
calls to that model leave it out, as :class:`~llmguard_sdk.providers.AnthropicProvider`
does.

A call's ``extra_headers`` and ``extra_query`` are its batch's, as neither batch API takes
them per call: every request of the batch (its creation, status reads, results) is sent
with them (``anthropic-beta`` turns a beta on for the whole Claude batch; an Azure
``api-version`` query), and calls that ask for different ones go into different batches
(:class:`~llmguard_sdk.errors.BatchSplitWarning` says so). A call's own idempotency key and
trace context are left out (a batch's ``custom_id`` does the key's work).

A call waits for its batch until its deadline (batch APIs answer within minutes to hours:
give batch calls a long ``timeout``); a batch that has not ended by the last of its calls'
deadlines fails them with :class:`~llmguard_sdk.errors.ProviderTimeoutError`. A batch that
no caller waits for any more (each gave up or its deadline passed) is cancelled at the
provider, which bills only what it had answered by then; so is every batch still running
when the route is closed (:meth:`BatchProvider.close`).

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid
import warnings
from collections.abc import AsyncGenerator, Generator
from typing import Any, Literal

import anyio
import httpx

from .._callers import caller_level
from .._keys import check_api_key
from ..errors import BatchSplitWarning, ConfigurationError, ProviderError
from ..models import ChatRequest, ChatResponse, StreamChunk
from ._anthropic_sampling import SAMPLING, RefusedSampling
from ._batch_api import BatchCall, BatchExchanges, settle, settle_all
from ._batch_inflight import InFlight
from ._batch_results import Outcome, as_chunk, missing, timed_out
from ._batch_sent import BatchOptions, batch_options, split_note
from ._http_errors import transport_error
from ._route_options import server_of, takes_cache_key
from .anthropic import ANTHROPIC_VERSION, build_anthropic_payload, claude_payload
from .base import StreamCall, _check_timing, _Streams
from .wire import build_payload, encode_payload

__all__ = ["BatchProvider"]


class BatchProvider(BatchExchanges, _Streams):
    """A route whose calls go through ``api``'s batch endpoints (see the module docs).

    Args:
        base_url: the API's base URL (``https://api.openai.com/v1``,
            ``https://api.anthropic.com/v1``, a FakeProvider's ``base_url``).
        api: ``"openai"`` (Batch API over chat completions) or ``"anthropic"`` (Message
            Batches).
        model: the model the route serves (``None``: the request's).
        name: the route's name (default ``"<api>-batch"``).
        api_key: sent as ``Authorization: Bearer`` (OpenAI) or ``x-api-key`` (Anthropic).
        window: seconds a batch collects calls before it is sent.
        max_batch: a batch is sent at once when this many calls wait.
        poll_interval: seconds before the first status check of a submitted batch; each
            later check waits 1.5 times longer than the one before, up to a minute (a batch
            takes minutes to hours). A caller that gives up is noticed within this time.
        transport: an httpx transport (tests).

    ``provider_name`` (``api``), ``server_address`` and ``server_port`` (the host and port
    of ``base_url``) are what telemetry names its calls' provider and server by, as a plain
    route's.
    """

    is_local = False
    context_window: int | None = None
    service_tier = "batch"
    """The tier every call of this route is billed at (budgets hold its rates)."""
    close_timeout = 10.0
    """The most seconds :meth:`close` spends cancelling the batches still running."""

    def __init__(
        self,
        base_url: str,
        *,
        api: Literal["openai", "anthropic"] = "openai",
        model: str | None = None,
        name: str | None = None,
        api_key: str | None = None,
        window: float = 2.0,
        max_batch: int = 1000,
        poll_interval: float = 2.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if api not in ("openai", "anthropic"):
            raise ConfigurationError(f"api must be 'openai' or 'anthropic', got {api!r}")
        if not (0 < window < 3600 and 0 < poll_interval < 3600 and 1 <= max_batch <= 50_000):
            raise ConfigurationError("window and poll_interval in (0, 3600) s, max_batch 1-50000")
        check_api_key(api_key)  # as every route's key: checked, and masked where shown
        headers: dict[str, str] = {"accept": "application/json"}
        if api == "anthropic":
            headers["anthropic-version"] = ANTHROPIC_VERSION
            if api_key:
                headers["x-api-key"] = api_key
        elif api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self.api = api
        self.provider_name: str = api  # telemetry's gen_ai.provider.name, server.address ...
        self.server_address, self.server_port = server_of(base_url)
        self._hints = takes_cache_key(base_url)  # (OpenAI's own, Azure OpenAI's)
        self.model = model
        self.name = name or f"{api}-batch"
        self.window, self.max_batch, self.poll_interval = window, max_batch, poll_interval
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/", headers=headers, timeout=30.0, transport=transport
        )
        self._lock = threading.Lock()
        self._waiting: dict[BatchOptions, list[BatchCall]] = {}  # by the batch's headers and query
        self._timer: threading.Timer | None = None
        self._split_told = False  # this window's calls were told they went into two batches
        self._closed = False
        self._inflight = InFlight()  # the batches sent that have not ended
        self._refused = RefusedSampling(self.name)  # (a Claude model's, as a plain route's)

    def __repr__(self) -> str:
        return f"BatchProvider(api={self.api!r}, name={self.name!r}, model={self.model!r})"

    # -- one call ---------------------------------------------------------------------------

    def _body(self, request: ChatRequest, model: str) -> dict[str, Any]:
        """A call's body: what the plain route of this API sends (a Claude call's leaves out
        the sampling parameters the model refused)."""
        if self.api == "anthropic":
            return claude_payload(request, model=model, stream=False, refused=self._refused)
        return build_payload(request, model=model, stream=False, hints=self._hints)

    def _enqueue(self, request: ChatRequest, model: str, deadline: float) -> BatchCall:
        _check_timing(deadline)  # (NaN or no number: refused before it joins a batch)
        options = batch_options(request, anthropic=self.api == "anthropic")
        body = self._body(request, model)
        encode_payload(body)  # (no JSON, a NaN: refused alone, as a plain route refuses it)
        call = BatchCall(uuid.uuid4().hex, body, deadline, request, model, options)
        self._join(call)
        return call

    def _join(self, call: BatchCall) -> None:
        """Put ``call`` in the next batch sent with its headers and query (at once when it
        fills the batch); the first call of a window to start a batch beside another warns."""
        with self._lock:
            if self._closed:
                raise ConfigurationError("the BatchProvider is closed")
            split = None if self._split_told else split_note(self.name, call.options, self._waiting)
            self._split_told = self._split_told or split is not None
            waiting = self._waiting.setdefault(call.options, [])
            waiting.append(call)
            if len(waiting) >= self.max_batch:
                self._start(self._waiting.pop(call.options))
                if not self._waiting:
                    self._stop_timer()
            elif self._timer is None:
                self._timer = threading.Timer(self.window, self._flush)
                self._timer.daemon = True
                self._timer.start()
        if split is not None:
            warnings.warn(split, BatchSplitWarning, stacklevel=caller_level())

    def _resend(self, call: BatchCall, outcome: Outcome) -> bool:
        """Whether ``call``, answered ``outcome``, joins the next batch: its model refused a
        sampling parameter it asked for (remembered: left out of this and later calls, as a
        plain Claude route leaves it out; each parameter once)."""
        if self.api != "anthropic" or not isinstance(outcome, ProviderError):
            return False
        asked = build_anthropic_payload(call.request, model=call.model, stream=False)
        if call.resent >= len(SAMPLING) or not self._refused.learn(call.model, outcome, asked):
            return False
        call.resent += 1
        call.body = self._body(call.request, call.model)
        call.custom_id = uuid.uuid4().hex
        try:
            self._join(call)
        except ConfigurationError:  # closed meanwhile
            settle(call.future, self._closed_error())
        return True

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Answer ``request`` through the next batch (waits until the batch ends)."""
        call = self._enqueue(request, model, deadline)
        try:
            return call.future.result(timeout=_seconds_until(deadline))
        except concurrent.futures.TimeoutError:
            call.future.cancel()  # not sent with a batch that has not left yet
            raise timed_out(self.name) from None

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Async twin of :meth:`complete` (the loop is not blocked while the batch runs)."""
        call = self._enqueue(request, model, deadline)
        try:
            return await asyncio.wait_for(
                asyncio.wrap_future(call.future), _seconds_until(deadline)
            )
        except asyncio.TimeoutError:
            raise timed_out(self.name) from None

    def _stream(self, call: StreamCall) -> Generator[StreamChunk, None, None]:
        yield as_chunk(self.complete(call.request, model=call.model, deadline=call.deadline))

    async def _astream(self, call: StreamCall) -> AsyncGenerator[StreamChunk, None]:
        yield as_chunk(await self.acomplete(call.request, model=call.model, deadline=call.deadline))

    # -- batches ----------------------------------------------------------------------------

    def _take(self) -> list[list[BatchCall]]:
        """The waiting calls, a batch of them for each set of headers and query."""
        taken, self._waiting = list(self._waiting.values()), {}
        self._stop_timer()
        return taken

    def _stop_timer(self) -> None:  # (the window ends)
        self._split_told = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _flush(self) -> None:
        with self._lock:
            batches = self._take()
        for calls in batches[1:]:  # each in a thread of its own: a batch runs for hours
            self._start(calls)
        if batches:
            self._run(batches[0])

    def _start(self, calls: list[BatchCall]) -> None:
        threading.Thread(target=self._run, args=(calls,), daemon=True).start()

    def _run(self, calls: list[BatchCall]) -> None:
        """Submit, poll until the batch ends (or the last deadline), hand out the results.
        Calls whose callers gave up (timed out, cancelled) before the batch left are not
        sent: nobody would get their answer, and the provider would bill them."""
        calls = [call for call in calls if not call.future.done()]
        if not calls:
            return
        if not self._inflight.begin(calls):  # closed meanwhile: not sent
            settle_all(calls, self._closed_error())
            return
        try:
            results, note = self._openai(calls) if self.api == "openai" else self._anthropic(calls)
            for call in calls:
                found = results.get(call.custom_id)
                outcome = missing(self.name, note) if found is None else found
                if not self._resend(call, outcome):
                    settle(call.future, outcome)
        except BaseException as exc:  # every caller gets the batch's failure
            settle_all(calls, self._failure(exc, calls))
        finally:
            self._inflight.end(calls)

    def _failure(self, exc: BaseException, calls: list[BatchCall]) -> ProviderError:
        """The typed error of a batch that failed with ``exc``: an error answer's own, a
        transport failure's (connection refused: not sent, so another attempt is safe), a
        bare ProviderError for anything else. Once the route has closed, its close's error
        (the results were being read as the connection pool closed: the pool's error)."""
        if self._inflight.closed:
            return self._closed_error()
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, httpx.HTTPError):
            return transport_error(exc, self.name, max(call.deadline for call in calls))
        return ProviderError(f"the batch failed: {exc!r}", route=self.name)

    # -- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Fail the calls still waiting for a batch, cancel the batches sent that have not
        ended (the provider would run and bill them to their end) and fail their calls, then
        release the connection pool. The cancels take :attr:`close_timeout` seconds at most;
        one that fails is logged, not raised."""
        with self._lock:
            self._closed = True
            calls = [call for batch in self._take() for call in batch]
        closed = self._closed_error()
        settle_all(calls, closed)  # a cancelled one (its async caller gave up) stays so
        self._cancel_in_flight(self.close_timeout, closed)
        self._http.close()

    async def aclose(self) -> None:
        """Async twin of :meth:`close` (in a worker thread: its cancels are requests)."""
        await anyio.to_thread.run_sync(self.close)


def _seconds_until(deadline: float) -> float:
    """The wait left before ``deadline`` (``math.inf``: as long as a wait can be)."""
    return min(max(0.0, deadline - time.monotonic()), threading.TIMEOUT_MAX)
