"""Whatever a provider sends, and however the SDK is called, errors stay typed and bounded."""

from __future__ import annotations

import asyncio
import json
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmguard_sdk import (
    CallEvent,
    ChatResponse,
    ConfigurationError,
    Guard,
    MalformedResponseError,
    OpenAICompatibleProvider,
    ProviderError,
    ProviderTimeoutError,
    RequestValidationError,
)
from llmguard_sdk._core.assembly import merge_tool_call_deltas
from llmguard_sdk.providers._abort import Abort, abortable
from llmguard_sdk.providers._watchdog import _Watchdog
from llmguard_sdk.providers.wire import StreamState, parse_completion
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER
from .rawserver import RawServer, sse_head

MakeGuard = Callable[..., Guard]
JSON_HEADERS = {"content-type": "application/json"}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
completion_like = st.fixed_dictionaries(
    {},
    optional={
        "id": json_values,
        "model": json_values,
        "usage": json_values,
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "message": st.fixed_dictionaries(
                        {},
                        optional={"content": json_values, "tool_calls": json_values},
                    )
                    | json_values,
                    "finish_reason": json_values,
                },
            )
            | json_values,
            max_size=2,
        )
        | json_values,
    },
)


@settings(max_examples=300)
@given(st.one_of(completion_like, json_values), st.sampled_from([200, 200, 429, 500, 418]))
def test_any_json_answer_becomes_a_response_or_a_provider_error(body: Any, status: int) -> None:
    raw = json.dumps(body).encode()
    try:
        result = parse_completion(status, JSON_HEADERS, raw, route="r")
    except ProviderError:
        return
    assert isinstance(result, ChatResponse)


@settings(max_examples=300)
@given(st.lists(st.one_of(completion_like, json_values), max_size=4), st.binary(max_size=40))
def test_any_stream_events_become_chunks_or_a_provider_error(
    events: list[Any], tail: bytes
) -> None:
    state = StreamState("r", time.monotonic() + 60)
    state.accept(200, {"content-type": "text/event-stream"})
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + tail
    try:
        list(state.feed(raw))
        state.check_ended()
    except ProviderError:
        pass


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        b'{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 1'
        + b"0" * 5000
        + b"}}",
        b'{"choices": [{"message": {"content": null, "tool_calls": ["a"]}}]}',
        b'{"choices": [{"message": {"content": "x", "tool_calls": {"a": 1}}}]}',
    ],
)
@pytest.mark.parametrize("status", [200, 500])
def test_hostile_bodies_are_malformed_or_provider_errors(body: bytes, status: int) -> None:
    with pytest.raises(ProviderError) as info:
        parse_completion(status, JSON_HEADERS, body, route="r")
    if status == 200:
        assert isinstance(info.value, MalformedResponseError)


def test_streamed_tool_calls_are_merged_by_index() -> None:
    calls: dict[int, dict[str, Any]] = {}
    merge_tool_call_deltas(
        calls,
        [
            {
                "index": 0,
                "id": "c1",
                "type": "function",
                "function": {"name": "lookup", "arguments": ""},
            }
        ],
    )
    merge_tool_call_deltas(calls, [{"index": 0, "function": {"arguments": '{"a"'}}])
    merge_tool_call_deltas(
        calls, [{"index": 1, "id": "c2", "function": {"name": "f", "arguments": "{}"}}]
    )
    merge_tool_call_deltas(calls, [{"index": 0, "function": {"arguments": ":1}"}}])
    assert calls[0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"a":1}'},
    }
    assert calls[1]["function"] == {"name": "f", "arguments": "{}"}


def test_a_streamed_tool_call_arrives_whole_through_the_guard() -> None:
    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    parts = (
        event(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": ""},
                    }
                ],
            }
        ),
        event({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]}),
        event({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}),
        event({}, "tool_calls"),
        b"data: [DONE]\n\n",
    )
    with RawServer(sse_head(), parts) as server:
        guard = Guard(OpenAICompatibleProvider(server.base_url, model="m"), environ={})
        with guard.chat(USER, stream=True) as stream:
            list(stream)
        guard.close()
    assert stream.response.tool_calls == [
        {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    ]
    assert stream.response.finish_reason == "tool_calls"


def test_one_guard_serves_several_event_loops(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake)
    for _ in range(3):
        assert asyncio.run(guard.achat(USER)).text == "Echo: hello there"


def test_threads_racing_on_the_first_call_share_one_client(fake: FakeProvider) -> None:
    provider = OpenAICompatibleProvider(fake.base_url, model="m")
    barrier = threading.Barrier(16)
    clients: list[object] = []

    def first_call() -> None:
        barrier.wait()
        clients.append(provider._sync_pool().client)

    threads = [threading.Thread(target=first_call) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(clients) == 16
    assert len({id(c) for c in clients}) == 1
    provider.close()


@pytest.mark.parametrize("status", [402, 404])
def test_no_credit_or_unknown_model_moves_to_the_next_route(
    fake: FakeProvider, fake2: FakeProvider, make_guard: MakeGuard, status: int
) -> None:
    fake.script(Fault(status=status))
    assert make_guard(fake, fake2).chat(USER).route == "backup"


@pytest.mark.parametrize(
    "params",
    [
        {"tools": [{"type": "function", "enum": {1, 2}}]},
        {"extra_body": {"x": object()}},
        {"extra_body": {"x": math.nan}},
        {"timeout": math.inf},
        {"extra_headers": {"x-app": "caf\u00e9"}},
        {"extra_headers": {"x-app": "a\r\nb: c"}},
        {"extra_headers": {"x-app": "a\x00b"}},
        {"extra_headers": {"x app": "1"}},
        {"extra_headers": {"Content-Length": "2"}},
        {"extra_headers": {"transfer-encoding": "chunked"}},
    ],
)
def test_bad_call_arguments_are_request_errors_before_sending(
    fake: FakeProvider, make_guard: MakeGuard, params: dict[str, Any]
) -> None:
    with pytest.raises(RequestValidationError):
        make_guard(fake).chat(USER, **params)
    assert fake.stats.requests == 0


@pytest.mark.parametrize(
    "build",
    [
        lambda url: OpenAICompatibleProvider(url, headers={"x-app": "caf\u00e9"}),
        lambda url: OpenAICompatibleProvider(url, api_key="sk-abc\n"),
        lambda url: OpenAICompatibleProvider(url, api_key=""),
        lambda url: OpenAICompatibleProvider("http://127.0.0.1:99999/v1"),
        lambda url: Guard(timeout=math.inf, environ={}),
        lambda url: Guard(environ={"LLMGUARD_ATTEMPT_TIMEOUT": "inf"}),
    ],
)
def test_bad_configuration_is_a_configuration_error(build: Callable[[str], object]) -> None:
    with pytest.raises(ConfigurationError):
        build("http://127.0.0.1:8000/v1")


def test_a_silent_stream_is_stopped_by_the_deadline() -> None:
    # Headers, one SSE comment, then silence: the watchdog ends it at the deadline.
    with RawServer(sse_head(), (b": ping\n\n",), gap=0.1, hold=True) as server:
        guard = Guard(OpenAICompatibleProvider(server.base_url, model="m"), environ={})
        started = time.monotonic()
        with pytest.raises(ProviderTimeoutError), guard.chat(USER, stream=True, timeout=0.5) as s:
            list(s)
        assert time.monotonic() - started < 10  # bounded (generous for loaded machines)
        guard.close()


def test_a_slow_body_after_fast_headers_is_stopped_by_the_deadline() -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 50\r\n\r\n"
    with RawServer(head, (b"{",), gap=0.1, hold=True) as server:
        guard = Guard(OpenAICompatibleProvider(server.base_url, model="m"), environ={})
        with pytest.raises(ProviderTimeoutError, match="deadline"):
            guard.chat(USER, timeout=0.5)
        with pytest.raises(ProviderTimeoutError, match="deadline"):
            asyncio.run(guard.achat(USER, timeout=0.5))
        guard.close()


def test_the_deadline_watchdog_keeps_no_entry_per_finished_call() -> None:
    """Calls that finish in time leave nothing behind (the heap held one entry per call of
    the last deadline's length); a live watch still shuts its socket down at its deadline."""
    dog = _Watchdog()
    live, peer = socket.socketpair()
    try:
        for _ in range(10_000):  # calls that finished long before their deadline
            dog.cancel(dog.watch(peer, time.monotonic() + 3600))
        assert len(dog._heap) <= 64 + 1
        dog.watch(live, time.monotonic() + 0.2)
        for _ in range(1_000):
            dog.cancel(dog.watch(peer, time.monotonic() + 3600))
        live.settimeout(30)
        assert live.recv(1) == b""  # shut down by the watchdog at its deadline
        assert len(dog._heap) <= 64 + 1
    finally:
        live.close()
        peer.close()


def test_a_watch_without_a_deadline_leaves_the_watchdog_running() -> None:
    """A watch at math.inf (a provider called with no deadline) killed the watchdog's thread
    (OverflowError from its wait) once it was the earliest: no later deadline was enforced."""
    dog = _Watchdog()
    endless, endless_peer = socket.socketpair()
    first, first_peer = socket.socketpair()
    second, second_peer = socket.socketpair()
    try:
        dog.watch(endless, math.inf)
        dog.watch(first, time.monotonic())  # due now
        first.settimeout(30)
        assert first.recv(1) == b""  # shut down; the watchdog then waits for math.inf
        dog.watch(second, time.monotonic())
        second.settimeout(30)
        assert second.recv(1) == b""  # still enforced
        assert dog._thread is not None
        assert dog._thread.is_alive()
        assert endless in dog._sockets.values()
    finally:
        for sock in (endless, endless_peer, first, first_peer, second, second_peer):
            sock.close()


def test_an_abort_shuts_down_only_the_reads_still_watched_under_it() -> None:
    """A hedge loser's abort: its socket still being read is shut down now; one whose watch
    was cancelled (back in the pool, perhaps another call's) is left alone; a read watched
    under it afterwards is shut down at once."""
    dog = _Watchdog()
    reading, reading_peer = socket.socketpair()
    pooled, pooled_peer = socket.socketpair()
    later, later_peer = socket.socketpair()
    abort = Abort()
    try:
        with abortable(abort):
            dog.watch(reading, time.monotonic() + 3600)
            dog.cancel(dog.watch(pooled, time.monotonic() + 3600))
        dog.watch(reading_peer, time.monotonic() + 3600)  # not under the abort
        abort.abort()
        reading.settimeout(30)
        assert reading.recv(1) == b""  # shut down now, not in an hour
        pooled_peer.sendall(b"x")
        pooled.settimeout(30)
        assert pooled.recv(1) == b"x"  # untouched
        assert dog._sockets  # the watch made outside the abort is still there
        with abortable(abort):
            dog.watch(later, time.monotonic() + 3600)
        later.settimeout(30)
        assert later.recv(1) == b""  # watched after the abort: shut down at once
    finally:
        for sock in (reading, reading_peer, pooled, pooled_peer, later, later_peer):
            sock.close()


def test_a_cancelled_watch_leaves_nothing_for_a_later_abort_to_stop() -> None:
    """A hedge leg's reads, each watched under its abort, that ended (their watches cancelled)
    leave nothing for the abort: ``abort()`` says it stopped nothing, so the race's halt does
    not wait its grace for a loser whose reads had ended (each cancelled watch's shut-down was
    kept, and counted)."""
    dog = _Watchdog()
    first, first_peer = socket.socketpair()
    abort = Abort()
    try:
        with abortable(abort):
            for _ in range(20):
                dog.cancel(dog.watch(first, time.monotonic() + 3600))
        assert abort.abort() is False
        assert not dog._forgets  # (nothing kept per watch once it ended)
        first_peer.sendall(b"x")
        first.settimeout(30)
        assert first.recv(1) == b"x"  # untouched
    finally:
        first.close()
        first_peer.close()


def test_closing_a_stream_from_another_thread_ends_the_reader(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append])
    fake.script(Fault(inter_token_delay=0.05))
    long_question = [{"role": "user", "content": " ".join(["word"] * 40)}]
    stream = guard.chat(long_question, stream=True)
    seen: list[str] = []
    first = threading.Event()

    def read() -> None:
        for chunk in stream:
            seen.append(chunk.text)
            first.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert first.wait(5)
    stream.close()
    reader.join(10)
    assert not reader.is_alive()
    assert len(seen) < 40
    assert events[-1].outcome == "cancelled"


def test_a_reader_asking_for_a_chunk_while_another_thread_closes_the_stream_stops(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    closing, asked = threading.Event(), threading.Event()

    def slow_report(event: CallEvent) -> None:  # runs inside the stream's closing
        closing.set()
        asked.wait(5)

    guard = make_guard(fake, hooks=[slow_report])
    stream = guard.chat([{"role": "user", "content": " ".join(["w"] * 20)}], stream=True)
    next(stream)
    closer = threading.Thread(target=stream.close)  # the reader is between two chunks
    closer.start()
    assert closing.wait(5)
    try:
        with pytest.raises(StopIteration):  # (was ValueError: generator already executing)
            next(stream)
    finally:
        asked.set()
        closer.join(10)
    assert not closer.is_alive()


@pytest.mark.anyio
async def test_an_async_reader_between_chunks_while_another_task_closes_the_stream_stops(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake)
    failures: list[BaseException] = []
    for delay in [0.001 * i for i in range(20)]:
        stream = await guard.achat([{"role": "user", "content": " ".join(["w"] * 60)}], stream=True)

        async def read(chunks: Any = stream) -> None:
            try:
                async for _ in chunks:
                    await anyio.sleep(0.001)  # between two chunks: the closer may run
            except Exception as exc:  # (was RuntimeError: anext(): ... already running)
                failures.append(exc)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            await anyio.sleep(delay)
            await stream.aclose()
    assert failures == []
    await guard.aclose()


@pytest.mark.anyio
async def test_closing_an_async_stream_from_another_task_ends_the_reader(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    events: list[CallEvent] = []
    guard = make_guard(fake, hooks=[events.append])
    fake.script(Fault(inter_token_delay=0.05))
    stream = await guard.achat([{"role": "user", "content": " ".join(["w"] * 40)}], stream=True)
    seen: list[str] = []
    first = anyio.Event()

    async def read() -> None:
        async for chunk in stream:
            seen.append(chunk.text)
            first.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        with anyio.fail_after(5):
            await first.wait()
        await stream.aclose()
    assert len(seen) < 40
    assert events[-1].outcome == "cancelled"
    await guard.aclose()


@pytest.mark.anyio
async def test_sync_close_warns_about_open_async_pools(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    guard = make_guard(fake)
    await guard.achat(USER)
    with pytest.warns(ResourceWarning, match="aclose"):
        guard.close()
    await guard.aclose()


def test_drop_in_client_forwards_headers_query_and_openai_parameters(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    client = make_guard(fake).client()
    client.chat.completions.create(
        model="m",
        messages=USER,
        max_completion_tokens=2,
        metadata={"ticket": "7"},
        extra_headers={"X-Title": "my-app"},
        extra_query={"api-version": "2024-10-21"},
    )
    sent = fake.requests[-1]
    assert sent.headers["x-title"] == "my-app"
    assert "api-version=2024-10-21" in sent.path
    assert sent.body is not None
    assert sent.body["max_completion_tokens"] == 2
    assert "max_tokens" not in sent.body
    assert sent.body["metadata"] == {"ticket": "7"}


def test_drop_in_streams_close_like_openais(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake)
    with guard.client().chat.completions.create(model="m", messages=USER, stream=True) as stream:
        first = next(stream)
    assert first.choices[0].delta.role == "assistant"

    async def run() -> None:
        stream = await guard.aclient().chat.completions.create(
            model="m", messages=USER, stream=True
        )
        async for _chunk in stream:
            break
        await stream.close()
        await guard.aclose()

    anyio.run(run)
