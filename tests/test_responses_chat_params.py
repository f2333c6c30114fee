"""Chat completions' parameters the Responses API lacks, sent by a chat caller (in
``extra_body``) to a Responses route: translated where the API has them under another name,
left out with a warning where they only shape sampling, refused before sending (the chain
moves on) where the caller depends on them. The fake refuses an unknown parameter as
OpenAI's ``/v1/responses`` does, so a key that slipped through is a 400 here."""

from __future__ import annotations

from typing import Any

import httpx
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from llmguard_sdk.providers.responses import OpenAIResponsesProvider
from llmguard_sdk.testing import FakeProvider

_RESPONSES_FIELDS = frozenset(ResponseCreateParamsBase.__annotations__) | {"stream"}


def _responses(fake: FakeProvider) -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(fake.base_url, model=fake.model, name=fake.name)


def _bodies(fake: FakeProvider) -> list[dict[str, Any]]:
    return [r.body for r in fake.requests if r.body]


def _refused(fake: FakeProvider, **extra: Any) -> dict[str, Any]:
    body = {"model": "m", "input": "hello there", **extra}
    answer = httpx.post(fake.base_url + "/responses", json=body, timeout=10)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert isinstance(error, dict)
    return error


def test_the_fake_refuses_an_unknown_parameter_as_openai_does(fake: FakeProvider) -> None:
    assert _refused(fake, frequency_penalty=0.5) == {
        "message": "Unknown parameter: 'frequency_penalty'.",
        "type": "invalid_request_error",
        "param": "frequency_penalty",
        "code": "unknown_parameter",
    }
    assert _refused(fake, n=2)["message"] == "Unknown parameter: 'n'."
    assert _refused(fake, response_format={"type": "json_object"}) == {
        "message": "Unsupported parameter: 'response_format'. In the Responses API, this "
        "parameter has moved to 'text.format'. Try again with the new parameter.",
        "type": "invalid_request_error",
        "param": None,
        "code": "unsupported_parameter",
    }
    assert _refused(fake, max_completion_tokens=20)["message"].startswith(
        "Unsupported parameter: 'max_completion_tokens'. In the Responses API, this "
        "parameter has moved to 'max_output_tokens'."
    )
    nested = _refused(fake, stream=True, stream_options={"include_usage": True})
    assert (nested["message"], nested["param"]) == (
        "Unknown parameter: 'stream_options.include_usage'.",
        "stream_options.include_usage",
    )
    # every parameter of the API is known (openai's own types list them)
    known = {"model": "m", "input": "hi", "top_logprobs": 2, "safety_identifier": "u1"}
    assert httpx.post(fake.base_url + "/responses", json=known, timeout=10).status_code == 200


def test_the_fake_knows_the_parameters_openai_s_types_list() -> None:
    from llmguard_sdk.testing._responses import RESPONSES_PARAMETERS

    assert frozenset(RESPONSES_PARAMETERS) == _RESPONSES_FIELDS
