"""A continuation of an interrupted stream counted as each route counts it: what it adds to
the request (the text already streamed, the prompt to go on) was counted once, with the
call's encoding, and added to every route's own count of the request, for the route's
``context_window`` check and its rate-limit reservation."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import (
    CallEvent,
    ChatRequest,
    Guard,
    OpenAICompatibleProvider,
    StreamInterruptedError,
)
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.testing import FakeProvider, Fault
from llmguard_sdk.tokens import count_request_tokens

LONG = [{"role": "user", "content": "word " * 60}]
_SLACK = 150  # room in the backup's window beyond the request and max_tokens


class _CharCounting(OpenAICompatibleProvider):
    """A route whose own tokenizer counts a token a character (as a local model's may count
    far more than tiktoken does)."""

    def count_tokens(self, request: ChatRequest) -> int:
        return sum(len(message.text) for message in request.messages)


def _room(model: str, own: bool) -> int:
    """The request's input tokens as the backup counts them (``own``: a token a character),
    and :data:`_SLACK` more."""
    request = ChatRequest.model_validate({"messages": LONG, "model": model})
    if own:
        counted = sum(len(message.text) for message in request.messages)
    else:
        counted = count_request_tokens(request).tokens
    return counted + _SLACK


@pytest.mark.usefixtures("o200k_offline")
@pytest.mark.parametrize(
    ("limit", "refusal"),
    [("window", "ContextLengthExceededError"), ("input_tpm", "RateLimitExceededError")],
)
@pytest.mark.parametrize(
    ("first", "second", "own", "fits"),
    [
        # the call counts with gpt-4's cl100k_base (~70 tokens added), gpt-4o's stand-in
        # counts a token a byte (~330): the continuation was sent to a window too small
        ("gpt-4-0613", "gpt-4o", False, False),
        # the call counts with gpt-4o's (~330 added): a gpt-4 window that holds the
        # continuation (~70 added) was skipped and the interruption raised
        ("gpt-4o", "gpt-4-0613", False, True),
        # a route's own tokenizer (a token a character: ~330 added)
        ("gpt-4-0613", "gpt-4-0613", True, False),
    ],
    ids=["cl100k-call-o200k-route", "o200k-call-cl100k-route", "own-tokenizer"],
)
def test_a_route_takes_the_continuation_as_its_own_model_counts_it(
    first: str, second: str, own: bool, fits: bool, limit: str, refusal: str
) -> None:
    """The backup's ``context_window`` and its rate limit's reservation counted the
    continuation's additions with the call's encoding: a route whose model (or tokenizer)
    counts more was sent a continuation its window cannot hold (reserving too little of its
    limit), and one that counts less was skipped. Each route counts them as it counts the
    request."""
    with FakeProvider(model=first) as broken, FakeProvider(model=second) as backup:
        broken.script(Fault(cut_stream_after=40))
        kind = _CharCounting if own else OpenAICompatibleProvider
        room = _room(second, own)
        window = room + 20 if limit == "window" else None
        routes = [
            OpenAICompatibleProvider(broken.base_url, model=first, name="primary"),
            kind(backup.base_url, model=second, name="backup", context_window=window),
        ]
        events: list[CallEvent] = []
        options: dict[str, Any] = {"retry": None, "hooks": [events.append], "environ": {}}
        if limit == "input_tpm":
            options["rate_limits"] = {"backup": RateLimit(input_tpm=room)}
        # max_input_tokens: the call counts as its first route's model
        guard = Guard(routes, continue_interrupted_streams=True, max_input_tokens=5_000, **options)
        assert_continued_or_refused(guard, backup, events, fits=fits, refusal=refusal)


def assert_continued_or_refused(
    guard: Guard,
    backup: FakeProvider,
    events: list[CallEvent],
    *,
    fits: bool,
    refusal: str = "ContextLengthExceededError",
) -> None:
    """A stream of ``LONG`` (max_tokens 20) through ``guard``, broken on its first route:
    continued on the route ``backup`` serves (``fits``), else the interruption raised with
    every text the caller saw, ``backup`` sent nothing and its ``refusal`` noted."""
    seen: list[str] = []
    with guard:
        if fits:
            with guard.chat(LONG, stream=True, max_tokens=20) as stream:
                seen.extend(chunk.text for chunk in stream)
            assert stream.response.route == "backup"
            assert backup.stats.requests == 1
            return
        with (
            pytest.raises(StreamInterruptedError) as info,
            guard.chat(LONG, stream=True, max_tokens=20) as stream,
        ):
            seen.extend(chunk.text for chunk in stream)
    assert info.value.partial_text == "".join(seen)
    assert backup.stats.requests == 0
    assert ("backup", f"llmguard_sdk.errors.{refusal}") in events[-1].route_errors
