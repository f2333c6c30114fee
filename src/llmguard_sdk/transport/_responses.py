"""OpenAI's Responses API on the wire: ``POST /v1/responses``, JSON or SSE events.

The request becomes a chat call of the Guard (any route answers it: chat providers, the
Responses provider, Anthropic, the local model), so caching, budgets, rate limits and
telemetry treat it as they treat chat.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import LLMGuardError
from ..models import ChatResponse, StreamChunk
from ..providers._responses_input import RESPONSES_ONLY, chat_arguments
from ..providers._responses_wire import Answer, EventWriter
from ..providers.wire import RESPONSES_ONLY_KEY
from . import _wire
from ._chat import ChatWire, guard_arguments
from ._wire import Incoming


def _response_id(given: str | None) -> str:
    return given if given and given.startswith("resp") else _wire.new_id("resp")


class ResponsesWire:
    """Responses: parse a request, answer a ``response`` object or its events."""

    def arguments(self, body: dict[str, Any], incoming: Incoming) -> dict[str, Any]:
        """``body`` (a Responses request) as Guard arguments; its Responses-only parameters
        named for the routes that do not speak Responses to leave out."""
        params = chat_arguments(body)
        only = [key for key in RESPONSES_ONLY if key in params]
        arguments = guard_arguments(params, incoming)
        _wire.name_only(arguments, RESPONSES_ONLY_KEY, only)
        return arguments

    user = ChatWire.user  # (its user and extra_body go on to its arguments as they are)

    def answer(self, response: ChatResponse, request: Mapping[str, Any]) -> dict[str, Any]:
        """The ``response`` object of ``response``, echoing the parameters of ``request`` (the
        request's body)."""
        answer = Answer(_response_id(response.id), response.model, request=request)
        answer.text = response.text
        answer.tool_calls = list(response.tool_calls or ())
        answer.usage, answer.finish_reason = response.usage, response.finish_reason
        answer.take_head(response.metadata)  # the route's created
        answer.add_metadata(response.metadata)  # a refusal, reasoning, logprobs, annotations
        return answer.body()

    def writer(self, arguments: Mapping[str, Any], body: Mapping[str, Any]) -> EventsWriter:
        """A writer for one stream's events."""
        model = arguments.get("model")
        name = model if isinstance(model, str) else ""
        return EventsWriter(Answer(_wire.new_id("resp"), name, request=body))

    def error(self, exc: LLMGuardError) -> dict[str, Any]:
        """OpenAI's error body."""
        return _wire.openai_error(exc)


class EventsWriter:
    """Responses events for the transport's stream loop (opening events before the first)."""

    def __init__(self, answer: Answer) -> None:
        self._events = EventWriter(answer)
        self._started = False

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        return self._events.start()

    def event(self, chunk: StreamChunk) -> bytes:
        """The events of one chunk (the first's ``store``, a Responses route's, and
        ``created``, a chat route's, in the opening events' response too)."""
        if not self._started:
            self._events.answer.take_head(chunk.metadata)
        return self._start() + self._events.chunk(chunk)

    def end(self) -> bytes:
        """The closing events."""
        return self._start() + self._events.end()

    def failure(self, exc: LLMGuardError) -> bytes:
        """An ``error`` event."""
        body = _wire.openai_error(exc)["error"]
        return self._start() + self._events.failure(body["message"], body["code"])
