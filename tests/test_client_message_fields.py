"""The drop-in OpenAI clients give back what the route's message and answer said beyond the
content: a message's ``audio`` (gpt-4o-audio), its ``annotations`` (web search's
``url_citation``), a DeepSeek-style ``reasoning_content`` (plain and streamed, as
``delta.reasoning_content``), and the answer's ``created``, ``system_fingerprint`` and
``service_tier`` and its usage's ``accepted_prediction_tokens`` and
``rejected_prediction_tokens`` (Predicted Outputs), as a direct call to the route gives
them. They were dropped: the Guard kept only the reasoning, refusal and logprobs, and both
clients (openai's over the Guard's transport, the look-alike without openai) answered
``None`` and the Guard's own clock. The
Guard keeps them in ``metadata["message_fields"]`` / ``metadata["completion_fields"]``;
its own metadata (``call_id`` ...) never reaches the message.

The look-alike's stream ids, where the route sends none, are unique per stream (they were
one constant, ``chatcmpl-llmguard``, for every stream).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.client import GuardedClient

from .conftest import USER, require_module
from .rawserver import RawServer, sse_head

_AUDIO = {"id": "audio_1", "data": "UklGRg==", "expires_at": 1800000000, "transcript": "Hi"}
_CITATION = {
    "type": "url_citation",
    "url_citation": {"url": "https://x.test", "title": "t", "start_index": 0, "end_index": 2},
}
_HEAD = {"created": 1700000000, "system_fingerprint": "fp_abc", "service_tier": "default"}
_PLAIN = {
    "id": "chatcmpl-R1P",
    "object": "chat.completion",
    "model": "m",
    **_HEAD,
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {
                "role": "assistant",
                "content": "Answer.",
                "refusal": None,
                "reasoning_content": "Let me think.",
                "annotations": [_CITATION],
                "audio": _AUDIO,
            },
        }
    ],
    "usage": {
        "prompt_tokens": 5,
        "completion_tokens": 6,
        "total_tokens": 11,
        "completion_tokens_details": {
            "accepted_prediction_tokens": 2,
            "rejected_prediction_tokens": 1,
        },
    },
}
_DELTAS: list[dict[str, Any]] = [
    {"role": "assistant", "content": None, "reasoning_content": ""},
    {"content": None, "reasoning_content": "Let "},
    {"content": None, "reasoning_content": "me think."},
    {"content": "Answer."},
]


def _events(ids: bool) -> list[dict[str, Any]]:
    head = {"object": "chat.completion.chunk", "model": "m", **_HEAD}
    if ids:
        head["id"] = "chatcmpl-R1"
    out = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in _DELTAS]
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return out


_FILTERS = [{"prompt_index": 0, "content_filter_results": {"hate": {"filtered": False}}}]
# Azure OpenAI's first stream event: no choices, placeholders for the answer's fields
_AZURE_FIRST = {"choices": [], "created": 0, "id": "", "model": "", "object": ""}


class _Route(BaseHTTPRequestHandler):
    """A chat-completions route answering ``_PLAIN``, or ``_events`` as a stream (without
    ids where ``server.ids`` is false)."""

    server: Any
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if not body.get("stream"):
            plain = json.loads(json.dumps(_PLAIN))
            if getattr(self.server, "both", False):
                message = plain["choices"][0]["message"]
                message["reasoning"] = message["reasoning_content"]
            data = json.dumps(plain).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        sent = _events(self.server.ids)
        if getattr(self.server, "both", False):  # vLLM's: the reasoning under two names
            for delta in (e["choices"][0]["delta"] for e in sent):
                if "reasoning_content" in delta:
                    delta["reasoning"] = delta["reasoning_content"]
        if getattr(self.server, "azure", False):  # (and a role-only opening delta)
            sent[0]["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            sent.insert(0, {**_AZURE_FIRST, "prompt_filter_results": _FILTERS})
        events = b"".join(b"data: %s\n\n" % json.dumps(e).encode() for e in sent)
        events += b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(events)))
        self.end_headers()
        self.wfile.write(events)


@pytest.fixture
def route() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Route)
    server.ids = True  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def guard(route: ThreadingHTTPServer) -> Iterator[Guard]:
    url = f"http://127.0.0.1:{route.server_port}/v1"
    with Guard(OpenAICompatibleProvider(url, model="m", name="ds"), environ={}) as guard:
        yield guard


def _clients(guard: Guard) -> list[Any]:
    require_module("openai", "openai is a dev dependency")
    return [guard.client(), GuardedClient(guard)]  # openai's own, and the look-alike


def _dump(model: Any) -> dict[str, Any]:
    return dict(model.model_dump())


def test_the_guard_keeps_the_messages_and_answers_other_fields(guard: Guard) -> None:
    metadata = guard.chat(USER).metadata
    assert metadata["message_fields"] == {"annotations": [_CITATION], "audio": _AUDIO}
    assert metadata["reasoning"] == "Let me think."  # kept once, and the name it came under
    assert metadata["reasoning_fields"] == {"reasoning_content": True}
    assert metadata["completion_fields"] == _HEAD
    usage = guard.chat(USER).usage
    assert usage is not None
    assert (usage.accepted_prediction_tokens, usage.rejected_prediction_tokens) == (2, 1)


def test_an_answer_gives_back_audio_annotations_and_reasoning_content(guard: Guard) -> None:
    for client in _clients(guard):
        answer = client.chat.completions.create(model="m", messages=USER)
        message = _dump(answer.choices[0].message)
        assert message["content"] == "Answer."
        assert message["reasoning_content"] == "Let me think."
        assert message["annotations"] == [_CITATION]
        assert message["audio"] == _AUDIO
        assert "call_id" not in message  # the Guard's own metadata stays its own
        dumped = _dump(answer)
        assert {k: dumped[k] for k in _HEAD} == _HEAD  # the route's clock, not the Guard's
        details = dumped["usage"]["completion_tokens_details"]
        assert details["accepted_prediction_tokens"] == 2
        assert details["rejected_prediction_tokens"] == 1


def test_a_stream_gives_back_reasoning_content_and_the_routes_fields(guard: Guard) -> None:
    for client in _clients(guard):
        chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True))
        deltas = [_dump(c.choices[0].delta) for c in chunks if c.choices]
        assert "".join(d.get("reasoning_content") or "" for d in deltas) == "Let me think."
        assert "".join(d.get("content") or "" for d in deltas) == "Answer."
        for chunk in chunks:
            assert {k: _dump(chunk)[k] for k in _HEAD} == _HEAD


def test_streams_without_route_ids_each_get_an_id_of_their_own(
    guard: Guard, route: ThreadingHTTPServer
) -> None:
    route.ids = False  # type: ignore[attr-defined]
    for client in _clients(guard):
        ids = []
        for _ in range(3):
            chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True))
            assert len({c.id for c in chunks}) == 1  # one id per stream
            ids.append(chunks[0].id)
        assert len(set(ids)) == 3
        assert all(i.startswith("chatcmpl-") for i in ids)


def test_a_route_that_answers_after_a_broken_one_gives_its_own_answer_fields(
    route: ThreadingHTTPServer,
) -> None:
    """A stream broken after reasoning alone, answered by the next route: the answer's
    ``system_fingerprint`` is the answering route's (the two were joined as text)."""
    head = {"id": "c", "object": "chat.completion.chunk", "model": "m", **_HEAD}
    head["system_fingerprint"] = "fp_cut"
    broken = b"".join(
        b"data: %s\n\n" % json.dumps({**head, "choices": [{"index": 0, "delta": d}]}).encode()
        for d in _DELTAS[:2]
    )
    url = f"http://127.0.0.1:{route.server_port}/v1"
    with RawServer(sse_head(), (broken,)) as raw:
        routes = [
            OpenAICompatibleProvider(raw.base_url, model="m", name="first"),
            OpenAICompatibleProvider(url, model="m", name="next"),
        ]
        with (
            Guard(routes, continue_interrupted_streams=True, environ={}, retry=None) as guard,
            guard.chat(USER, stream=True) as chat,
        ):
            assert "".join(c.text for c in chat) == "Answer."
    assert chat.response.route == "next"
    assert chat.response.metadata["completion_fields"] == _HEAD


def test_an_azure_stream_gives_the_routes_created_and_id_after_its_placeholders(
    guard: Guard, route: ThreadingHTTPServer
) -> None:
    """Azure's first stream event carries ``prompt_filter_results`` with ``created`` 0 and
    ``id`` "": the answer's are the first real ones, the later events'. Every chunk said
    ``created`` 0 (the first event's) and had an id of the Guard's."""
    route.azure = True  # type: ignore[attr-defined]
    with guard.chat(USER, stream=True) as stream:
        assert "".join(chunk.text for chunk in stream) == "Answer."
    response = stream.response
    assert response.id == "chatcmpl-R1"
    fields = response.metadata["completion_fields"]
    assert fields == {**_HEAD, "prompt_filter_results": _FILTERS}
    for client in _clients(guard):
        chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True))
        assert _dump(chunks[0])["prompt_filter_results"] == _FILTERS
        routes = [c for c in chunks if any(_dump(x)["delta"].get("content") for x in c.choices)]
        routes += [c for c in chunks if any(x.finish_reason for x in c.choices)]
        assert routes
        for chunk in routes:  # the route's own events: its id and clock
            assert (chunk.id, chunk.created) == ("chatcmpl-R1", _HEAD["created"])
        assert all(chunk.created for chunk in chunks)  # never the placeholder's 0


def test_reasoning_sent_under_two_names_is_kept_once_and_given_back_under_both(
    guard: Guard, route: ThreadingHTTPServer
) -> None:
    """A vLLM-style route sends its reasoning as both ``reasoning_content`` and
    ``reasoning``: the Guard keeps its text once, as ``metadata["reasoning"]``, and the names
    it came under; the drop-in clients give it back under both. It was kept three times (twice
    more under ``message_fields``: 92,000 characters of reasoning took 276,000 in the answer
    and in its cache entry)."""
    route.both = True  # type: ignore[attr-defined]
    with guard.chat(USER, stream=True) as stream:
        list(stream)
    for metadata in (stream.response.metadata, guard.chat(USER).metadata):
        assert metadata["reasoning"] == "Let me think."
        assert metadata["reasoning_fields"] == {"reasoning_content": True, "reasoning": True}
        others = {k: v for k, v in metadata.items() if k != "reasoning"}
        assert "think" not in json.dumps(others)
    for client in _clients(guard):
        chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True))
        deltas = [_dump(c.choices[0].delta) for c in chunks if c.choices]
        for name in ("reasoning_content", "reasoning"):
            assert "".join(d.get(name) or "" for d in deltas) == "Let me think."
        answer = client.chat.completions.create(model="m", messages=USER)
        message = _dump(answer.choices[0].message)
        assert message["reasoning_content"] == message["reasoning"] == "Let me think."
