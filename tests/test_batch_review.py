"""BatchProvider's calls as a user of OpenAI's Batch API sees them: a streamed call's one chunk
says what the plain call's answer says, and a call that cannot be sent fails alone."""

from __future__ import annotations

import concurrent.futures
import math
import time
from typing import Any, Literal

import pytest

from llmguard_sdk import ChatRequest, RequestValidationError
from llmguard_sdk.providers.batch import BatchProvider
from llmguard_sdk.testing import FakeProvider

REQUEST = ChatRequest.model_validate({"messages": [{"role": "user", "content": "hi"}]})


def _refused(row: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI batch row whose answer is a refusal with its tokens' logprobs."""
    row["response"]["body"]["created"] = 1_700_000_000  # (the clock's second may tick between)
    choice = row["response"]["body"]["choices"][0]
    choice["message"] = {"role": "assistant", "content": None, "refusal": "I cannot."}
    choice["logprobs"] = {"content": None, "refusal": [{"token": "I", "logprob": -0.1}]}
    return row


def test_a_streamed_batch_call_says_what_the_plain_call_says(fake: FakeProvider) -> None:
    """A streamed call through a batch route is its answer as one chunk; the chunk left out
    the answer's metadata, so a streamed caller lost the model's refusal (and logprobs,
    reasoning) that a plain caller of the same route got."""
    fake.batch_rows = _refused
    route = BatchProvider(fake.base_url, model="m", window=0.01, poll_interval=0.02)
    try:
        plain = route.complete(REQUEST, model="m", deadline=time.monotonic() + 10)
        chunks = list(route.stream(REQUEST, model="m", deadline=time.monotonic() + 10))
    finally:
        route.close()
    assert plain.metadata["refusal"] == "I cannot."
    assert [chunk.metadata for chunk in chunks] == [plain.metadata]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_call_that_cannot_be_sent_as_json_fails_alone(
    fake: FakeProvider, api: Literal["openai", "anthropic"]
) -> None:
    """A call whose body is no JSON (a NaN in its ``extra_body``) is refused as a plain route
    refuses it (RequestValidationError, nothing sent). In a batch it was written into the
    batch's input as it was: the Claude batch could not be sent and every call of it failed
    ("the batch failed: ValueError"); OpenAI's file got a line that is no JSON, which fails
    the whole batch's validation at OpenAI."""
    route = BatchProvider(fake.base_url, api=api, model="m", window=0.2, poll_interval=0.02)
    bad = REQUEST.model_copy(update={"extra_body": {"top_k": math.nan}})
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            good = pool.submit(route.complete, REQUEST, model="m", deadline=time.monotonic() + 10)
            refused = pool.submit(route.complete, bad, model="m", deadline=time.monotonic() + 10)
            with pytest.raises(RequestValidationError):
                refused.result()
            assert good.result().text
    finally:
        route.close()
