"""How the local model trims a prompt longer than its context: what it keeps of a long system
message and of the last message, read from the prompt it would compute."""

from __future__ import annotations

import pytest

from llmguard_sdk import LocalProvider
from llmguard_sdk.models import ChatRequest, Message

pytestmark = pytest.mark.local_model


def test_a_long_system_prompt_is_cut_before_the_question(local: LocalProvider) -> None:
    # A system message of documents (RAG) longer than the context, and a short question: the
    # question was cut first, to nothing (its content[overflow + 1:] was empty), and the model
    # answered no question. The system message gives way first now. (What the call would
    # read, without reading it: a 1,000-token prompt takes tens of seconds on a busy CPU.)
    question = "What is the capital of France?"
    documents = "Background document, line of filler text. " * 300
    engine = local._worker.engine
    assert engine is not None
    request = ChatRequest(
        messages=[
            Message(role="system", content=documents),
            Message(role="user", content=question),
        ],
        max_tokens=4,
    )
    tokens, trimmed = engine.fit(local, request)
    assert trimmed is not None
    assert trimmed["truncated"]
    prompt = engine.llm.detokenize(tokens).decode("utf-8", "replace")
    assert question in prompt
    assert prompt.count("Background document") > 10  # the start of the documents is kept


def test_a_long_prompt_of_system_messages_alone_is_cut(local: LocalProvider) -> None:
    # Without a turn, the trimming read turns[-1] of an empty list: an IndexError, which the
    # worker turned into a retryable ProviderUnavailableError ("local model failed").
    engine = local._worker.engine
    assert engine is not None
    request = ChatRequest(
        messages=[Message(role="system", content="Summarise this text. " * 400)], max_tokens=4
    )
    tokens, trimmed = engine.fit(local, request)
    assert trimmed is not None
    assert trimmed["truncated"]
    assert len(tokens) <= local.n_ctx - 16
