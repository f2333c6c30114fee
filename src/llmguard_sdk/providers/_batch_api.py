"""How :class:`~llmguard_sdk.providers.batch.BatchProvider` sends a batch and waits for it:
the exchanges with a provider's batch API (OpenAI's file upload and ``POST /batches``,
Anthropic's ``POST /messages/batches``; the status polled until the batch ends, its result
files read, a batch nobody waits for cancelled), and the calls a batch carries."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx

from ..errors import MalformedResponseError, ProviderError
from ..models import ChatRequest, ChatResponse
from ._batch_inflight import InFlight
from ._batch_results import (
    Outcome,
    anthropic_row,
    missing_note,
    openai_errors,
    openai_row,
    timed_out,
)
from ._batch_sent import BatchOptions
from .wire import error_from_status

__all__ = ["BatchCall", "BatchExchanges", "settle", "settle_all"]

logger = logging.getLogger("llmguard_sdk")

_ENDED = {"completed", "failed", "expired", "cancelled", "ended"}
_NOT_JSON = (ValueError, RecursionError)  # a bad line, bad UTF-8, 100k nested brackets
# a batch runs minutes to hours: its status checks grow 1.5 times apart, up to a minute apart
# (about 1,500 a day, not 43,200 at 2 s)
_POLL_GROWTH = 1.5
_LONGEST_POLL_S = 60.0


@dataclass
class BatchCall:
    """One call of a batch: its ``custom_id`` and body, and the future its caller waits on."""

    custom_id: str
    body: dict[str, Any]
    deadline: float
    request: ChatRequest
    model: str
    options: BatchOptions = ((), ())  # its batch's headers and query: calls share a batch by them
    future: concurrent.futures.Future[ChatResponse] = field(
        default_factory=concurrent.futures.Future
    )
    resent: int = 0  # times sent again without a sampling parameter the model refused


class BatchExchanges:
    """The batch API's side of a :class:`~llmguard_sdk.providers.batch.BatchProvider`
    (mixed into it): one batch of calls sent, polled until it ends and its results read
    (:meth:`_openai`, :meth:`_anthropic`: each call's outcome by ``custom_id``, and why a
    call may have none)."""

    name: str
    poll_interval: float
    _http: httpx.Client
    _inflight: InFlight

    def _ok(self, response: httpx.Response) -> httpx.Response:
        """``response`` when it is a 200; its typed error otherwise."""
        if response.status_code != 200:
            raise error_from_status(
                response.status_code, response.headers, response.text[:2000], route=self.name
            )
        return response

    def _checked(self, response: httpx.Response) -> dict[str, Any]:
        """A JSON object answer; the typed error of an error answer, a
        MalformedResponseError of one that is no JSON object."""
        try:
            data = self._ok(response).json()
        except _NOT_JSON:
            data = None
        if not isinstance(data, dict):
            raise MalformedResponseError(
                "the batch API's answer is not a JSON object",
                route=self.name,
                status_code=response.status_code,
                headers=response.headers,
                body=response.text[:2000],
            )
        return data

    def _id(self, answer: Mapping[str, Any]) -> str:
        """The ``id`` of a created file or batch."""
        found = answer.get("id")
        if not isinstance(found, str) or not found:
            raise MalformedResponseError("the batch API's answer has no id", route=self.name)
        return found

    def _again(self, exc: Exception, what: str) -> None:
        """Raise ``exc`` unless it may pass (a transport failure, a retryable answer: 5xx,
        429, a garbled one); a read of a batch that runs on at the provider is asked again."""
        if isinstance(exc, ProviderError) and not exc.retryable:
            raise exc
        logger.warning("%s: could not read the batch's %s (%r); asking again", self.name, what, exc)

    def _send(self, calls: list[BatchCall], method: str, url: str, **sent: Any) -> httpx.Response:
        """One request of the batch of ``calls``, with the headers and query they ask for
        (the same for each of them: :mod:`._batch_sent`)."""
        headers, query = calls[0].options
        return self._http.request(
            method, url, headers=dict(headers) or None, params=dict(query) or None, **sent
        )

    def _fetch(self, url: str, calls: list[BatchCall]) -> httpx.Response:
        """A result file's 200 answer, asked again every ``poll_interval`` after a failure
        that may pass, until the last deadline of ``calls``."""
        last = max(call.deadline for call in calls)
        while True:
            try:
                return self._ok(self._send(calls, "GET", url))
            except (httpx.HTTPError, ProviderError) as exc:
                if time.monotonic() + self.poll_interval > last:
                    raise
                self._again(exc, "results")
            time.sleep(self.poll_interval)

    def _read(
        self, url: str, result: Callable[[Mapping[str, Any]], Outcome], calls: list[BatchCall]
    ) -> tuple[dict[str, Outcome], int]:
        """The outcome of each call a result file (JSON Lines, whatever its content type)
        has a row for, by ``custom_id``, and how many rows named no call (not JSON, no
        ``custom_id``): those cost only their own calls, which are left without a result."""
        response = self._fetch(url, calls)
        found: dict[str, Outcome] = {}
        unread = 0
        for line in response.content.splitlines():  # bytes: U+2028 in a string is no end
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except _NOT_JSON:
                row = None
            custom_id = row.get("custom_id") if isinstance(row, dict) else None
            if isinstance(custom_id, str):
                found[custom_id] = result(row)
            else:
                unread += 1
        if unread:
            logger.warning("%s: %d batch result rows named no call", self.name, unread)
        return found, unread

    def _closed_error(self) -> ProviderError:
        """The error of a call the route's close ends (not sent, its batch cancelled, or its
        results read as the connection pool closed)."""
        return ProviderError("the BatchProvider closed", route=self.name)

    def _poll(self, path: str, calls: list[BatchCall], ended: str) -> dict[str, Any]:
        """The batch's status once ``ended`` says it ended; ProviderTimeoutError past the
        last deadline of its calls, or once every caller gave up (the batch is cancelled
        at the provider then: nobody would get its answers). The first check waits
        ``poll_interval``, each later one 1.5 times longer, a minute at most, and the last
        one is made at the deadline."""
        if not self._inflight.created(calls, path):  # the route closed as it was sent
            self._cancel(path, calls)
            raise self._closed_error()
        last = max(call.deadline for call in calls)
        wait = self.poll_interval
        while True:
            try:
                status = self._checked(self._send(calls, "GET", path))
            except (httpx.HTTPError, ProviderError) as exc:
                self._again(exc, "status")
                status = {}  # not known to have ended: polled on until the last deadline
            if status.get(ended) in _ENDED:
                self._inflight.end(calls)  # (no more to cancel)
                return status
            now = time.monotonic()
            if now >= last or not self._rest(calls, min(wait, last - now)):
                if self._inflight.end(calls):  # (else the route's close cancelled it)
                    self._cancel(path, calls)
                raise timed_out(self.name)
            wait = min(wait * _POLL_GROWTH, max(self.poll_interval, _LONGEST_POLL_S))

    def _rest(self, calls: list[BatchCall], seconds: float) -> bool:
        """Wait ``seconds`` before the next status check, looking every ``poll_interval``
        whether a caller still waits; False as soon as none does."""
        end = time.monotonic() + seconds
        while not all(call.future.done() for call in calls):
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, self.poll_interval))
        return False

    def _cancel(self, path: str, calls: list[BatchCall], timeout: float | None = None) -> None:
        """Cancel the batch of ``calls`` at ``path`` (both APIs: ``POST {path}/cancel``), in
        ``timeout`` seconds at most (``None``: the client's); a failure is logged, the
        callers' error stands."""
        sent = {} if timeout is None else {"timeout": timeout}
        try:
            self._checked(self._send(calls, "POST", f"{path}/cancel", **sent))
        except (httpx.HTTPError, ProviderError, RuntimeError) as exc:  # (Runtime: client closed)
            logger.warning("%s: could not cancel the batch %s: %r", self.name, path, exc)

    def _cancel_in_flight(self, timeout: float, error: ProviderError) -> None:
        """As the route closes: fail the calls of every batch sent that has not ended (those
        being sent waited for) with ``error``, then cancel those batches, within ``timeout``
        seconds in all. A cancel that fails or has no time left is logged."""
        end = time.monotonic() + timeout
        taken = self._inflight.close(timeout)
        for _, calls in taken:  # told first: what the batch's own thread reads now is no answer
            settle_all(calls, error)
        for path, calls in taken:
            left = end - time.monotonic()
            if left > 0:
                self._cancel(path, calls, timeout=left)
            else:
                logger.warning("%s: no time left to cancel the batch %s", self.name, path)

    def _openai(self, calls: list[BatchCall]) -> tuple[dict[str, Outcome], str]:
        lines = "".join(
            json.dumps(
                {
                    "custom_id": c.custom_id,
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": c.body,
                }
            )
            + "\n"
            for c in calls
        )
        upload = self._checked(
            self._send(
                calls,
                "POST",
                "files",
                files={"file": ("batch.jsonl", lines.encode(), "application/jsonl")},
                data={"purpose": "batch"},
            )
        )
        created = self._checked(
            self._send(
                calls,
                "POST",
                "batches",
                json={
                    "input_file_id": self._id(upload),
                    "endpoint": "/v1/chat/completions",
                    "completion_window": "24h",
                },
            )
        )
        status = self._poll(f"batches/{self._id(created)}", calls, "status")
        found: dict[str, Outcome] = {}
        unread = 0
        for file_id in (status.get("output_file_id"), status.get("error_file_id")):
            if file_id:
                path = f"files/{file_id}/content"
                rows, skipped = self._read(path, partial(openai_row, self.name), calls)
                found.update(rows)
                unread += skipped
        said = openai_errors(status)
        return found, "; ".join(n for n in (said, missing_note(unread)) if n)

    def _anthropic(self, calls: list[BatchCall]) -> tuple[dict[str, Outcome], str]:
        created = self._checked(
            self._send(
                calls,
                "POST",
                "messages/batches",
                json={"requests": [{"custom_id": c.custom_id, "params": c.body} for c in calls]},
            )
        )
        path = f"messages/batches/{self._id(created)}"
        status = self._poll(path, calls, "processing_status")
        url = status.get("results_url")
        if not url:
            return {}, ""
        found, unread = self._read(url, partial(anthropic_row, self.name), calls)
        return found, missing_note(unread)


def settle_all(calls: list[BatchCall], error: BaseException) -> None:
    """Fail each of ``calls`` (those not done yet) with ``error``."""
    for call in calls:
        settle(call.future, error)


def settle(
    future: concurrent.futures.Future[ChatResponse], outcome: ChatResponse | BaseException
) -> None:
    """Give ``future`` its answer or error, unless it is done already (a caller that gave up
    cancels its future, at any moment)."""
    try:
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    except concurrent.futures.InvalidStateError:
        pass
