"""Releases: a canary call's stream that broke after it delivered text from the candidate is
not continued on the current release's routes (its prompt and parameters: the caller would
read an answer begun on one prompt and finished on another); the stream's error is raised, as
before the fallback, unless another of the candidate's routes continues it. A stream that failed
before its first chunk still falls back."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import Guard, StreamInterruptedError
from llmguard_sdk.releases import Release
from llmguard_sdk.testing import Fault

from .test_releases_fallback import INSIDE, USER, fakes, route
from .test_releases_fallback import _guard as fallback_guard

__all__ = ["fakes"]  # (the fixture, shared)


def _guard(current: Release, candidate: Release) -> Guard:
    return fallback_guard(current, candidate, guard_args={"continue_interrupted_streams": True})


def _read(guard: Guard, read: list[str]) -> None:
    for chunk in guard.chat(USER, user=INSIDE, stream=True):
        read.append(chunk.text)


def test_a_candidate_stream_cut_after_text_is_not_finished_by_the_current_release(
    fakes: Any,
) -> None:
    a, b, _ = fakes
    b.always(Fault(cut_stream_after=2))
    current = Release("bot", "v1", route(a), system_prompt="v1 prompt")
    candidate = Release("bot", "v2", route(b), system_prompt="v2 prompt")
    read: list[str] = []
    with _guard(current, candidate) as guard, pytest.raises(StreamInterruptedError) as raised:
        _read(guard, read)
    assert "".join(read) == raised.value.partial_text != ""
    assert (len(b.requests), len(a.requests)) == (1, 0)  # the current release not sent it


def test_another_candidate_route_continues_a_cut_stream(fakes: Any) -> None:
    """The candidate's own second route continues it (its prompt, as the first's)."""
    a, b, c = fakes
    b.always(Fault(cut_stream_after=2))
    current = Release("bot", "v1", route(a), system_prompt="v1 prompt")
    candidate = Release("bot", "v2", [route(b), route(c)], system_prompt="v2 prompt")
    with _guard(current, candidate) as guard:
        chunks = list(guard.chat(USER, user=INSIDE, stream=True))
    assert [chunk.route for chunk in chunks if chunk.route][-1] == "c"
    assert (len(b.requests), len(c.requests), len(a.requests)) == (1, 1, 0)
    assert c.requests[0].body["messages"][0]["content"] == "v2 prompt"


def test_a_candidate_stream_failed_before_its_first_chunk_falls_back(fakes: Any) -> None:
    a, b, _ = fakes
    b.always(Fault(status=500))
    current = Release("bot", "v1", route(a), system_prompt="v1 prompt")
    candidate = Release("bot", "v2", route(b), system_prompt="v2 prompt")
    with _guard(current, candidate) as guard:
        chunks = list(guard.chat(USER, user=INSIDE, stream=True))
    assert {chunk.route for chunk in chunks if chunk.route} == {"a"}
    assert a.requests[0].body["messages"][0]["content"] == "v1 prompt"
