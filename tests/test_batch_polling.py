"""A submitted batch's status is checked less and less often (a batch takes minutes to hours:
at a fixed 2 s, a day-long batch read its status 43,200 times), and a caller that gives up
is still noticed every ``poll_interval``."""

from __future__ import annotations

import concurrent.futures
import time
from typing import Literal

import pytest

from llmguard_sdk import ChatRequest, ProviderTimeoutError
from llmguard_sdk.providers.batch import BatchProvider
from llmguard_sdk.testing import FakeProvider

REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})
STATUS_PATHS = {"openai": "/v1/batches/", "anthropic": "/v1/messages/batches/"}


def _status_checks(fake: FakeProvider, api: str) -> int:
    return sum(
        1
        for request in fake.requests
        if request.method == "GET"
        and request.path.startswith(STATUS_PATHS[api])
        and not request.path.endswith("/results")
    )


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_status_checks_grow_apart(fake: FakeProvider, api: Literal["openai", "anthropic"]) -> None:
    # 2 s in progress, polled from 0.01 s: a check every 0.01 s made 60 or more (each check
    # a loopback round trip of at most ~20 ms on a busy machine); growing 1.5 times, about 13
    fake.batch_seconds = 2.0
    route = BatchProvider(fake.base_url, api=api, model="m", window=0.01, poll_interval=0.01)
    try:
        answer = route.complete(REQUEST, model="m", deadline=time.monotonic() + 30)
    finally:
        route.close()
    assert answer.text
    assert 2 <= _status_checks(fake, api) <= 20


def test_a_caller_that_gives_up_is_noticed_between_two_status_checks(
    fake: FakeProvider,
) -> None:
    # checks grow apart to a minute; the caller's give-up cancels the batch within about
    # poll_interval, not at the next status check
    fake.batch_seconds = 600.0
    route = BatchProvider(fake.base_url, model="m", window=0.01, poll_interval=0.05)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(
                route.complete, REQUEST, model="m", deadline=time.monotonic() + 1.5
            )
            with pytest.raises(ProviderTimeoutError):
                waiting.result(timeout=20)
        for _ in range(200):  # the batch's cancel, sent from the route's thread
            if any(r.path.endswith("/cancel") for r in fake.requests):
                break
            time.sleep(0.05)
    finally:
        route.close()
    assert [r.path for r in fake.requests if r.path.endswith("/cancel")] != []
