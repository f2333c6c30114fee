"""What a chat-completions choice carries besides its finish: a message's (or a stream
chunk's delta's) text, tool calls, reasoning, refusal and logprobs, read from the JSON an
OpenAI-compatible server sent. Pure functions, shared by the plain answer and the stream
(:mod:`~llmguard_sdk.providers.wire`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..models import ChatResponse

__all__ = [
    "COMPLETION_FIELDS",
    "MESSAGE_FIELDS",
    "READ_ANSWER",
    "REASONING_FIELDS",
    "StreamHead",
    "answer_audio",
    "answer_fields",
    "choice_metadata",
    "content_text",
    "created_of",
    "kept_fields",
    "message_content",
    "message_fields",
    "other_fields",
    "reasoning",
    "tool_calls_of",
]

MESSAGE_FIELDS = "message_fields"
"""The metadata key of a message's (a delta's) other fields, as the provider sent them; an
answer's ``content`` too where it sent no text (``null`` or ``""``: its text is ``""`` for
both, see :func:`message_content`)."""

REASONING_FIELDS = "reasoning_fields"
"""The metadata key of the names a message (a delta) gave the reasoning kept as
``metadata["reasoning"]`` (``reasoning_content``, ``reasoning``), each mapped to ``True``:
its text is kept once, not again under :data:`MESSAGE_FIELDS`."""

COMPLETION_FIELDS = "completion_fields"
"""The metadata key of an answer's (a chunk's) other top-level fields, as sent."""

_READ_MESSAGE = frozenset({"role", "content", "tool_calls", "refusal"})
_REASONING_NAMES = ("reasoning_content", "reasoning")  # (see reasoning)
READ_ANSWER = frozenset({"id", "object", "model", "choices", "usage", "error"})
"""An answer's (a chunk's) top-level fields the Guard reads itself."""


def other_fields(sent: Mapping[str, Any], read: frozenset[str]) -> dict[str, Any]:
    """The fields of ``sent`` the Guard does not read itself (not in ``read``), as sent,
    those that are ``null`` left out."""
    return {k: v for k, v in sent.items() if k not in read and v is not None}


def answer_fields(sent: Mapping[str, Any]) -> dict[str, Any]:
    """An answer's (a chunk's) top-level fields the Guard does not read itself
    (:func:`other_fields`), less a placeholder ``created`` (Azure's first stream event, which
    carries ``prompt_filter_results``, says ``created`` 0: the real one comes later)."""
    fields = other_fields(sent, READ_ANSWER)
    if "created" in fields and not created_of(fields, 0):
        del fields["created"]
    return fields


def reasoning(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message's (or a delta's) reasoning, where an OpenAI-compatible server sends it
    beside the content (``reasoning_content``: DeepSeek, vLLM, llama.cpp; ``reasoning``:
    OpenRouter, Ollama) or in it (Mistral's ``thinking`` chunks, see :func:`content_text`),
    as ``{"reasoning": text}``: never the content's text."""
    keys = [message[k] for k in _REASONING_NAMES if _is_text(message.get(k))]
    pieces = keys[:1]  # (a server that sends both sends the same text twice)
    content = message.get("content")
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and part.get("type") == "thinking":
            inner = part.get("thinking")
            chunks = inner if isinstance(inner, list) else [{"text": inner}]
            pieces += [c["text"] for c in chunks if isinstance(c, dict) and _is_text(c.get("text"))]
    text = "".join(pieces)
    return {"reasoning": text} if text else {}


def content_text(content: object) -> str | None:
    """A message's (or a delta's) content as text: a string as it is, a list of typed
    chunks (Mistral's reasoning models: ``text`` chunks, and ``thinking`` chunks, which are
    reasoning) as its text chunks' text joined; ``None`` for anything else."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        return None
    return "".join(
        part["text"]
        for part in content
        if isinstance(part, dict) and part.get("type") == "text" and _is_text(part.get("text"))
    )


def _is_text(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def choice_metadata(choice: Mapping[str, Any], message: Mapping[str, Any]) -> dict[str, Any]:
    """What a choice adds to the answer besides its content, from the choice and its
    ``message`` (a stream chunk's: its ``delta``): OpenAI's refusal (beside the content, or
    in its place), the logprobs (asked for with ``logprobs=True``), each as the provider
    sent it, and the model's reasoning (see :func:`reasoning`); a stream's assembly joins
    its chunks' pieces (see :class:`~llmguard_sdk.models.StreamChunk`). The message's
    other fields (``audio``, ``annotations`` ...), as sent, in ``message_fields``, so an
    answer in OpenAI's shape gives them back (:func:`message_fields`); a field whose text is
    the reasoning kept (``reasoning_content`` ...) only by its name, in
    :data:`REASONING_FIELDS` (it was kept three times over where a server sent both)."""
    metadata: dict[str, Any] = reasoning(message)
    fields = other_fields(message, _READ_MESSAGE)
    said = metadata.get("reasoning")
    names = {k: True for k in _REASONING_NAMES if said and fields.get(k) == said}
    if names:
        metadata[REASONING_FIELDS] = names
        fields = {k: v for k, v in fields.items() if k not in names}
    if fields:
        metadata[MESSAGE_FIELDS] = fields
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        metadata["refusal"] = refusal
    if isinstance(choice.get("logprobs"), dict):
        metadata["logprobs"] = choice["logprobs"]
    return metadata


def tool_calls_of(raw: object, problem: Any) -> list[dict[str, Any]] | None:
    """A message's (or a delta's) ``tool_calls`` as sent (``None`` for none or an empty
    list); anything but a list of objects raises ``problem(message)``, its malformed-answer
    error."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(call, dict) for call in raw):
        raise problem("tool_calls is not a list of objects")
    return raw or None


def kept_fields(metadata: Mapping[str, Any], key: str) -> dict[str, Any]:
    """The provider's fields an answer's (a chunk's) ``metadata`` keeps under ``key``
    (:data:`MESSAGE_FIELDS`, :data:`COMPLETION_FIELDS`); none where there are none."""
    fields = metadata.get(key)
    return {str(k): v for k, v in fields.items()} if isinstance(fields, Mapping) else {}


def message_fields(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A message's (a delta's) other fields as the route sent them: those kept under
    :data:`MESSAGE_FIELDS`, and its reasoning under each name it gave it
    (:data:`REASONING_FIELDS`)."""
    fields = kept_fields(metadata, MESSAGE_FIELDS)
    said = metadata.get("reasoning")
    if isinstance(said, str) and said:
        for name in kept_fields(metadata, REASONING_FIELDS):  # (over a first delta's "")
            fields[name] = said
    return fields


def message_content(response: ChatResponse) -> str | None:
    """``message.content`` of ``response`` in OpenAI's shape (a drop-in client's): its text;
    where it has none, the content as its route sent it (``None`` for ``null``, ``""``), kept
    under :data:`MESSAGE_FIELDS`, else (a route whose API has no such content: Claude's, the
    Responses API's) ``None`` beside tool calls or a refusal, as OpenAI gives those."""
    if response.text:
        return response.text
    fields = response.metadata.get(MESSAGE_FIELDS)
    if isinstance(fields, Mapping) and "content" in fields:
        return None if fields["content"] is None else ""
    refused = response.metadata.get("refusal")
    return None if response.tool_calls or (isinstance(refused, str) and refused) else ""


def answer_audio(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """An answer's audio (OpenAI's ``message.audio``: its ``id``, ``data``, ``expires_at``,
    ``transcript``), kept under :data:`MESSAGE_FIELDS`, read in place (most answers have
    none: no copy of their fields); ``None`` for an answer without one (or an empty one)."""
    fields = metadata.get(MESSAGE_FIELDS)
    audio = fields.get("audio") if isinstance(fields, Mapping) else None
    if isinstance(audio, Mapping) and (audio.get("id") or audio.get("data")):
        return audio
    return None


def created_of(fields: Mapping[str, Any], default: int) -> int:
    """The answer's ``created`` as the provider gave it in ``fields``, else ``default`` (a
    placeholder's, 0, too: see :func:`answer_fields`)."""
    created = fields.get("created")
    if isinstance(created, int) and not isinstance(created, bool) and created > 0:
        return created
    return default


class StreamHead:
    """The ``id`` and ``created`` a drop-in client gives each chunk of a stream: the route's
    first real ones (Azure's first event says ``id`` "" and ``created`` 0: the chunks up to
    the first real one have the Guard's own id, ``new_id()``'s, and clock)."""

    def __init__(self, new_id: Callable[[], str]) -> None:
        self._new_id = new_id
        self._id: str | None = None
        self._own: str | None = None
        self._created: int | None = None
        self._clock = int(time.time())

    def of(self, chunk_id: str | None, fields: Mapping[str, Any]) -> tuple[str, int]:
        """A chunk's ``id`` and ``created``, ``chunk_id`` and ``fields`` (its
        :data:`COMPLETION_FIELDS`) as the route sent them."""
        self._id = self._id or chunk_id or None
        self._created = self._created or created_of(fields, 0) or None
        if self._id is None and self._own is None:
            self._own = self._new_id()
        return self._id or self._own or "", self._created or self._clock
