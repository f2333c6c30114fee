"""LocalProvider refuses at construction the numbers llama.cpp failed on, crashed on or wrapped
at the first call (no model is loaded here: the refusal comes before)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard, LocalProvider, RequestValidationError

pytest.importorskip("llama_cpp")

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


@pytest.mark.parametrize("seed", [-1, 2**32 - 1, 2**32, 2**40, -(2**63)])
def test_a_request_seed_llama_cpp_cannot_take_is_refused_before_the_model_runs(
    seed: int,
) -> None:
    """A request's ``seed`` went to llama.cpp's ``uint32`` as it was: -1 (and 2**32 - 1) asked
    for a random seed, 2**32 wrapped to 0, so "repeat this answer" did not, or repeated
    another seed's. Refused as the provider's own seed is, before anything loads."""
    provider = LocalProvider(n_ctx=64)
    guard = Guard(provider, environ={}, retry=None)
    try:
        with pytest.raises(RequestValidationError) as info:
            guard.chat([{"role": "user", "content": "hi"}], seed=seed)
        assert str(info.value) == (
            f"seed must be from 0 to 4294967294 on the local route 'local' (llama.cpp's seeds"
            f" are 32 bits), got {seed}"
        )
        assert provider._worker.thread is None  # no worker started: no model loaded
    finally:
        guard.close()
