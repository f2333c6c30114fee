"""A seeded call of the local model answers alike whether it is the first after the load
(which computes the whole prompt) or a later one (which reuses the cached prompt and
computes its last token again, alone): every call computes the prompt's last token alone.

Kernels that round a batch otherwise than a single token (llamafile's sgemm for F16 and
Q8_0 weights on CPUs, GPU kernels) gave the last token computed inside the prompt's batch
logits a little different, and at temperature > 0 the same seed another answer on the first
call only: with the bundled model requantized to F16, 8 of the seeds 0-29 (on this 2-core
machine; the bundled Q4_1 itself computes both alike here, bit for bit)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import ChatRequest, ChatResponse, LocalProvider

pytestmark = pytest.mark.local_model

llama_cpp = pytest.importorskip("llama_cpp")

from llmguard_sdk.providers._llama import bundled_model_path  # noqa: E402
from tests.localmodel import loaded_model  # noqa: E402

ASK = [{"role": "user", "content": "Tell me a word."}]
LONGER = [*ASK, {"role": "assistant", "content": "Word."}, {"role": "user", "content": "More."}]


def _ask(provider: LocalProvider, seed: int, messages: list[dict[str, str]] = ASK) -> ChatResponse:
    request = ChatRequest.model_validate({"messages": messages, "seed": seed, "max_tokens": 32})
    return provider.complete(request, model="m", deadline=time.monotonic() + 60)


def _first_and_again(path: Path | None, seed: int) -> tuple[ChatResponse, ChatResponse]:
    """The same seeded call, first after the model's load and once more."""
    provider = LocalProvider(path, n_ctx=256, temperature=1.0)
    try:
        return _ask(provider, seed), _ask(provider, seed)
    finally:
        provider.close()


@pytest.fixture(scope="module")
def f16_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bundled model with F16 weights (about 270 MB, written in a few seconds): llamafile's
    sgemm computes a batch of it otherwise than a single token."""
    path = tmp_path_factory.mktemp("f16") / "smollm2-f16.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    assert (
        llama_cpp.llama_model_quantize(
            str(bundled_model_path()).encode(), str(path).encode(), params
        )
        == 0
    )
    yield path
    path.unlink()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [3, 6, 7])
def test_a_seeded_call_first_after_the_load_answers_as_it_does_again(
    f16_model: Path, seed: int
) -> None:
    """Seeds whose first call answered otherwise (``"... A: \\"Tear"`` for ``"... A:
    SmolM."``, seed 3)."""
    first, again = _first_and_again(f16_model, seed)
    assert first.usage is not None
    assert again.usage is not None
    assert first.usage.cached_input_tokens == 0  # the whole prompt computed
    assert again.usage.cached_input_tokens == again.usage.input_tokens - 1  # its last again
    assert first.text == again.text


def test_the_bundled_model_s_seeded_calls_repeat() -> None:
    first, again = _first_and_again(None, 3)
    assert first.text == again.text


def test_a_greedy_call_of_the_bundled_model_answers_as_it_does_again() -> None:
    """At temperature 0 too: after the warm-up (whose prompt's start the cache holds), a
    JSON-mode call answered ``{"count": 1, "message": "..."}`` (``stop``) the first time and
    ran on to ``max_tokens`` (``length``) the second."""
    request = ChatRequest.model_validate(
        {
            "messages": [{"role": "user", "content": "Count from 1 to 5."}],
            "temperature": 0,
            "max_tokens": 80,
            "response_format": {"type": "json_object"},
        }
    )
    with loaded_model(n_ctx=512, wait=60) as provider:
        first, again = (
            provider.complete(request, model="m", deadline=time.monotonic() + 60) for _ in "12"
        )
        assert (first.text, first.finish_reason) == (again.text, again.finish_reason)


def test_every_call_computes_the_prompt_s_last_token_alone() -> None:
    """The first call computes its prompt in two batches, all but the last token, then the
    last alone, as a call of a prompt the cache holds does; a prompt that shares part of the
    cached one computes the rest of it, then its last token alone."""
    provider = LocalProvider(n_ctx=256, temperature=1.0)
    try:
        assert provider.wait_loaded(60)
        llm: Any = provider._worker.engine.llm  # type: ignore[union-attr]
        computed: list[int] = []
        evaluate = llm.eval

        def counted(tokens: Sequence[int]) -> None:
            computed.append(len(tokens))
            evaluate(tokens)

        llm.eval = counted
        first = _ask(provider, 1)
        assert first.usage is not None
        assert computed[:2] == [first.usage.input_tokens - 1, 1]
        computed.clear()
        _ask(provider, 1)
        assert computed[0] == 1  # (the same prompt: its last token again)
        computed.clear()
        longer = _ask(provider, 1, LONGER)
        assert longer.usage is not None
        new = longer.usage.input_tokens - longer.usage.cached_input_tokens
        assert computed[:2] == [new - 1, 1]
    finally:
        provider.close()
