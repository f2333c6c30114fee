"""The local fallback: the real bundled SmolLM2 model through llama-cpp-python, at temperature 0."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from llmguard_sdk import (
    ChatResponse,
    ConfigurationError,
    Guard,
    LocalProvider,
    OpenAICompatibleProvider,
    ProviderBusyError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RequestValidationError,
)
from llmguard_sdk._core.assembly import merge_metadata
from llmguard_sdk.models import ChatRequest, Message, StreamChunk
from llmguard_sdk.providers._abort import Abort, abortable
from llmguard_sdk.providers.local import _assemble, bundled_model_path, load_llama
from llmguard_sdk.testing import FakeProvider, Fault
from tests.llamaserver import llama_server as running_llama_server
from tests.localmodel import QUESTION, loaded_model, old_turns
from tests.test_local_lifetime import HI

pytestmark = pytest.mark.local_model


@pytest.fixture(scope="module")
def guard(local: LocalProvider) -> Guard:
    return Guard(local, timeout=60, environ={})


def test_answers_match_raw_llama_cpp_with_exact_usage(guard: Guard) -> None:
    answer = guard.chat(QUESTION, temperature=0, max_tokens=30)
    raw = load_llama(model_path=str(bundled_model_path()), n_ctx=1024, verbose=False)
    expected = raw.create_chat_completion(messages=QUESTION, temperature=0, max_tokens=30)
    assert answer.text == expected["choices"][0]["message"]["content"]
    assert answer.text.strip()
    assert answer.usage is not None
    assert not answer.usage.estimated
    assert answer.usage.input_tokens == expected["usage"]["prompt_tokens"]
    assert answer.usage.output_tokens == expected["usage"]["completion_tokens"]
    assert answer.route == "local"
    assert answer.cost_usd == 0.0


def test_streaming_gives_the_same_answer_and_usage(guard: Guard) -> None:
    plain = guard.chat(QUESTION, temperature=0, max_tokens=30)
    with guard.chat(QUESTION, temperature=0, max_tokens=30, stream=True) as stream:
        pieces = [chunk.text for chunk in stream]
    assert "".join(pieces) == plain.text
    assert len([p for p in pieces if p]) > 1
    assert stream.response.usage == plain.usage
    assert stream.response.timings.first_token_s is not None


def test_max_tokens_and_stop_strings(guard: Guard) -> None:
    long = guard.chat(
        [{"role": "user", "content": "Count from 1 to 50."}], temperature=0, max_tokens=8
    )
    assert long.usage is not None
    assert long.usage.output_tokens == 8
    assert long.finish_reason == "length"
    full = guard.chat(QUESTION, temperature=0, max_tokens=30)
    cut = guard.chat(QUESTION, temperature=0, max_tokens=30, stop=["Paris"])
    assert "Paris" in full.text
    assert cut.text == full.text[: full.text.index("Paris")]
    assert cut.finish_reason == "stop"


def test_an_over_long_prompt_keeps_system_and_latest_turns(guard: Guard) -> None:
    messages = [QUESTION[0], *old_turns(30, words=40), QUESTION[1]]
    answer = guard.chat(messages, temperature=0, max_tokens=20)
    trimmed = answer.metadata["context_trimmed"]
    assert trimmed["dropped_messages"] > 0
    assert trimmed["prompt_tokens"] <= 1024 - 20
    assert answer.usage is not None
    assert answer.usage.input_tokens == trimmed["prompt_tokens"]
    huge = [{"role": "user", "content": "filler " * 3000 + " What is 2+2?"}]
    answer = guard.chat(huge, temperature=0, max_tokens=10)
    assert answer.metadata["context_trimmed"]["truncated"]


@pytest.mark.timeout(600)
def test_a_long_history_is_trimmed_within_the_deadline() -> None:
    # Trimming dropped the oldest turn one at a time and tokenized the rest again after each
    # drop: quadratic in the history (800 messages held the one worker for 160 s on a busy
    # 2-core machine, 2,000 for many minutes, past any deadline; the deadline is not read
    # while trimming). Now it renders the whole prompt once and then only the tail it keeps.
    # (A small context: what is kept is read quickly even on a busy machine.)
    history = old_turns(1000, words=40)
    with loaded_model(n_ctx=256) as provider:
        guard = Guard(provider, timeout=120, retry=None, environ={})
        answer = guard.chat([QUESTION[0], *history, QUESTION[1]], temperature=0, max_tokens=60)
    trimmed = answer.metadata["context_trimmed"]
    assert trimmed["dropped_messages"] > 1990  # the latest turns are kept
    assert not trimmed["truncated"]
    assert answer.usage is not None
    assert answer.usage.input_tokens == trimmed["prompt_tokens"] <= 256 - 60


# The stories below hold the model for seconds (about a second of decoding on an idle
# machine, far longer on a busy one) within a deadline that holds either way.
STORY = [{"role": "user", "content": "Write a long story about a cat."}]
STORY_OPTIONS: dict[str, Any] = {"max_tokens": 60, "temperature": 0, "timeout": 240}


def start_story(provider: LocalProvider, busy: threading.Thread) -> None:
    """Load the model, start ``busy`` (the story) and wait (30 s at most) until it holds
    the model."""
    assert provider.wait_loaded(120)
    busy.start()
    deadline = time.monotonic() + 30
    while provider._worker.running is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)


@pytest.mark.timeout(600)
def test_a_full_queue_refuses_at_once() -> None:
    provider = LocalProvider(n_ctx=512, max_queue=0, warm_up=True)
    guard = Guard(provider, timeout=60, retry=None, environ={})
    busy = threading.Thread(target=guard.chat, args=(STORY,), kwargs=STORY_OPTIONS)
    try:
        start_story(provider, busy)
        with pytest.raises(ProviderBusyError):
            guard.chat(QUESTION, max_tokens=5)
        # Refused, not queued behind the story: the story still holds the model when the
        # refusal arrives.
        assert provider._worker.running is not None
        assert busy.is_alive()
    finally:
        if busy.ident is not None:
            busy.join(240)
        provider.close()


def test_the_chain_falls_back_to_the_local_model(local: LocalProvider) -> None:
    with FakeProvider(name="primary") as primary:
        primary.always(Fault(status=503))
        remote = OpenAICompatibleProvider(primary.base_url, model="gpt-x", name="primary")
        guard = Guard([remote, local], retry=None, timeout=60, environ={})
        answer = guard.chat(QUESTION, temperature=0, max_tokens=20)
        assert answer.route == "local"
        assert answer.text
        remote.close()  # the shared local model stays open for the other tests


def test_a_sync_hedge_race_lost_by_the_local_model_stops_its_generation(
    local: LocalProvider,
) -> None:
    """The local model raced as a hedge and beaten: its generation is abandoned when the race
    ends (it went on to its token limit, holding the one model the next fallback needs).
    (A stream is abandoned the same way; which stream's first token wins depends on the
    machine's speed, so a whole answer, about 300 tokens long, is raced here.)"""
    counting = [{"role": "user", "content": "Count from 1 to 1000, one number a line."}]
    with FakeProvider(name="primary") as primary:
        primary.always(Fault(latency=0.5))  # slow enough for the hedge, faster than 300 tokens
        remote = OpenAICompatibleProvider(primary.base_url, model="gpt-x", name="primary")
        guard = Guard([remote, local], hedge_after=0.05, retry=None, timeout=120, environ={})
        answer = guard.chat(counting, temperature=0, max_tokens=900)
        assert answer.route == "primary"
        assert answer.attempts == 2  # the local model was raced
        remote.close()  # the shared local model stays open for the other tests
    for _ in range(1200):  # (the abort stops llama.cpp's computation, of the prompt too,
        if local._worker.running is None:  # at its next graph node)
            break
        time.sleep(0.1)
    assert local._worker.running is None
    engine = local._worker.engine
    assert engine is not None
    prompt = len(engine.tokens(counting))
    # what the model holds: the prompt and the tokens generated before the abort reached it
    # (run to its end, the answer is about 300 tokens long)
    assert engine.llm.n_tokens - prompt < 60


def test_a_finished_local_stream_leaves_nothing_for_a_later_abort_to_stop(
    local: LocalProvider,
) -> None:
    """A hedge leg's local streams that ended take their abandon off the leg's abort: a later
    abort says it stopped nothing, so the race's halt does not wait its grace for them."""
    abort = Abort()
    with abortable(abort):
        for _ in range(3):
            chunks = list(local.stream(HI, model="local", deadline=time.monotonic() + 60))
            assert chunks
    assert abort.abort() is False


def test_the_model_and_its_kv_cache_live_across_calls(guard: Guard, local: LocalProvider) -> None:
    guard.chat(QUESTION, temperature=0, max_tokens=5)
    engine = local._worker.engine
    guard.chat(QUESTION, temperature=0, max_tokens=5)
    assert local._worker.engine is engine  # one context, reused: prefix-stable prompts start fast


def test_a_prompt_cached_whole_counts_every_token_cached(guard: Guard) -> None:
    # A one-token answer leaves the KV cache holding exactly the prompt: asked again,
    # llama-cpp-python samples from the logits it holds and computes no token, where the
    # usage said one token of the prompt was computed again.
    guard.chat(QUESTION, temperature=0, max_tokens=1)
    again = guard.chat(QUESTION, temperature=0, max_tokens=1)
    assert again.usage is not None
    assert again.usage.cached_input_tokens == again.usage.input_tokens


def test_async_streaming_does_not_block_the_event_loop(guard: Guard) -> None:
    async def run() -> tuple[str, int]:
        ticks = 0
        done = anyio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await anyio.sleep(0.005)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(ticker)
            stream = await guard.achat(
                [{"role": "user", "content": "Count from 1 to 30."}],
                temperature=0,
                max_tokens=60,
                stream=True,
            )
            async with stream:
                text = "".join([chunk.text async for chunk in stream])
            done.set()
        return text, ticks

    text, ticks = anyio.run(run)
    assert text
    assert ticks >= 5  # the loop kept running while the model generated


def test_without_the_extra_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(ConfigurationError, match=r"llmguard-sdk\[local\]"):
        LocalProvider()


def test_a_missing_model_file_is_a_configuration_error(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(ConfigurationError, match="no GGUF"):
        LocalProvider(os.path.join(tmp_path, "absent.gguf"))


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_threads_that_are_no_whole_positive_number_are_refused(threads: object) -> None:
    with pytest.raises(ConfigurationError, match="n_threads"):
        LocalProvider(n_threads=threads)  # type: ignore[arg-type]


def test_by_default_half_the_cpus_decode_and_all_read_the_prompt() -> None:
    """A decode thread per CPU lost most of its speed whenever another process took a core
    (two threads wait for each other at every token): half the CPUs decode by default."""
    cpus = len(os.sched_getaffinity(0))
    local = LocalProvider(n_ctx=256)
    try:
        assert local.n_threads == max(1, cpus // 2)
        assert local.wait_loaded(120)
        answer = local.complete(
            ChatRequest(messages=[Message(role="user", content="Hi")], max_tokens=2),
            model="m",
            deadline=time.monotonic() + 120,
        )
        assert answer.text is not None
        assert local._worker.engine is not None
        context = local._worker.engine.llm.context_params  # what llama.cpp was given
        assert (context.n_threads, context.n_threads_batch) == (max(1, cpus // 2), cpus)
    finally:
        local.close()


def test_a_platform_without_cpu_affinity_uses_every_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # macOS and Windows have no os.sched_getaffinity: LocalProvider() raised AttributeError
    # (and with n_threads given, the model failed to load on every call for the same reason).
    monkeypatch.delattr(os, "sched_getaffinity")
    cpus = os.cpu_count() or 1
    local = LocalProvider(n_ctx=256)
    try:
        assert local.n_threads == max(1, cpus // 2)
        assert local.wait_loaded(120)
        assert local._worker.engine is not None
        assert local._worker.engine.llm.context_params.n_threads_batch == cpus
    finally:
        local.close()


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    """llama-cpp-python's own OpenAI-compatible server on a loopback port, same GGUF."""
    with running_llama_server(n_ctx=1024) as base_url:
        yield base_url


def test_a_real_openai_compatible_server_we_did_not_write(llama_server: str) -> None:
    guard = Guard(
        OpenAICompatibleProvider(llama_server, model="smollm2", name="llama-server"),
        timeout=60,
        environ={},
    )
    answer = guard.chat(QUESTION, temperature=0, max_tokens=20)
    assert answer.text
    assert answer.usage is not None
    assert not answer.usage.estimated  # the server reported it
    assert answer.usage.input_tokens > 10
    with guard.chat(QUESTION, temperature=0, max_tokens=20, stream=True) as stream:
        streamed = "".join(chunk.text for chunk in stream)
    assert streamed == answer.text
    assert stream.response.usage is not None
    assert stream.response.usage.output_tokens > 0

    async def run() -> str:
        result = await guard.achat(QUESTION, temperature=0, max_tokens=20)
        await guard.aclose()
        return result.text

    assert anyio.run(run) == answer.text


@pytest.mark.timeout(600)  # a correctness test: 200 tokens on a busy 2-core machine
def test_prompt_lookup_decoding_past_512_tokens() -> None:
    paragraph = " ".join(
        f"Item {i} in the warehouse list is a box of {i % 7 + 2} blue pens." for i in range(40)
    )
    provider = LocalProvider(n_ctx=1024, prompt_lookup_tokens=10)
    guard = Guard(provider, timeout=480, environ={})
    answer = guard.chat(
        [{"role": "user", "content": f"Repeat this text exactly:\n\n{paragraph}"}],
        temperature=0,
        max_tokens=200,
    )
    assert answer.usage is not None
    assert answer.usage.input_tokens + answer.usage.output_tokens > 512
    assert "warehouse" in answer.text
    provider.close()


@pytest.mark.timeout(600)
def test_callers_that_gave_up_free_their_queue_slot() -> None:
    provider = LocalProvider(n_ctx=512, max_queue=1, warm_up=True)
    guard = Guard(provider, timeout=60, retry=None, environ={})
    busy = threading.Thread(target=guard.chat, args=(STORY,), kwargs=STORY_OPTIONS)
    outcome: list[object] = []

    def wait_for_the_model() -> None:
        try:  # its deadline covers the rest of the story and its own answer
            outcome.append(guard.chat(QUESTION, max_tokens=5, temperature=0, timeout=240))
        except Exception as exc:  # recorded for the assertion below
            outcome.append(exc)

    waiter = threading.Thread(target=wait_for_the_model)
    try:
        start_story(provider, busy)
        with pytest.raises(ProviderTimeoutError):
            guard.chat(QUESTION, max_tokens=5, timeout=0.2)  # waits, then gives up
        waiter.start()  # takes the freed slot instead of being refused
        assert busy.is_alive()  # while the story still holds the model
    finally:
        for thread in (busy, waiter):
            if thread.ident is not None:
                thread.join(240)
        provider.close()
    # With max_queue=1 the waiter is only let in because the caller that gave up freed its
    # slot: it waited for the story and then got an answer from the model.
    assert len(outcome) == 1
    answer = outcome[0]
    assert not isinstance(answer, Exception), repr(answer)
    assert isinstance(answer, ChatResponse)
    assert answer.route == "local"
    assert answer.text


def test_close_refuses_new_calls_and_frees_the_model() -> None:
    provider = LocalProvider(n_ctx=512, warm_up=True)
    assert provider.wait_loaded(60)
    guard = Guard(provider, timeout=60, retry=None, environ={})
    assert guard.chat(QUESTION, max_tokens=5).text
    provider.close()
    assert provider._worker.engine is None
    with pytest.raises(ProviderUnavailableError, match="closed"):
        guard.chat(QUESTION, max_tokens=5)


def test_loading_models_loses_no_output_of_the_process() -> None:
    # llama-cpp-python's quiet load pointed fds 1 and 2 at /dev/null and back: what other
    # threads printed meanwhile was lost, and two loads racing could leave them there.
    script = """
import sys, threading
from llmguard_sdk import LocalProvider
loading = threading.Event()
printed = []
def chatter():
    n = 0
    while not loading.is_set():
        n += 1
        print(f"tick {n}", flush=True)
        print(f"tock {n}", file=sys.stderr, flush=True)
        printed.append(n)
thread = threading.Thread(target=chatter)
thread.start()
providers = [LocalProvider(name=f"m{i}", warm_up=True, n_ctx=512) for i in range(3)]
try:
    assert all(p.wait_loaded(120) for p in providers)
finally:
    loading.set()
    thread.join()
print(f"printed {len(printed)}", flush=True)
for p in providers:
    p.close()
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    printed = int(result.stdout.rsplit("printed ", 1)[1])
    assert printed > 10  # the loads took long enough for the check to mean something
    ticks = [line for line in result.stdout.splitlines() if line.startswith("tick ")]
    tocks = [line for line in result.stderr.splitlines() if line.startswith("tock ")]
    assert len(ticks) == printed
    assert len(tocks) == printed


def test_waits_without_an_end_are_taken_not_an_overflow_error(local: LocalProvider) -> None:
    # A deadline or wait_loaded timeout of math.inf (no bound of the caller's: the answer and
    # the load always end) raised OverflowError from the thread library; NaN a ValueError.
    request = ChatRequest(messages=[Message(role="user", content="Hi")], max_tokens=2)
    answer = local.complete(request, model="m", deadline=math.inf)
    assert answer.usage is not None
    assert answer.usage.output_tokens >= 1
    chunks = list(local.stream(request, model="m", deadline=math.inf, idle_timeout=math.inf))
    assert chunks[-1].finish_reason in ("stop", "length")
    assert local.wait_loaded(math.inf)
    for bad in (math.nan, "5", None, True):
        with pytest.raises(ConfigurationError, match="wait_loaded timeout"):
            local.wait_loaded(bad)  # type: ignore[arg-type]


def test_a_deadline_that_is_nan_or_no_number_is_refused_as_the_http_providers_do() -> None:
    # A NaN deadline (or idle_timeout) was a wait of 0: a ProviderTimeoutError that the chain
    # retries elsewhere, where the HTTP providers refuse it as a RequestValidationError.
    provider = LocalProvider(n_ctx=256)
    request = ChatRequest(messages=[Message(role="user", content="Hi")], max_tokens=2)
    try:
        for bad in (math.nan, "soon", None, True):
            with pytest.raises(RequestValidationError, match="deadline"):
                provider.complete(request, model="m", deadline=bad)  # type: ignore[arg-type]

            async def streamed(deadline: Any = bad) -> None:
                async for _ in provider.astream(request, model="m", deadline=deadline):
                    pass

            with pytest.raises(RequestValidationError, match="deadline"):
                anyio.run(streamed)
        with pytest.raises(RequestValidationError, match="idle_timeout"):
            list(provider.stream(request, model="m", deadline=math.inf, idle_timeout=math.nan))
        assert provider._worker.thread is None  # refused before the model was loaded
    finally:
        provider.close()


def test_a_plain_answer_folds_chunk_metadata_as_streams_do() -> None:
    # complete() joined its chunks' metadata with dict.update (the last chunk's value won), where
    # a stream's assembly joins text pieces and lists and merges objects (merge_metadata)
    chunks = [
        StreamChunk(text="Hi", metadata={"logprobs": {"content": [1]}}),
        StreamChunk(text="!", metadata={"logprobs": {"content": [2]}}),
        StreamChunk(finish_reason="stop", metadata={"context_trimmed": {"dropped_messages": 1}}),
    ]
    answer = _assemble(iter(chunks), "local")
    folded: dict[str, Any] = {}
    for chunk in chunks:
        merge_metadata(folded, chunk.metadata)
    assert answer.metadata == folded
    assert answer.metadata["logprobs"] == {"content": [1, 2]}
