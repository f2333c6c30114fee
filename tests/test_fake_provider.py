"""Tests for llmguard_sdk.testing.FakeProvider, over real HTTP (httpx and the openai client)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from llmguard_sdk.testing import FakeProvider, Fault, ProviderStats, ReceivedRequest

SRC_DIR = Path(__file__).resolve().parents[1] / "src"
HELLO: Any = [{"role": "user", "content": "hello world"}]


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


@pytest.fixture
def client(fake: FakeProvider) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake.base_url, timeout=5.0) as c:
        yield c


@pytest.fixture
def oai(fake: FakeProvider) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0, timeout=5.0) as c:
        yield c


def chat(client: httpx.Client, **extra: Any) -> httpx.Response:
    body: dict[str, Any] = {"model": "gpt-test", "messages": HELLO}
    body.update(extra)
    return client.post("/chat/completions", json=body)


def sse_events(lines: Iterator[str]) -> list[str]:
    return [line[len("data: ") :] for line in lines if line.startswith("data: ")]


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


# --------------------------------------------------------------------------- normal answers


def test_normal_answer_and_usage(fake: FakeProvider, client: httpx.Client) -> None:
    r = chat(client)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert int(r.headers["content-length"]) == len(r.content)
    assert r.headers["x-request-id"].startswith("req_")
    data = r.json()
    assert data["id"].startswith("chatcmpl-fake-")
    assert data["object"] == "chat.completion"
    assert isinstance(data["created"], int)
    assert data["model"] == "gpt-test"
    assert data["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Echo: hello world"},
            "finish_reason": "stop",
        }
    ]
    # input: 2 words + 4; output pieces: "Echo:", " hello", " world"
    assert data["usage"] == {
        "prompt_tokens": 6,
        "completion_tokens": 3,
        "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    stats = fake.stats
    assert (stats.requests, stats.succeeded, stats.input_tokens, stats.output_tokens) == (
        1,
        1,
        6,
        3,
    )


def test_default_model_list_content_and_custom_reply() -> None:
    def reply(body: dict[str, Any]) -> str:
        return f"{len(body['messages'])} messages"

    with FakeProvider(model="m0", reply=reply) as fake, httpx.Client(timeout=5) as c:
        msgs = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "a b"}, {"type": "image"}]},
        ]
        r = c.post(fake.base_url + "/chat/completions", json={"messages": msgs})
        data = r.json()
        assert data["model"] == "m0"
        assert data["choices"][0]["message"]["content"] == "2 messages"
        assert data["usage"]["prompt_tokens"] == (2 + 4) + (2 + 4)
        assert data["usage"]["completion_tokens"] == 2
    with FakeProvider() as fake, httpx.Client(timeout=5) as c:
        msgs = [
            {
                "role": "user",
                "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
            }
        ]
        r = c.post(fake.url + "/chat/completions", json={"messages": msgs})
        assert r.json()["choices"][0]["message"]["content"] == "Echo: x y"


def test_openai_client_non_stream(fake: FakeProvider, oai: openai.OpenAI) -> None:
    resp = oai.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi there"}]
    )
    assert resp.choices[0].message.content == "Echo: hi there"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (6, 3)
    models = oai.models.list()
    assert [m.id for m in models.data] == ["fake-model"]


def test_openai_stream_with_include_usage(fake: FakeProvider, oai: openai.OpenAI) -> None:
    chunks = list(
        oai.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "one two three"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: one two three"
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["stop"]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        7,
        4,
        11,
    )
    assert fake.stats.streams == 1
    assert fake.stats.succeeded == 1


def test_raw_stream_events(client: httpx.Client) -> None:
    body = {"messages": HELLO, "stream": True}
    with client.stream("POST", "/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert "content-length" not in r.headers
        events = sse_events(r.iter_lines())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all(c["choices"][0]["index"] == 0 for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    pieces = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
    assert pieces == ["Echo:", " hello", " world"]
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert all("usage" not in c for c in chunks)  # no include_usage -> no usage chunk


def test_max_tokens_truncation(
    fake: FakeProvider, client: httpx.Client, oai: openai.OpenAI
) -> None:
    data = chat(client, max_tokens=2).json()
    assert data["choices"][0]["message"]["content"] == "Echo: hello"
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 2
    data = chat(client, max_completion_tokens=1).json()
    assert data["choices"][0]["message"]["content"] == "Echo:"
    assert chat(client, max_tokens=50).json()["choices"][0]["finish_reason"] == "stop"
    chunks = list(oai.chat.completions.create(model="m", messages=HELLO, stream=True, max_tokens=2))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Echo: hello"
    assert chunks[-1].choices[0].finish_reason == "length"
    assert fake.stats.output_tokens == 2 + 1 + 3 + 2


def test_other_endpoints_and_bad_requests(fake: FakeProvider, client: httpx.Client) -> None:
    assert client.get(fake.url + "/health").text == "ok"
    models = client.get("/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "fake-model"
    assert models["data"][0]["object"] == "model"
    r = client.get("/nope")
    assert r.status_code == 404
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = client.post(
        "/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = client.post("/chat/completions", json={"model": "m"})
    assert r.status_code == 400
    r = client.post(fake.url + "/chat/completions", json={"messages": HELLO})
    assert r.status_code == 200
    stats = fake.stats
    assert stats.requests == 3
    assert stats.by_status == {400: 2, 200: 1}
    assert stats.faults == 0


# --------------------------------------------------------------------------- fault selection


def test_script_runs_in_order_then_normal(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(status=503), None)
    fake.script(Fault(status=400, error_code="context_length_exceeded"))
    r = chat(client)
    assert r.status_code == 503
    assert r.json() == {
        "error": {"message": "fake error 503", "type": "server_error", "param": None, "code": None}
    }
    assert chat(client).status_code == 200
    r = chat(client)
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "fake error 400",
        "type": "invalid_request_error",
        "param": None,
        "code": "context_length_exceeded",
    }
    assert chat(client).status_code == 200
    stats = fake.stats
    assert stats.faults == 2
    assert stats.succeeded == 2
    assert stats.by_status == {503: 1, 200: 2, 400: 1}


def test_openai_client_sees_status_errors(fake: FakeProvider, oai: openai.OpenAI) -> None:
    fake.script(Fault(status=503), Fault(status=429, retry_after=1))
    with pytest.raises(openai.InternalServerError) as exc_info:
        oai.chat.completions.create(model="m", messages=HELLO)
    assert exc_info.value.status_code == 503
    with pytest.raises(openai.RateLimitError):
        oai.chat.completions.create(model="m", messages=HELLO)
    ok = oai.chat.completions.create(model="m", messages=HELLO)
    assert ok.choices[0].message.content == "Echo: hello world"


def test_fail_for_window_expires(fake: FakeProvider, client: httpx.Client) -> None:
    fake.fail_for(0.3, Fault(status=500))
    assert chat(client).status_code == 500
    assert wait_until(lambda: chat(client).status_code == 200)
    assert chat(client).status_code == 200


def test_precedence_script_then_window_then_always(
    fake: FakeProvider, client: httpx.Client
) -> None:
    fake.always(Fault(status=502))
    fake.fail_for(30.0, Fault(status=503))
    fake.script(None, Fault(status=504))
    assert [chat(client).status_code for _ in range(3)] == [200, 504, 503]
    fake.fail_for(0, Fault(status=503))
    assert chat(client).status_code == 502
    fake.always(None)
    assert chat(client).status_code == 200
    fake.always(Fault(status=500))
    fake.script(Fault(status=501))
    fake.reset_faults()
    assert chat(client).status_code == 200


def test_concurrent_requests_consume_script_exactly(fake: FakeProvider) -> None:
    fake.script(*([Fault(status=503)] * 5))
    statuses: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        with httpx.Client(base_url=fake.base_url, timeout=5) as c:
            for _ in range(2):
                code = chat(c).status_code
                with lock:
                    statuses.append(code)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert sorted(statuses) == [200] * 11 + [503] * 5
    assert fake.stats.requests == 16


def test_retry_after_headers(client: httpx.Client, fake: FakeProvider) -> None:
    fake.script(
        Fault(status=429, retry_after=2, retry_after_ms=1500, headers={"x-extra": "yes"}),
        Fault(status=503, retry_after=0.5),
        Fault(status=503, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"),
    )
    r = chat(client)
    assert r.status_code == 429
    assert r.headers["retry-after"] == "2"
    assert r.headers["retry-after-ms"] == "1500"
    assert r.headers["x-extra"] == "yes"
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert chat(client).headers["retry-after"] == "0.5"
    assert chat(client).headers["retry-after"] == "Wed, 21 Oct 2015 07:28:00 GMT"
    assert fake.stats.rate_limited == 0  # scripted 429s are faults, not provider limits


def test_fault_validation() -> None:
    with pytest.raises(ValueError, match="status"):
        Fault(status=200)
    with pytest.raises(ValueError, match="latency"):
        Fault(latency=-1)
    with pytest.raises(ValueError, match="rpm"):
        FakeProvider(rpm=0)


# --------------------------------------------------------------------------- delays and breakage


def test_latency_is_a_slow_success(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(latency=0.2, headers={"x-slow": "1"}))
    t0 = time.monotonic()
    r = chat(client)
    assert time.monotonic() - t0 >= 0.15
    assert r.status_code == 200
    assert r.headers["x-slow"] == "1"
    stats = fake.stats
    assert (stats.succeeded, stats.faults) == (1, 0)


def test_stream_token_delays(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(first_token_delay=0.15, inter_token_delay=0.05))
    t0 = time.monotonic()
    with client.stream("POST", "/chat/completions", json={"messages": HELLO, "stream": True}) as r:
        events = sse_events(r.iter_lines())
    assert time.monotonic() - t0 >= 0.2
    assert events[-1] == "[DONE]"
    assert fake.stats.succeeded == 1


def test_hang_times_out_and_stop_is_fast() -> None:
    fake = FakeProvider().start()
    try:
        fake.always(Fault(hang=True))
        with httpx.Client(timeout=0.3) as c, pytest.raises(httpx.ReadTimeout):
            c.post(fake.base_url + "/chat/completions", json={"messages": HELLO})
        # leave a second one hanging in the background while stopping
        with httpx.Client(timeout=5) as c2:
            errors: list[BaseException] = []

            def hang() -> None:
                try:
                    c2.post(fake.base_url + "/chat/completions", json={"messages": HELLO})
                except httpx.HTTPError as exc:
                    errors.append(exc)

            t = threading.Thread(target=hang)
            t.start()
            assert wait_until(lambda: fake.stats.requests == 2)
            t0 = time.monotonic()
            fake.stop()
            assert time.monotonic() - t0 < 2.0
            t.join(timeout=3)
            assert not t.is_alive()
            assert len(errors) == 1
            assert isinstance(errors[0], httpx.TransportError)
    finally:
        fake.stop()


def test_hang_limit_bounds_the_hang() -> None:
    with FakeProvider(hang_limit=0.2) as fake, httpx.Client(timeout=5) as c:
        fake.script(Fault(hang=True))
        t0 = time.monotonic()
        with pytest.raises(httpx.RemoteProtocolError):
            c.post(fake.base_url + "/chat/completions", json={"messages": HELLO})
        assert time.monotonic() - t0 < 3.0
        assert (
            c.post(fake.base_url + "/chat/completions", json={"messages": HELLO}).status_code == 200
        )


def test_reset_is_a_transport_error(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(reset=True))
    with pytest.raises(httpx.TransportError):
        chat(client)
    assert chat(client).status_code == 200  # the pool recovers with a fresh connection
    assert fake.stats.faults == 1


def test_cut_stream_after(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(cut_stream_after=2))
    raw = bytearray()
    body = {"messages": [{"role": "user", "content": "a b c d e f"}], "stream": True}

    def read_stream() -> None:
        with client.stream("POST", "/chat/completions", json=body) as r:
            assert r.status_code == 200
            for data in r.iter_bytes():
                raw.extend(data)

    with pytest.raises(httpx.TransportError):
        read_stream()
    text = raw.decode()
    *events, partial = text.split("\n\n")
    assert partial.startswith("data: {")  # the connection died mid-event
    assert "[DONE]" not in text
    contents = [json.loads(e[len("data: ") :])["choices"][0]["delta"]["content"] for e in events]
    assert contents == ["", "Echo:", " a"]
    assert fake.stats.succeeded == 0
    assert fake.stats.faults == 1
    assert chat(client).status_code == 200


def test_cut_non_stream_body(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(cut_stream_after=0))
    with pytest.raises(httpx.RemoteProtocolError):
        chat(client)


def test_malformed_json(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(malformed_json=True), Fault(malformed_json=True))
    r = chat(client)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.content)
    with client.stream("POST", "/chat/completions", json={"messages": HELLO, "stream": True}) as r:
        events = sse_events(r.iter_lines())
    assert events[-1] == "[DONE]"
    with pytest.raises(json.JSONDecodeError):
        json.loads(events[0])


def test_wrong_content_type(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(wrong_content_type=True))
    r = chat(client)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert r.text.lstrip().lower().startswith("<!doctype html")


def test_missing_fields(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(missing_fields=True))
    r = chat(client)
    assert r.status_code == 200
    data = r.json()
    assert "choices" not in data
    assert data["object"] == "chat.completion"
    assert fake.stats.faults == 1
    assert fake.stats.succeeded == 0


# --------------------------------------------------------------------------- rate limits


def test_rpm_limit() -> None:
    with FakeProvider(rpm=2) as limited, httpx.Client(base_url=limited.base_url, timeout=5) as c:
        first = chat(c)
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        assert chat(c).headers["x-ratelimit-remaining-requests"] == "0"
        r = chat(c)
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert r.json()["error"]["code"] == "rate_limit_exceeded"
        assert 1 <= int(r.headers["retry-after"]) <= 60
        assert r.headers["x-ratelimit-remaining-requests"] == "0"
        reset = r.headers["x-ratelimit-reset-requests"]
        assert reset.endswith("s")
        assert r.headers["x-request-id"].startswith("req_")
        assert "x-ratelimit-limit-tokens" not in r.headers
        stats = limited.stats
        assert (stats.rate_limited, stats.succeeded, stats.by_status) == (1, 2, {200: 2, 429: 1})
        # a scripted fault takes precedence over the limit
        limited.script(Fault(status=500))
        assert chat(c).status_code == 500


def test_tpm_limit() -> None:
    # each request costs 6 input + 3 output = 9 tokens
    with FakeProvider(tpm=20) as limited, httpx.Client(base_url=limited.base_url, timeout=5) as c:
        r = chat(c)
        assert r.headers["x-ratelimit-limit-tokens"] == "20"
        assert r.headers["x-ratelimit-remaining-tokens"] == "11"
        assert chat(c).headers["x-ratelimit-remaining-tokens"] == "2"
        r = chat(c)
        assert r.status_code == 429
        assert int(r.headers["retry-after"]) >= 1
        assert chat(c, max_tokens=1).status_code == 429  # 6 + 1 > 2 remaining
        assert limited.stats.rate_limited == 2
        assert limited.stats.succeeded == 2


def test_reset_duration_format() -> None:
    from llmguard_sdk.testing._wire import _format_duration

    assert _format_duration(0.02) == "20ms"
    assert _format_duration(1.0) == "1s"
    assert _format_duration(1.5) == "1.5s"
    assert _format_duration(360.0) == "6m0s"
    assert _format_duration(0) == "0ms"


# --------------------------------------------------------------------------- bookkeeping


def test_stats_snapshot_and_reset(fake: FakeProvider, client: httpx.Client) -> None:
    fake.script(Fault(status=500), Fault(latency=0.01))
    chat(client)
    chat(client)
    with client.stream("POST", "/chat/completions", json={"messages": HELLO, "stream": True}) as r:
        r.read()
    snap = fake.stats
    assert isinstance(snap, ProviderStats)
    assert snap.requests == 3
    assert snap.streams == 1
    assert snap.succeeded == 2
    assert snap.faults == 1
    assert snap.by_status == {500: 1, 200: 2}
    assert (snap.input_tokens, snap.output_tokens) == (12, 6)
    snap.by_status[999] = 1  # a snapshot: mutating it does not touch the provider
    assert 999 not in fake.stats.by_status
    fake.reset_stats()
    assert fake.stats.requests == 0
    assert fake.stats.by_status == {}


def test_requests_are_recorded(fake: FakeProvider, client: httpx.Client) -> None:
    chat(client)
    client.post(
        "/chat/completions",
        json={"messages": HELLO, "temperature": 0},
        headers={"Authorization": "Bearer sk-test", "X-Custom": "v"},
    )
    client.get(fake.url + "/health")
    reqs = fake.requests
    assert all(isinstance(r, ReceivedRequest) for r in reqs)
    assert [(r.method, r.path) for r in reqs] == [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/health"),
    ]
    second = reqs[1]
    assert second.headers["authorization"] == "Bearer sk-test"
    assert second.headers["x-custom"] == "v"
    assert second.body == {"messages": HELLO, "temperature": 0}
    assert reqs[2].body is None
    assert reqs[0].time <= reqs[1].time <= reqs[2].time <= time.monotonic()
    reqs.clear()  # a copy
    assert len(fake.requests) == 3


def test_requests_keep_the_last_1000(fake: FakeProvider, client: httpx.Client) -> None:
    for _ in range(1005):
        client.get(fake.url + "/health")
    reqs = fake.requests
    assert len(reqs) == 1000


def test_keep_alive_reuses_one_connection(fake: FakeProvider, client: httpx.Client) -> None:
    assert chat(client).status_code == 200
    assert chat(client).status_code == 200
    with client.stream("POST", "/chat/completions", json={"messages": HELLO, "stream": True}) as r:
        r.read()
    fake.script(Fault(status=503))
    assert chat(client).status_code == 503
    assert chat(client).status_code == 200
    assert fake.stats.connections == 1


def test_openai_client_keeps_connection_alive(fake: FakeProvider, oai: openai.OpenAI) -> None:
    # (The sync openai client closes a stream's response at [DONE] without draining the
    # chunked terminator, which discards that connection; so only non-stream calls here.)
    for _ in range(4):
        oai.chat.completions.create(model="m", messages=HELLO)
    assert fake.stats.connections == 1


# --------------------------------------------------------------------------- lifecycle


def test_start_stop_idempotent_and_restart_keeps_port() -> None:
    fake = FakeProvider(name="drill")
    with pytest.raises(RuntimeError):
        _ = fake.url
    fake.start()
    fake.start()
    url = fake.url
    assert url.startswith("http://127.0.0.1:")
    assert fake.base_url == url + "/v1"
    assert httpx.get(url + "/health", timeout=5).text == "ok"
    fake.stop()
    fake.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/health", timeout=2)
    fake.start()
    try:
        assert fake.url == url
        assert httpx.get(url + "/health", timeout=5).text == "ok"
    finally:
        fake.stop()


def test_stop_while_streaming_and_idle_keep_alive() -> None:
    fake = FakeProvider().start()
    got_first = threading.Event()
    outcome: list[str] = []
    idle = httpx.Client(timeout=5)
    try:
        assert idle.get(fake.url + "/health").status_code == 200  # leaves an idle pooled connection
        fake.always(Fault(inter_token_delay=10.0))

        def stream() -> None:
            body = {"messages": HELLO, "stream": True}
            try:
                with (
                    httpx.Client(timeout=5) as c,
                    c.stream("POST", fake.base_url + "/chat/completions", json=body) as r,
                ):
                    for line in r.iter_lines():
                        if line.startswith("data: "):
                            got_first.set()
                outcome.append("finished")
            except httpx.TransportError:
                outcome.append("transport error")

        t = threading.Thread(target=stream)
        t.start()
        assert got_first.wait(5)
        t0 = time.monotonic()
        fake.stop()
        assert time.monotonic() - t0 < 2.0
        t.join(timeout=3)
        assert outcome == ["transport error"]
        # the idle pooled connection was closed too: a new request must not be answered
        with pytest.raises(httpx.TransportError):
            idle.get(fake.url + "/health")
    finally:
        idle.close()
        fake.stop()


def test_cli_serve_subprocess() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmguard_sdk.testing", "serve", "--model", "bench-model"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(15), "server did not print its base_url in time"
        base_url = proc.stdout.readline().decode().strip()
        assert base_url.startswith("http://127.0.0.1:")
        assert base_url.endswith("/v1")
        with httpx.Client(base_url=base_url, timeout=5) as c:
            assert c.get("/models").json()["data"][0]["id"] == "bench-model"
            assert chat(c).json()["choices"][0]["message"]["content"] == "Echo: hello world"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def test_cli_serve_stops_at_stdin_eof() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmguard_sdk.testing", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdin is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(15)
        base_url = proc.stdout.readline().decode().strip()
        assert httpx.get(base_url + "/models", timeout=5).status_code == 200
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


def test_short_limit_window_and_exact_retry_after_ms() -> None:
    with FakeProvider(rpm=2, limit_window=0.5) as fake, httpx.Client() as client:
        url = fake.base_url + "/chat/completions"
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post(url, json=body).status_code == 200
        assert client.post(url, json=body).status_code == 200
        refused = client.post(url, json=body)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        assert 0 < int(refused.headers["retry-after-ms"]) <= 500
        deadline = time.monotonic() + 5
        while client.post(url, json=body).status_code == 429:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_lone_surrogate_is_refused_with_a_400_as_providers_do(
    fake: FakeProvider, client: httpx.Client
) -> None:
    """JSON's "\\ud800" escape parses to a lone surrogate, no text: the server dropped the
    connection (its answer could not be encoded), which a client reads as an outage and
    retries; providers answer 400."""
    bad = {"model": "fake-model", "messages": [{"role": "user", "content": "\ud800 hi"}]}
    answer = client.post("/chat/completions", content=json.dumps(bad).encode())
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"
    emoji = {"model": "fake-model", "messages": [{"role": "user", "content": "hi \U0001f600"}]}
    echoed = client.post("/chat/completions", content=json.dumps(emoji).encode())  # "\ud83d\ude00"
    assert echoed.status_code == 200
    assert "\U0001f600" in echoed.json()["choices"][0]["message"]["content"]
    assert len(fake.requests) == 2
