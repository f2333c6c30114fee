"""OpenAI's Responses API on the wire: ``POST /v1/responses`` (filled in below)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import LLMGuardError, RequestValidationError
from ..models import ChatResponse
from . import _wire
from ._chat import ChunkWriter
from ._wire import Incoming


class ResponsesWire:
    """Responses: parse a request, answer a response object or its events."""

    def arguments(self, body: dict[str, Any], incoming: Incoming) -> dict[str, Any]:
        raise RequestValidationError("the Responses API is not served yet")

    def answer(self, response: ChatResponse) -> dict[str, Any]:
        return {}

    def writer(self, arguments: Mapping[str, Any]) -> ChunkWriter:
        return ChunkWriter("")

    def error(self, exc: LLMGuardError) -> dict[str, Any]:
        return _wire.openai_error(exc)
