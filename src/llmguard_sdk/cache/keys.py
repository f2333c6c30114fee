"""Cache keys: the canonical form of a request, its context, and the partition it lives in.

Three hashes decide what a cached answer may be served for:

* the **partition** (tenant, user when the flow is personalised, permissions tag, namespace,
  template version): entries of different partitions never meet, not even as candidates;
* the **exact key**: every field that shapes the answer (model, every message including the
  system prompt, tool schemas as canonical JSON, sampling parameters, response format); a
  message's content of one text part alone is keyed as its text (``"hi"`` and
  ``[{"type": "text", "text": "hi"}]`` are one request);
* the **context hash**: the exact key without the last user turn's text. A semantic hit needs
  the same context, so a follow-up such as "how old is he?" only matches inside the same
  conversation.

A call's keys are computed once when its lookup and its store are given them
(``keys=``, from :meth:`~llmguard_sdk.cache.ResponseCache.call_keys`), as the Guard does;
this module keeps no state between calls.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .._json import canonical_json
from ..errors import RequestValidationError
from ..models import ChatRequest

__all__ = ["CacheKeys", "canonical_json", "request_keys"]

# Fields of a request that never change the answer (or are sent only to the SDK).
_NOT_ANSWER_SHAPING = frozenset({"metadata", "extra_headers", "extra_query"})


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@lru_cache(maxsize=1024)
def _partition_hash(partition: tuple[str, ...]) -> str:
    """The hash of a partition (the same few recur call after call: computed once each)."""
    return _digest(canonical_json(list(partition)))


@dataclass(frozen=True)
class CacheKeys:
    """The hashes of one request: see the module docs."""

    partition: str
    exact: str
    context: str
    query: str
    """The text the semantic cache embeds: the last user turn."""


def _joined_tags(tags: Sequence[str]) -> str:
    """A call's permission tags as its partition holds them: sorted, without repeats, commas
    and backslashes escaped (``["a,b"]`` is not ``["a", "b"]``). One string is refused, not
    split into its characters (``"ab"`` would share the entries of ``"ba"``), and so is
    anything else that is no collection (``None``, a number)."""
    listed = type(tags) in (list, tuple) or (
        isinstance(tags, Iterable) and not isinstance(tags, (str, bytes))
    )
    found = tuple(tags) if listed else None
    if found is None or not all(isinstance(tag, str) for tag in found):
        raise RequestValidationError(f"cache tags must be a list of strings, got {tags!r}")
    return ",".join(sorted({tag.replace("\\", "\\\\").replace(",", "\\,") for tag in found}))


def _last_user_index(request: ChatRequest) -> int | None:
    for index in range(len(request.messages) - 1, -1, -1):
        if request.messages[index].role == "user":
            return index
    return None


def _without_text(message: dict[str, Any]) -> dict[str, Any]:
    """The last user turn as its context keeps it: its text (the query) left out, its other
    parts (images, audio, files) and fields kept, so that a semantic hit needs them equal."""
    content = message.get("content")
    if isinstance(content, list):
        parts = [
            {"type": "text", "text": "<query>"} if part.get("type") == "text" else part
            for part in content
        ]
        return {**message, "content": parts}
    return {**message, "content": "<query>"}


def _lone_text(content: object) -> str | None:
    """The text of a content that is one text part and nothing else, else ``None``."""
    part = content[0] if isinstance(content, list) and len(content) == 1 else None
    if not isinstance(part, dict) or part.keys() != {"type", "text"} or part["type"] != "text":
        return None
    text = part["text"]
    return text if isinstance(text, str) else None


def _one_text_part_as_text(messages: list[dict[str, Any]]) -> None:
    """Each message whose content is one text part and nothing else (``[{"type": "text",
    "text": "hi"}]``) given that text as its content (``"hi"``), in place: the APIs read
    the two alike, and the same request written either way is one entry. A part with any
    other key (``cache_control`` ...), several parts or any other kind are kept as they are."""
    for message in messages:
        text = _lone_text(message.get("content"))
        if text is not None:
            message["content"] = text


def request_keys(request: ChatRequest, partition: tuple[str, ...]) -> CacheKeys:
    """The partition, exact and context hashes of ``request`` (see the module docs)."""
    shaped = request.model_dump(mode="json", exclude=set(_NOT_ANSWER_SHAPING), exclude_none=True)
    _one_text_part_as_text(shaped["messages"])
    partition_hash = _partition_hash(tuple(partition))
    exact = _digest(partition_hash + canonical_json(shaped))
    last = _last_user_index(request)
    query = request.messages[last].text if last is not None else ""
    if last is not None:
        shaped["messages"][last] = _without_text(shaped["messages"][last])
    context = _digest(partition_hash + canonical_json(shaped))
    return CacheKeys(partition=partition_hash, exact=exact, context=context, query=query)
