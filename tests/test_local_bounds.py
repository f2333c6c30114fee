"""LocalProvider refuses at construction the numbers llama.cpp failed on, crashed on or wrapped
at the first call (no model is loaded here: the refusal comes before); a request's seed
beyond llama.cpp's is read into its range; an ``n_ctx`` above the model's trained context is
that context."""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

from llmguard_sdk import (
    ConfigurationError,
    Guard,
    LocalContextWarning,
    LocalProvider,
)

pytest.importorskip("llama_cpp")

from llmguard_sdk.providers._llama import local_seed

COUNT = "must be a whole number of tokens from 1 to 2147483647, got "


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        # "Failed to create llama_context" at the first call (an int32 context size)
        ({"n_ctx": 2**31}, "n_ctx " + COUNT + "2147483648"),
        ({"n_ctx": 10**30}, "n_ctx " + COUNT + "1000000000000000000000000000000"),
        ({"n_ctx": float("nan")}, "n_ctx " + COUNT + "nan"),
        ({"n_ctx": True}, "n_ctx " + COUNT + "True"),
        # a segmentation fault at the first call (ggml runs at most 512 threads)
        ({"n_threads": 10**6}, "n_threads must be a whole number of threads from 1 to 512"),
        ({"n_threads": 2**31}, "n_threads must be a whole number of threads from 1 to 512"),
        ({"n_threads": float("nan")}, "n_threads must be a whole number of threads"),
        # wrapped into llama.cpp's int32 layer count
        ({"n_gpu_layers": 10**30}, "n_gpu_layers must be a whole number of layers"),
        ({"n_gpu_layers": -(10**30)}, "n_gpu_layers must be a whole number of layers"),
        ({"n_gpu_layers": float("nan")}, "n_gpu_layers must be a whole number of layers"),
        ({"prompt_lookup_tokens": 10**30}, "prompt_lookup_tokens " + COUNT),
        ({"max_tokens": 2**31}, "max_tokens " + COUNT + "2147483648"),
        # llama.cpp's seeds are uint32: -1 (and 2**32 - 1) meant a random seed, 2**40 wrapped
        ({"seed": -1}, "seed must be a whole number of the sampler's seed from 0 to 4294967294"),
        ({"seed": 2**32 - 1}, "seed must be a whole number"),
        ({"seed": 2**40}, "seed must be a whole number"),
        ({"seed": True}, "seed must be a whole number"),
    ],
)
def test_numbers_llama_cpp_cannot_take_are_refused_at_construction(
    kwargs: dict[str, Any], said: str
) -> None:
    with pytest.raises(ConfigurationError, match="^" + re.escape(said)):
        LocalProvider(**kwargs)


def test_the_bounds_themselves_are_taken() -> None:
    provider = LocalProvider(
        n_ctx=64, n_threads=512, n_gpu_layers=-(2**31), seed=2**32 - 2, max_tokens=2**31 - 1
    )
    try:
        assert provider.n_threads == 512
        assert provider.n_gpu_layers == -1  # every layer, as llama-cpp-python reads it
        assert provider.seed == 2**32 - 2
        assert provider.max_tokens == 2**31 - 1
    finally:
        provider.close()


def test_a_request_seed_beyond_llama_cpp_s_is_taken_and_repeats() -> None:
    """A request's ``seed`` went to llama.cpp's ``uint32`` as it was: -1 (and 2**32 - 1) asked
    for a random seed, 2**32 wrapped to 0, so "repeat this answer" did not. A seed another
    route takes (OpenAI's: any int64) is the local route's remainder modulo 2**32 - 1: the
    local fallback answers it, and the same seed gives the same answer."""
    provider = LocalProvider(n_ctx=256, temperature=1.0)
    guard = Guard(provider, environ={}, retry=None)
    messages = [{"role": "user", "content": "Tell me a word."}]
    try:

        def answer(seed: int) -> str | None:
            return guard.chat(messages, seed=seed, max_tokens=12).text

        assert local_seed(-1) == 2**32 - 2  # (not llama.cpp's "random")
        assert local_seed(2**32 - 1) == 0
        assert local_seed(2**40) == 2**40 % (2**32 - 1)
        assert local_seed(7) == 7
        for seed in (-1, 2**40, -(2**63)):
            assert answer(seed) == answer(seed)  # repeats
        assert answer(-1) == answer(2**32 - 2)  # (the seed it is read as)
        assert len({answer(seed) for seed in range(6)}) > 1  # (the seed is used at all)
    finally:
        guard.close()


def test_an_n_ctx_above_the_trained_context_is_the_trained_one() -> None:
    """``n_ctx=2**31 - 1`` (a count within bounds) passed construction and failed at the
    model's load, "Failed to create llama_context", on every call: llama.cpp sized a KV cache
    for all of it, far past the 8192 tokens the bundled model was trained on. It is cut to
    those, with a warning, as llama-server caps its slots; the model loads and answers."""
    said = (
        "n_ctx=2147483647 is more than the 8192 tokens SmolLM2-135M-Instruct.Q4_1.gguf was"
        " trained on: the local model's context is 8192 tokens"
    )
    with pytest.warns(LocalContextWarning, match="^" + re.escape(said)) as caught:
        provider = LocalProvider(n_ctx=2**31 - 1, warm_up=True)
    try:
        assert len(caught) == 1
        assert caught[0].filename == __file__  # the caller's line
        assert provider.n_ctx == provider.placement.n_ctx == 8192
        assert provider.wait_loaded(120)
        guard = Guard(provider, environ={}, retry=None)
        assert guard.chat([{"role": "user", "content": "hi"}], max_tokens=1).text is not None
    finally:
        provider.close()


def test_the_trained_context_itself_is_taken_without_a_word() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        provider = LocalProvider(n_ctx=8192)
    try:
        assert provider.n_ctx == 8192
    finally:
        provider.close()
