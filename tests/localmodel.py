"""What the tests of the bundled local model share: the question they ask it, a long history of
filler turns, and the model loaded for a ``with`` block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from llmguard_sdk import LocalProvider

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "Answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France?"},
]


def old_turns(count: int, *, words: int) -> list[dict[str, str]]:
    """``count`` past question-and-answer pairs of ``words`` filler words each."""
    history = []
    for i in range(count):
        history.append({"role": "user", "content": f"Old question {i}: " + "filler " * words})
        history.append({"role": "assistant", "content": "Old answer " + "filler " * words})
    return history


@contextlib.contextmanager
def loaded_model(*args: Any, wait: float = 120, **options: Any) -> Iterator[LocalProvider]:
    """A :class:`LocalProvider` (``args`` and ``options`` as it takes them, warmed up) that has
    loaded its model within ``wait`` seconds; closed when the block ends."""
    provider = LocalProvider(*args, warm_up=True, **options)
    try:
        assert provider.wait_loaded(wait)
        yield provider
    finally:
        provider.close()
