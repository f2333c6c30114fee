"""A batch call's ``extra_headers`` and ``extra_query`` (FakeProvider's batch APIs): a batch
is one set of HTTP requests carrying many calls, so the headers and query of its calls are
its own (``anthropic-beta`` turns a beta on for a whole Claude batch), calls that ask for
different ones go into different batches, and a call's own idempotency key and trace
context are never a batch's."""

from __future__ import annotations

import concurrent.futures
import time
import warnings
from typing import Any

import pytest

from llmguard_sdk import BatchSplitWarning, ChatRequest, ChatResponse
from llmguard_sdk.providers._anthropic_only import CLAUDE_HEADERS
from llmguard_sdk.providers.batch import BatchProvider
from llmguard_sdk.providers.wire import ANTHROPIC_ONLY_KEY
from llmguard_sdk.testing import FakeProvider


def _request(**options: Any) -> ChatRequest:
    return ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}], **options})


def _all_at_once(route: BatchProvider, requests: list[ChatRequest]) -> list[ChatResponse]:
    """Each of ``requests`` answered by ``route``, all sent within one window."""
    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
        futures = [
            pool.submit(route.complete, r, model="m", deadline=time.monotonic() + 20)
            for r in requests
        ]
        return [f.result(timeout=30) for f in futures]


def test_a_claude_batch_is_sent_with_its_calls_betas(fake: FakeProvider) -> None:
    """``anthropic-beta`` (``betas=[...]``) never reached a Claude batch: the beta was off
    for every call of it. Calls that ask for different betas go into batches of their own."""
    route = BatchProvider(fake.base_url, api="anthropic", window=1.0, poll_interval=0.02)
    requests = [
        _request(extra_headers={"anthropic-beta": "output-300k-2025-08-19"}),
        _request(extra_headers={"Anthropic-Beta": "output-300k-2025-08-19"}),
        _request(extra_headers={"anthropic-beta": "context-1m-2025-08-07"}),
        _request(),
    ]
    try:
        with pytest.warns(BatchSplitWarning, match="differ in header 'anthropic-beta' "):
            answers = _all_at_once(route, requests)
    finally:
        route.close()
    assert [a.text for a in answers] == ["Echo: hi"] * 4
    created = [r for r in fake.requests if r.method == "POST" and r.path.endswith("/batches")]
    sizes = sorted(
        (r.headers.get("anthropic-beta") or "", len((r.body or {})["requests"])) for r in created
    )
    assert sizes == [("", 1), ("context-1m-2025-08-07", 1), ("output-300k-2025-08-19", 2)]
    # the batch's every request carries them: its status reads and its results too
    beta = [r for r in fake.requests if r.headers.get("anthropic-beta") == "context-1m-2025-08-07"]
    assert {r.method for r in beta} == {"POST", "GET"}
    assert any(r.path.split("?")[0].endswith("/results") for r in beta)


def test_an_openai_batch_is_sent_with_its_calls_query_and_headers(fake: FakeProvider) -> None:
    """``extra_query`` (an Azure ``api-version``) and ``extra_headers`` (``OpenAI-Project``)
    were lost: the file upload, the batch, its polls and results went without them. A
    call's own idempotency key and trace context differ from call to call and split no
    batch; Claude's own headers, named Anthropic-only, stay off an OpenAI batch."""
    route = BatchProvider(
        fake.base_url, api="openai", window=10.0, max_batch=2, poll_interval=0.02
    )  # sent once both calls joined: one batch, unless their own headers split them
    shared: dict[str, Any] = {"extra_query": {"api-version": "2024-10-21"}}
    requests = [
        _request(
            extra_headers={
                "OpenAI-Project": "proj_1",
                "Idempotency-Key": f"llmguard-{n}",
                "traceparent": f"00-{n:032x}-{n:016x}-01",
                "anthropic-beta": "context-1m-2025-08-07",
            },
            metadata={ANTHROPIC_ONLY_KEY: CLAUDE_HEADERS},
            **shared,
        )
        for n in (1, 2)
    ]
    try:
        answers = _all_at_once(route, requests)
    finally:
        route.close()
    assert [a.text for a in answers] == ["Echo: hi"] * 2
    sent = [r for r in fake.requests if r.path.startswith("/v1/files") or "/batches" in r.path]
    assert {r.path.split("?")[0] for r in sent if r.method == "POST"} == {
        "/v1/files",
        "/v1/batches",
    }
    assert len([r for r in sent if r.path.startswith("/v1/batches?")]) == 1  # one batch
    assert all(r.path.endswith("?api-version=2024-10-21") for r in sent)
    assert {r.headers.get("openai-project") for r in sent} == {"proj_1"}
    for name in ("idempotency-key", "traceparent", "anthropic-beta"):
        assert {r.headers.get(name) for r in sent} == {None}


def _split_warnings(route: BatchProvider, requests: list[ChatRequest]) -> list[str]:
    """The :class:`BatchSplitWarning` messages of ``requests`` sent to ``route`` in one window."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answers = _all_at_once(route, requests)
    assert [a.text for a in answers] == ["Echo: hi"] * len(requests)
    return [str(w.message) for w in caught if issubclass(w.category, BatchSplitWarning)]


def test_a_header_unique_to_each_call_is_named_once_a_window(fake: FakeProvider) -> None:
    """A header that differs from call to call (a request id) split a window's calls into a
    batch each, silently: the caller saw its batch discount's calls go one by one. Once a
    window, a warning names the headers and query parameters that differ, never a value."""
    route = BatchProvider(fake.base_url, api="openai", window=1.0, poll_interval=0.02)
    requests = [
        _request(
            extra_headers={"OpenAI-Project": "proj_1", "X-Request-Id": f"req-{n}"},
            extra_query={"api-version": "2024-10-21", "trace": f"t{n}"},
        )
        for n in range(3)
    ]
    try:
        first = _split_warnings(route, requests)
        second = _split_warnings(route, requests[:2])  # the next window says it again
    finally:
        route.close()
    created = [r for r in fake.requests if r.method == "POST" and "/batches" in r.path]
    assert len(created) == 5  # a batch a call
    assert len(first) == 1
    assert len(second) == 1
    said = first[0]
    assert "differ in header 'x-request-id', query 'trace' (" in said
    for shared in ("openai-project", "api-version"):  # the same for every call: no split
        assert shared not in said
    for value in ("req-", "proj_1"):  # names, never values
        assert value not in said


def test_calls_that_share_a_batch_warn_of_nothing(fake: FakeProvider) -> None:
    """Calls whose headers differ only in what is each call's own (its idempotency key, its
    trace context) share one batch, and no warning."""
    route = BatchProvider(fake.base_url, api="openai", window=1.0, poll_interval=0.02)
    requests = [
        _request(extra_headers={"Idempotency-Key": f"llmguard-{n}", "OpenAI-Project": "p"})
        for n in range(3)
    ]
    try:
        assert _split_warnings(route, requests) == []
    finally:
        route.close()
    assert len([r for r in fake.requests if r.method == "POST" and "/batches" in r.path]) == 1
