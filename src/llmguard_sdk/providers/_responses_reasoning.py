"""Reasoning items through the Guard's Responses API: the Guard's own and a route's own.

The Guard makes a ``reasoning`` item of a route's reasoning text (a chat route's
``reasoning_content``, see :mod:`._responses_wire`): its id is ``rs_`` and the response's id,
which always starts ``resp`` (:func:`guard_reasoning_id`), an id no route knows, so such an
item sent back is left out (:func:`made_by_the_guard`). A Responses route's own reasoning
items (OpenAI's: ``rs_`` and hex digits, with their summary and ``encrypted_content``) come
in the answer's ``metadata["reasoning_items"]`` and are given out as the route sent them, and
sent back to Responses routes (on an assistant message's ``thinking``).

In a stream, a Responses route's item comes again each time it grows (opened, each piece of
its summary or text, done: the same ``id``, which takes the earlier one's place, see
:func:`~llmguard_sdk._core.assembly.merge_metadata`); :class:`ItemEvents` writes the events
that bring the caller from one to the next.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

_GUARD_PREFIX = "rs_resp"
ENCRYPTED = "reasoning.encrypted_content"
"""The ``include`` value that asks for reasoning items' ``encrypted_content``."""
# OpenAI's reasoning models (o1, o3, o4-mini, gpt-5, gpt-5.1 ...), not gpt-5's chat models,
# which do not reason (and refuse reasoning's parameters)
_REASONING_MODELS = re.compile(r"(?:o\d|gpt-5)(?![a-z])(?!.*-chat)")
_MOST_PARTS = 64  # a part index past it (a hostile stream's) opens no parts up to it
# an item's parts: (its field, its parts' type, the part events' prefix, the text events'
# prefix, the index's name)
_PARTS = (
    (
        "summary",
        "summary_text",
        "response.reasoning_summary_part",
        "response.reasoning_summary_text",
        "summary_index",
    ),
    (
        "content",
        "reasoning_text",
        "response.content_part",
        "response.reasoning_text",
        "content_index",
    ),
)


def guard_reasoning_id(response_id: str) -> str:
    """The id of the reasoning item the Guard makes for the response ``response_id``."""
    return f"rs_{response_id}"


def made_by_the_guard(item_id: object) -> bool:
    """Whether ``item_id`` is one :func:`guard_reasoning_id` made (``rs_resp...``; no
    provider's id starts so: OpenAI's are ``rs_`` and hex digits)."""
    return isinstance(item_id, str) and item_id.startswith(_GUARD_PREFIX)


def included(payload: dict[str, Any], value: str) -> None:
    """Add ``value`` to the ``include`` list of ``payload`` (a Responses request's body), once."""
    include = payload.get("include")
    include = list(include) if isinstance(include, list) else []
    if value not in include:
        include.append(value)
    payload["include"] = include


def keep_reasoning(payload: dict[str, Any]) -> None:
    """With ``store: false``, ask for the answer's reasoning items sealed (``include``'s
    ``reasoning.encrypted_content``) when the call reasons: it asks for reasoning (``reasoning``),
    sends reasoning items back, or names one of OpenAI's reasoning models. OpenAI keeps no item
    of a response it does not store, so the next turn can send a reasoning model's thoughts
    back only with their ``encrypted_content``; a model that does not reason would refuse the
    value, and a stored response's items are found by their ids."""
    if payload.get("store") is not False:
        return
    model = payload.get("model")
    named = isinstance(model, str) and bool(_REASONING_MODELS.match(model.rpartition("/")[2]))
    items = payload.get("input")
    sent_back = any(
        isinstance(item, Mapping) and item.get("type") == "reasoning"
        for item in (items if isinstance(items, list) else ())
    )
    if named or sent_back or payload.get("reasoning"):
        included(payload, ENCRYPTED)


def unfinished(item: dict[str, Any]) -> dict[str, Any]:
    """A route's reasoning item as an answer that ends gives it out: one its route never
    finished (``in_progress``: the stream went on on another route) ``incomplete``, as
    OpenAI closes an item a response left unfinished; it has no ``encrypted_content``, so
    a route that stores nothing is not sent it back."""
    return {**item, "status": "incomplete"} if item.get("status") == "in_progress" else item


def route_items(metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The route's own reasoning items in ``metadata["reasoning_items"]``: objects of type
    ``reasoning`` with a string id."""
    items = metadata.get("reasoning_items")
    return [
        item
        for item in (items if isinstance(items, list) else ())
        if isinstance(item, dict)
        and item.get("type") == "reasoning"
        and isinstance(item.get("id"), str)
    ]


def opening(item: Mapping[str, Any]) -> dict[str, Any]:
    """``item`` as its ``response.output_item.added`` shows it: in progress, its parts
    empty, without its ``encrypted_content`` (complete only when the item is)."""
    opened = {k: v for k, v in item.items() if k != "encrypted_content"}
    opened.update(summary=[], status="in_progress")
    if "content" in item:
        opened["content"] = []
    return opened


def _texts(item: Mapping[str, Any], field: str) -> list[str]:
    parts = item.get(field)
    parts = parts if isinstance(parts, list) else []
    return [str(p.get("text") or "") if isinstance(p, dict) else "" for p in parts]


class ItemEvents:
    """The events of one of a route's reasoning items as it grows: each new part's
    ``added`` event, each part's new text as a delta, and at its end each part's ``done``
    events. ``event(kind, **data)`` writes one event; ``where`` is the item's ``item_id``
    and ``output_index``."""

    def __init__(self, event: Callable[..., bytes], where: dict[str, Any]) -> None:
        self._event = event
        self._where = where
        self._sent: dict[tuple[str, int], str] = {}  # (field, index) -> the text sent

    def grow(self, item: Mapping[str, Any]) -> bytes:
        """The events from what was sent to ``item``."""
        out = b""
        for field, kind, parts, texts, index_name in _PARTS:
            for index, text in enumerate(_texts(item, field)):
                at = {index_name: index, **self._where}
                sent = self._sent.get((field, index))
                if sent is None:
                    part = {"type": kind, "text": ""}
                    out += self._event(f"{parts}.added", part=part, **at)
                    sent = self._sent[(field, index)] = ""
                if len(text) > len(sent) and text.startswith(sent):
                    out += self._event(f"{texts}.delta", delta=text[len(sent) :], **at)
                    self._sent[(field, index)] = text
        return out

    def end(self, item: Mapping[str, Any]) -> bytes:
        """The closing events of each part (with ``item``'s text, the route's last word)."""
        out = self.grow(item)
        for field, kind, parts, texts, index_name in _PARTS:
            for index, text in enumerate(_texts(item, field)):
                at = {index_name: index, **self._where}
                out += self._event(f"{texts}.done", text=text, **at)
                out += self._event(f"{parts}.done", part={"type": kind, "text": text}, **at)
        return out


class StreamedItems:
    """A Responses route's reasoning items as its stream builds them (for its stream state):
    each as its ``response.output_item.added`` opened it (without ``encrypted_content``,
    ``in_progress``), with the text of each summary or text delta since, then as its
    ``response.output_item.done`` finished it."""

    def __init__(self) -> None:
        self._items: dict[str, dict[str, Any]] = {}

    def item(self, item: object, *, done: bool) -> dict[str, Any] | None:
        """A reasoning item the stream opened (or, when ``done``, finished); None for an
        item of another type or without an id."""
        if not route_items({"reasoning_items": [item]}):
            return None
        assert isinstance(item, dict)  # (as route_items found)
        if not done:  # (in progress until the route finishes it)
            item = {k: v for k, v in item.items() if k != "encrypted_content"}
            item["status"] = "in_progress"
        self._items[item["id"]] = item
        return item

    def grown(self, event: Mapping[str, Any]) -> dict[str, Any] | None:
        """The item a ``response.reasoning_summary_text.delta`` or
        ``response.reasoning_text.delta`` event adds to (a new part where it starts one),
        as it now stands; None where the stream opened no such item."""
        item = self._items.get(str(event.get("item_id")))
        summary = event.get("type") == "response.reasoning_summary_text.delta"
        field, kind, _parts, _texts, index_name = _PARTS[0 if summary else 1]
        index, delta = event.get(index_name), event.get("delta")
        if item is None or not isinstance(index, int) or not 0 <= index < _MOST_PARTS:
            return None
        given = item.get(field)
        parts = [dict(p) for p in given if isinstance(p, dict)] if isinstance(given, list) else []
        while len(parts) <= index:
            parts.append({"type": kind, "text": ""})
        parts[index]["text"] = str(parts[index].get("text") or "") + str(delta or "")
        item = self._items[item["id"]] = {**item, field: parts}
        return item
