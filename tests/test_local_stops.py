"""How the local model ends: an answer where the model ends its turn (any end-of-generation
token, not only the GGUF's end-of-sequence token), a prompt that cannot fit, a model that
cannot load."""

from __future__ import annotations

import shutil
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmguard_sdk import (
    BadRequestError,
    ContextLengthExceededError,
    Guard,
    LocalProvider,
    ProviderUnavailableError,
)
from llmguard_sdk.models import ChatRequest, StreamChunk
from llmguard_sdk.providers._emitter import _Emitter
from llmguard_sdk.providers._local_engine import _Job
from llmguard_sdk.providers.local import bundled_model_path
from tests.localmodel import QUESTION, loaded_model, old_turns

pytestmark = pytest.mark.local_model

_EOS_KEY = b"tokenizer.ggml.eos_token_id"
_GGUF_UINT32 = 4


def with_eos(source: Path, target: Path, eos: int) -> Path:
    """A copy of the GGUF ``source`` whose end-of-sequence token is ``eos`` (the weights, the
    vocabulary and the chat template unchanged)."""
    shutil.copyfile(source, target)
    with open(target, "r+b") as gguf:
        head = gguf.read(8 << 20)  # the metadata (with the vocabulary) comes first
        at = head.index(_EOS_KEY) + len(_EOS_KEY)
        assert struct.unpack_from("<I", head, at)[0] == _GGUF_UINT32
        gguf.seek(at + 4)
        gguf.write(struct.pack("<I", eos))
    return target


_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF scalars


def _value_end(data: bytes, at: int, kind: int) -> int:
    """Where the GGUF metadata value of type ``kind`` at ``at`` ends."""
    if kind == 8:  # a string
        length: int = struct.unpack_from("<Q", data, at)[0]
        return at + 8 + length
    if kind == 9:  # an array
        item, count = struct.unpack_from("<IQ", data, at)
        at += 12
        if item != 8:
            return int(at + _SIZES[item] * count)
        for _ in range(count):
            at += 8 + struct.unpack_from("<Q", data, at)[0]
        return at
    return at + _SIZES[kind]


def with_template(source: Path, target: Path, template: str) -> Path:
    """A copy of the GGUF ``source`` with another chat template (the metadata written again,
    the tensor descriptions and the weights copied, aligned as before)."""
    data = source.read_bytes()
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    out, at, alignment = bytearray(data[:24]), 24, 32
    for _ in range(n_kv):
        size = struct.unpack_from("<Q", data, at)[0]
        key, kind = data[at + 8 : at + 8 + size], struct.unpack_from("<I", data, at + 8 + size)[0]
        value, end = at + 12 + size, _value_end(data, at + 12 + size, kind)
        if key == b"tokenizer.chat_template":
            raw = template.encode()
            out += data[at:value] + struct.pack("<Q", len(raw)) + raw
        else:
            out += data[at:end]
        if key == b"general.alignment":
            alignment = struct.unpack_from("<I", data, value)[0]
        at = end
    infos = at
    for _ in range(n_tensors):
        at += 8 + struct.unpack_from("<Q", data, at)[0]
        at += 4 + 8 * struct.unpack_from("<I", data, at)[0] + 4 + 8
    out += data[infos:at]
    out += bytes(-len(out) % alignment)
    target.write_bytes(bytes(out) + data[at + (-at % alignment) :])
    return target


@pytest.fixture(scope="module")
def eos_apart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProvider]:
    """SmolLM2 whose EOS is ``<|endoftext|>`` (0): its turns still end with ``<|im_end|>``
    (2), which llama.cpp counts as an end-of-generation token, as GGUFs of chat models often
    have it (EOS for documents, another token for the end of a turn)."""
    path = with_eos(bundled_model_path(), tmp_path_factory.mktemp("gguf") / "eos0.gguf", 0)
    with loaded_model(path, n_ctx=512) as provider:
        yield provider


@pytest.mark.timeout(600)
def test_an_end_of_turn_token_that_is_not_eos_ends_the_answer(eos_apart: LocalProvider) -> None:
    # Only EOS stopped the generation: the model's <|im_end|> was dropped from the text and the
    # model went on past its turn (a new turn, or rambling) until max_tokens.
    bundled = LocalProvider(n_ctx=512)
    try:
        expected = Guard(bundled, timeout=240, environ={}).chat(
            QUESTION, temperature=0, max_tokens=40
        )
    finally:
        bundled.close()
    assert expected.finish_reason == "stop"
    answer = Guard(eos_apart, timeout=240, environ={}).chat(QUESTION, temperature=0, max_tokens=40)
    assert answer.text == expected.text
    assert answer.finish_reason == "stop"
    assert answer.usage == expected.usage


def test_a_prompt_that_cannot_fit_is_a_context_length_error_not_retried() -> None:
    # Twelve system messages: their turn markers alone outgrow a 64-token context, whatever is
    # trimmed. The engine's typed error was wrapped as ProviderUnavailableError (retryable):
    # retried, and counted by the route's breaker as an outage.
    with loaded_model(n_ctx=64) as provider:
        guard = Guard(provider, timeout=120, environ={})
        rules = [{"role": "system", "content": f"Rule {i}."} for i in range(12)]
        with pytest.raises(ContextLengthExceededError, match="cannot be trimmed") as caught:
            guard.chat([*rules, {"role": "user", "content": "Hi"}], max_tokens=8)
        assert caught.value.route == "local"
        assert not caught.value.retryable


def test_a_model_that_fails_to_load_is_not_reported_loaded(tmp_path: Path) -> None:
    # wait_loaded() said True (the load was over) when the load had failed: a caller that
    # waited for the model went on to calls that all failed.
    cut = tmp_path / "cut.gguf"
    with open(bundled_model_path(), "rb") as whole:
        cut.write_bytes(whole.read(20 << 20))  # the metadata and part of the weights
    provider = LocalProvider(cut, n_ctx=256)
    try:
        assert not provider.wait_loaded(120)
        guard = Guard(provider, timeout=60, retry=None, environ={})
        with pytest.raises(ProviderUnavailableError, match="failed to load"):
            guard.chat(QUESTION, max_tokens=4)
    finally:
        provider.close()


@pytest.mark.timeout(600)
def test_the_route_token_limit_leaves_the_rest_of_the_context_to_the_prompt() -> None:
    # The room kept for the answer was the request's max_tokens (up to half the context) even
    # where the route's own max_tokens cut the answer shorter: a prompt that fitted was
    # trimmed, its oldest turns dropped for room the answer could never use.
    messages = [
        *old_turns(6, words=20),
        {"role": "user", "content": "What is the capital of France?"},
    ]
    with loaded_model(n_ctx=512, max_tokens=8) as provider:
        prompt = provider.count_tokens(ChatRequest.model_validate({"messages": messages}))
        assert prompt is not None
        assert 256 < prompt < 512 - 16  # fits beside 16 tokens of answer, not beside 256
        guard = Guard(provider, timeout=240, environ={})
        answer = guard.chat(messages, temperature=0, max_tokens=400)
    assert "context_trimmed" not in answer.metadata
    assert answer.usage is not None
    assert answer.usage.input_tokens == prompt
    assert answer.usage.output_tokens <= 8


def test_a_developer_message_is_the_system_message_of_a_model_without_one() -> None:
    # OpenAI's developer messages (the system message's newer name) reached SmolLM2's chat
    # template as a turn of an unknown role, after the template's own default system message
    # ("You are a helpful AI assistant named SmolLM ...") that a system message replaces.
    with loaded_model(n_ctx=512) as provider:
        guard = Guard(provider, timeout=240, environ={})
        rule, question = QUESTION
        as_system = guard.chat([rule, question], temperature=0, max_tokens=12)
        as_developer = guard.chat(
            [{**rule, "role": "developer"}, question], temperature=0, max_tokens=12
        )
    assert as_developer.usage is not None
    assert as_system.usage is not None
    assert as_developer.usage.input_tokens == as_system.usage.input_tokens
    assert as_developer.usage.cached_input_tokens >= as_system.usage.input_tokens - 1  # the same
    assert as_developer.text == as_system.text


# A template that refuses system messages, as Gemma 2's and others do.
REFUSES_SYSTEM = (
    r"{% for message in messages %}{% if message['role'] == 'system' %}"
    r"{{ raise_exception('System role not supported') }}{% endif %}"
    r"{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    r"{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_messages_the_chat_template_refuses_are_a_bad_request(tmp_path: Path) -> None:
    # The template's error was wrapped as a retryable ProviderUnavailableError (retried, and
    # counted by the breaker as an outage), and count_tokens() raised jinja2's TemplateError
    # into the call's rate-limit stage.
    path = with_template(bundled_model_path(), tmp_path / "no-system.gguf", REFUSES_SYSTEM)
    with loaded_model(path, n_ctx=256) as provider:
        refused = ChatRequest.model_validate({"messages": QUESTION})
        assert provider.count_tokens(refused) is None
        guard = Guard(provider, timeout=120, environ={})
        with pytest.raises(BadRequestError, match="System role not supported") as caught:
            guard.chat(QUESTION, max_tokens=4)
        assert caught.value.route == "local"
        assert guard.chat([QUESTION[1]], temperature=0, max_tokens=4).text  # a user turn: fine


@pytest.mark.parametrize(
    ("stops", "pieces", "sent"),
    [
        (["\n\n", "."], ["Paris", ".\n\n", "More"], "Paris"),  # one token holds both stops
        (["."], ["Paris", ".\n\n"], "Paris"),
        (["a", "cat"], ["The c", "at sat"], "The "),  # "cat" starts first
        ([" sat", "at"], ["The c", "at sat"], "The c"),
    ],
)
def test_an_answer_ends_at_the_first_stop_string_in_it(
    stops: list[str], pieces: list[str], sent: str
) -> None:
    # The stop strings were tried in the order given, and the answer cut at the first one
    # found, not at the one that comes first: ".\\n\\n" with stops ["\\n\\n", "."] let the "."
    # through.
    request = ChatRequest.model_validate({"messages": [{"role": "user", "content": "Hi."}]})
    job = _Job(request, time.monotonic() + 10)
    emitter = _Emitter(job, "m", "local", stops)
    stopped = False
    for piece in pieces:
        if emitter.text(piece):
            stopped = True
            break
    assert stopped
    chunks = []
    while not job.out.empty():
        chunks.append(job.out.get())
    assert all(isinstance(c, StreamChunk) for c in chunks)
    assert "".join(c.text for c in chunks if isinstance(c, StreamChunk)) == sent
