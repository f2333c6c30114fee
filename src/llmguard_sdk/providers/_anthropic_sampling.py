"""The sampling parameters a Claude model refuses, learnt from its answers.

Newer Claude models (Opus 4.7 and later) answer 400 "`temperature` is deprecated for this
model." (so too ``top_p``, ``top_k``), and some 4.x models "`temperature` and `top_p` cannot
both be specified for this model." A gateway's caller asked for a sampling parameter, not
for the call to fail: :class:`RefusedSampling` remembers, per model, each parameter Claude
named so (``top_p`` for the pair), so that the attempt is sent again without it and later
calls to that model leave it out, with one warning. Only a parameter Claude named, in those
words, for the model as such, is ever left out; a refusal that depends on the request
("... when thinking is enabled") is not one of them.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import AsyncGenerator, Generator, Mapping
from typing import Any

from ..errors import BadRequestError, ProviderError
from ..models import ChatRequest, ChatResponse, StreamChunk
from .base import StreamCall
from .openai_compat import OpenAICompatibleProvider

logger = logging.getLogger("llmguard_sdk")

SAMPLING = ("temperature", "top_p", "top_k")
"""The sampling parameters a refusal may name."""
_NAME = r"`?(temperature|top_p|top_k)`?"
_DEPRECATED = re.compile(
    _NAME + r" is (?:deprecated|not supported|unsupported) (?:for|by|with) this model", re.I
)
_EITHER = re.compile(r"`?temperature`? and `?top_p`? cannot both be specified for this model", re.I)


def refused_parameter(error: BaseException) -> str | None:
    """The sampling parameter a 400 ``error`` says the model refuses as such, else ``None``."""
    if not isinstance(error, BadRequestError) or error.status_code != 400:
        return None
    message = str(error.args[0]) if error.args else ""
    found = _DEPRECATED.search(message)
    if found:
        return found.group(1).lower()
    return "top_p" if _EITHER.search(message) else None


class RefusedSampling:
    """Per model, the sampling parameters it refused (the ``limit`` models last refused
    something; an older one forgotten is learnt again from its next refusal)."""

    def __init__(self, route: str, limit: int = 256) -> None:
        self._route = route
        self._limit = limit
        self._lock = threading.Lock()
        self._refused: OrderedDict[str, frozenset[str]] = OrderedDict()

    def left_out(self, model: str) -> frozenset[str]:
        """The parameters ``model`` refused."""
        return self._refused.get(model, frozenset())

    def leave_out(self, model: str, payload: dict[str, Any]) -> None:
        """Take from ``payload`` (in place) the parameters ``model`` refused."""
        for key in self.left_out(model):
            payload.pop(key, None)

    def learn(self, model: str, error: BaseException, asked: Mapping[str, Any]) -> bool:
        """Whether ``error`` is ``model`` refusing a sampling parameter ``asked`` (the
        payload the request makes, before any was left out) holds: then it is remembered
        (a warning the first time), and the attempt may be sent again without it."""
        name = refused_parameter(error)
        if name is None or name not in asked:
            return False
        with self._lock:
            known = self._refused.get(model, frozenset())
            self._refused[model] = known | {name}
            self._refused.move_to_end(model)
            while len(self._refused) > self._limit:
                self._refused.popitem(last=False)
        if name not in known:
            logger.warning(
                "route %s: model %.80r refused %s (%s); it is left out of this and later "
                "requests to that model",
                self._route,
                model,
                name,
                str(error.args[0])[:120] if error.args else "",
            )
        return True


class SamplingRetries(OpenAICompatibleProvider):
    """A provider whose attempts are sent again when the model refuses a sampling parameter
    (each parameter once: ``len(SAMPLING)`` times at most; a stream's refusal comes before
    any chunk). A subclass writes ``_asked``, the payload before anything is left out, and
    ``_payload``, the one sent: less what its :class:`RefusedSampling` learnt."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused = RefusedSampling(self.name)

    def _asked(self, request: ChatRequest, model: str, *, stream: bool) -> dict[str, Any]:
        """The payload ``request`` makes, before the parameters ``model`` refused are left
        out."""
        raise NotImplementedError

    def _again(self, error: ProviderError, request: ChatRequest, model: str) -> bool:
        """Whether to send the attempt that failed with ``error`` again: ``model`` refused a
        sampling parameter the request asked for, left out from now on."""
        asked = self._asked(request, model, stream=False)
        return self._refused.learn(model, error, asked)

    def complete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Send one call and parse its answer (sent again without a sampling parameter the
        model refuses)."""
        for _ in SAMPLING:
            try:
                return super().complete(request, model=model, deadline=deadline)
            except ProviderError as exc:
                if not self._again(exc, request, model):
                    raise
        return super().complete(request, model=model, deadline=deadline)

    async def acomplete(self, request: ChatRequest, *, model: str, deadline: float) -> ChatResponse:
        """Async twin of :meth:`complete`."""
        for _ in SAMPLING:
            try:
                return await super().acomplete(request, model=model, deadline=deadline)
            except ProviderError as exc:
                if not self._again(exc, request, model):
                    raise
        return await super().acomplete(request, model=model, deadline=deadline)

    def _stream(self, call: StreamCall) -> Generator[StreamChunk, None, None]:
        for _ in SAMPLING:  # (a refusal comes before any chunk)
            with contextlib.closing(super()._stream(call)) as chunks:
                try:
                    first = next(chunks, None)
                except ProviderError as exc:
                    if not self._again(exc, call.request, call.model):
                        raise
                    continue
                if first is not None:
                    yield first
                    yield from chunks
                return
        yield from super()._stream(call)

    async def _astream(self, call: StreamCall) -> AsyncGenerator[StreamChunk, None]:
        for _ in SAMPLING:
            async with contextlib.aclosing(super()._astream(call)) as chunks:
                try:
                    first = await anext(chunks, None)
                except ProviderError as exc:
                    if not self._again(exc, call.request, call.model):
                        raise
                    continue
                if first is not None:
                    yield first
                    async for chunk in chunks:
                        yield chunk
                return
        async with contextlib.aclosing(super()._astream(call)) as chunks:
            async for chunk in chunks:
                yield chunk
