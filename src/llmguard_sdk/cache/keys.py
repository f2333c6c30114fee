"""Cache keys: the canonical form of a request, its context, and the partition it lives in.

Three hashes decide what a cached answer may be served for:

* the **partition** (tenant, user when the flow is personalised, permissions tag, namespace,
  template version): entries of different partitions never meet, not even as candidates;
* the **exact key**: every field that shapes the answer (model, every message including the
  system prompt, tool schemas as canonical JSON, sampling parameters, response format);
* the **context hash**: the exact key without the last user turn's text. A semantic hit needs
  the same context, so a follow-up such as "how old is he?" only matches inside the same
  conversation.

A call's keys are computed once: the last keys computed in a context (a thread, or an async
task) are reused when the same request comes back with the same partition, so the store
after a missed lookup does not hash the request again. The same request is the same object,
or a copy whose fields hold the same objects, or equal strings and numbers, and whose
messages are the same ones (a request is frozen: its lists are not changed in place).
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NamedTuple

from .._json import canonical_json
from ..models import ChatRequest, Message

__all__ = ["CacheKeys", "canonical_json", "request_keys"]

# Fields of a request that never change the answer (or are sent only to the SDK).
_NOT_ANSWER_SHAPING = frozenset({"metadata", "extra_headers", "extra_query"})


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class CacheKeys:
    """The hashes of one request: see the module docs."""

    partition: str
    exact: str
    context: str
    query: str
    """The text the semantic cache embeds: the last user turn."""


def _last_user_index(request: ChatRequest) -> int | None:
    for index in range(len(request.messages) - 1, -1, -1):
        if request.messages[index].role == "user":
            return index
    return None


class _Keyed(NamedTuple):
    """The last request keyed in a context, as it was then."""

    request: ChatRequest
    messages: tuple[Message, ...]
    partition: tuple[str, ...]
    keys: CacheKeys


_LAST: ContextVar[_Keyed | None] = ContextVar("llmguard_sdk_cache_keys", default=None)
_SCALARS = (str, int, float, bool, type(None))
_ABSENT = object()


def _same_request(keyed: _Keyed, request: ChatRequest) -> bool:
    """Whether ``request`` is the one ``keyed`` was computed for (see the module docs)."""
    if len(request.messages) != len(keyed.messages) or not all(
        new is old for new, old in zip(request.messages, keyed.messages, strict=True)
    ):
        return False
    before = keyed.request
    if before is request:
        return True
    fields: dict[str, Any] = request.__dict__
    if type(before) is not type(request) or len(before.__dict__) != len(fields):
        return False
    for name, old in before.__dict__.items():
        new = fields.get(name, _ABSENT)
        if new is not old and (
            type(new) is not type(old) or type(old) not in _SCALARS or new != old
        ):
            return False
    return True


def request_keys(request: ChatRequest, partition: tuple[str, ...]) -> CacheKeys:
    """The partition, exact and context hashes of ``request`` (see the module docs; the last
    ones computed in this context when the request and the partition are the same)."""
    keyed = _LAST.get()
    if keyed is not None and keyed.partition == partition and _same_request(keyed, request):
        return keyed.keys
    keys = _computed(request, partition)
    _LAST.set(_Keyed(request, tuple(request.messages), partition, keys))
    return keys


def _computed(request: ChatRequest, partition: tuple[str, ...]) -> CacheKeys:
    shaped = request.model_dump(mode="json", exclude=set(_NOT_ANSWER_SHAPING), exclude_none=True)
    partition_hash = _digest(canonical_json(list(partition)))
    exact = _digest(partition_hash + canonical_json(shaped))
    last = _last_user_index(request)
    query = request.messages[last].text if last is not None else ""
    if last is not None:
        shaped["messages"][last] = {"role": "user", "content": "<query>"}
    context = _digest(partition_hash + canonical_json(shaped))
    return CacheKeys(partition=partition_hash, exact=exact, context=context, query=query)
