"""The SSE decoder gives the same events however the bytes are split."""

from __future__ import annotations

import itertools
import json
import time

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider
from llmguard_sdk.errors import MalformedResponseError, StreamInterruptedError
from llmguard_sdk.providers.sse import ServerSentEvent, SSEDecoder

from .rawserver import RawServer, sse_head


def decode(pieces: list[bytes]) -> tuple[list[ServerSentEvent], bool]:
    decoder = SSEDecoder()
    events = [event for piece in pieces for event in decoder.feed(piece)]
    return events, decoder.pending


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


payloads = st.lists(
    st.text(
        alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
        max_size=30,
    ),
    min_size=1,
    max_size=5,
)


@given(payloads, st.sampled_from(["\n", "\r\n", "\r"]), st.lists(st.integers(0, 10_000)))
def test_any_split_gives_the_same_events(datas: list[str], newline: str, cuts: list[int]) -> None:
    stream = "".join(f"data: {d}{newline}{newline}" for d in datas).encode()
    events, pending = decode(split(stream, cuts))
    assert [e.data for e in events] == datas
    assert not pending


def test_multiline_data_comments_event_and_id() -> None:
    stream = b": keep-alive\nevent: delta\nid: 7\ndata: a\ndata:b\n\ndata: c\n\n"
    events, _ = decode([stream])
    assert events == [
        ServerSentEvent(data="a\nb", event="delta", id="7"),
        ServerSentEvent(data="c", event="message", id="7"),
    ]


def test_unfinished_event_is_pending_not_dispatched() -> None:
    events, pending = decode([b'data: {"a": 1}\n\ndata: {"cut'])
    assert [e.data for e in events] == ['{"a": 1}']
    assert pending
    events, pending = decode([b"data: x\n"])
    assert events == []
    assert pending


def test_utf8_split_inside_a_character() -> None:
    data = "data: héllo ✓\n\n".encode()
    events, _ = decode([data[:8], data[8:9], data[9:]])
    assert events[0].data == "héllo ✓"


def test_flush_gives_the_event_a_stream_ended_in() -> None:
    decoder = SSEDecoder()
    assert list(decoder.feed(b"data: a\n\ndata: [DONE]\n")) == [ServerSentEvent("a")]
    assert decoder.flush() == ServerSentEvent("[DONE]")
    assert decoder.flush() is None
    assert not list(decoder.feed(b"data: [DONE]"))  # not even its line end
    assert decoder.flush() == ServerSentEvent("[DONE]")


def _chunk(text: str, finish: str | None = None) -> bytes:
    delta = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data: " + json.dumps(delta).encode() + b"\n\n"


@pytest.mark.parametrize("end", [b"data: [DONE]\n", b"data: [DONE]\r", b"data: [DONE]"])
def test_a_done_without_its_blank_line_ends_the_stream(end: bytes) -> None:
    # the openai SDK ends such a stream cleanly; it was a StreamInterruptedError here
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    with RawServer(sse_head(), (_chunk("a"), _chunk("b", "stop"), end)) as raw:
        provider = OpenAICompatibleProvider(raw.base_url)
        chunks = list(provider.stream(request, model="m", deadline=time.monotonic() + 10))
        provider.close()
    assert "".join(chunk.text for chunk in chunks) == "ab"


def test_a_stream_cut_inside_a_content_event_is_still_interrupted() -> None:
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    with RawServer(sse_head(), (_chunk("a"), _chunk("b", "stop")[:-1])) as raw:
        provider = OpenAICompatibleProvider(raw.base_url)
        with pytest.raises(StreamInterruptedError):
            list(provider.stream(request, model="m", deadline=time.monotonic() + 10))
        provider.close()


def test_a_leading_byte_order_mark_is_ignored() -> None:
    # WHATWG: one leading U+FEFF is ignored; it made the first field "\ufeffdata" (dropped)
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    parts = (b"\xef\xbb", b"\xbf" + _chunk("a"), _chunk("b", "stop"), b"data: [DONE]\n\n")
    with RawServer(sse_head(), parts) as raw:
        provider = OpenAICompatibleProvider(raw.base_url)
        chunks = list(provider.stream(request, model="m", deadline=time.monotonic() + 10))
        provider.close()
    assert "".join(chunk.text for chunk in chunks) == "ab"
    decoder = SSEDecoder()  # only the first one
    assert list(decoder.feed("\ufeffdata: a\n\n\ufeffdata: b\n\n".encode())) == [
        ServerSentEvent("a")
    ]


def test_an_empty_piece_between_a_cr_and_its_lf_ends_no_line() -> None:
    # the CR of a CRLF was read last, then an empty piece: the LF that came after it read as
    # a blank line of its own, and one event was dispatched as two
    events, pending = decode([b"data: a\r", b"", b"\ndata: b\r\n\r\n"])
    assert [e.data for e in events] == ["a\nb"]
    assert not pending


def test_a_long_line_and_a_read_of_many_events_give_every_event() -> None:
    # a line that comes in many pieces, then many events in one piece: each piece scanned
    # once (the buffer was searched and copied again for each line)
    long_line = b"data: " + b"x" * 200_000 + b"\n\n"
    pieces = [long_line[i : i + 1000] for i in range(0, len(long_line), 1000)]
    many = b"".join(b"data: %d\r\n\r\n" % i for i in range(2000))
    events, pending = decode([*pieces, many[:-1], many[-1:]])
    assert [len(e.data) for e in events[:1]] == [200_000]
    assert [e.data for e in events[1:]] == [str(i) for i in range(2000)]
    assert not pending


def test_a_reader_that_stops_early_leaves_the_rest_for_the_next_piece() -> None:
    decoder = SSEDecoder()
    first = decoder.feed(b"data: a\n\ndata: b\n\ndata: c")
    assert next(first) == ServerSentEvent("a")  # then left (a [DONE] read)
    assert decoder.pending
    assert [e.data for e in decoder.feed(b"\n\n")] == ["b", "c"]
    assert not decoder.pending


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_line_that_never_ends_fails_the_stream_past_the_answer_cap(asynchronous: bool) -> None:
    # 40 MiB of one line, the connection then held open: the decoder kept it all (a server
    # that never sent a line end grew it until the deadline), as no answer body may be kept
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
    endless = (b"data: " + b"x" * 2**20,) + (b"x" * 2**20,) * 39
    with RawServer(sse_head(), endless, hold=True) as raw:
        provider = OpenAICompatibleProvider(raw.base_url)

        def stream() -> None:
            list(provider.stream(request, model="m", deadline=time.monotonic() + 5))

        async def astream() -> None:
            async for _ in provider.astream(request, model="m", deadline=time.monotonic() + 5):
                pass

        try:
            with pytest.raises(MalformedResponseError, match="larger than"):
                anyio.run(astream) if asynchronous else stream()
        finally:
            provider.close()


def test_held_counts_the_unfinished_line_and_event() -> None:
    decoder = SSEDecoder()
    assert not list(decoder.feed(b"data: abc\ndata: de"))
    assert decoder.held == 11  # "abc", and the line "data: de" begun
    assert not list(decoder.feed(b"f\n"))
    assert decoder.held == 6  # "abc" and "def"
    assert [e.data for e in decoder.feed(b"\n")] == ["abc\ndef"]
    assert decoder.held == 0
