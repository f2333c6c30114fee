"""What the transport seam answers for paths, methods and models it does not serve: OpenAI's
(or Anthropic's) 404, so the SDKs raise their ``NotFoundError``; ``models.retrieve`` works."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import httpx
import openai
import pytest

from llmguard_sdk import Guard
from llmguard_sdk.errors import RequestValidationError
from llmguard_sdk.testing import FakeProvider
from llmguard_sdk.transport import async_http_client, http_client

from .conftest import USER

MakeGuard = Callable[..., Guard]


def _sdk(guard: Guard) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="sk-not-sent", base_url="http://guard.test/v1", http_client=http_client(guard)
    )


def test_an_unknown_path_is_the_sdk_s_not_found_error(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    seam = _sdk(make_guard(fake))
    with pytest.raises(openai.NotFoundError) as caught:
        seam.embeddings.create(model="m", input="x")
    error = caught.value
    assert error.status_code == 404
    assert error.body == {
        "message": error.body["message"],  # type: ignore[index]
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert "POST /v1/embeddings" in error.message
    assert "chat/completions" in error.message  # says what it serves
    assert error.response.headers["x-llmguard-error"] == "RequestValidationError"
    assert error.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.NotFoundError):
        seam.completions.create(model="m", prompt="x")
    raw = http_client(make_guard(fake))
    assert raw.get("/v1/chat/completions").status_code == 404  # a served path, another method
    assert raw.post("/v1/chat/completions/x", json={"messages": USER}).status_code == 404
    assert fake.requests == []  # nothing reached the provider


def test_an_unknown_anthropic_path_is_anthropic_s_not_found(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    raw = http_client(make_guard(fake))
    answer = raw.post("/v1/messages/batches", json={"requests": []})
    assert answer.status_code == 404
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == "not_found_error"


def test_models_retrieve_answers_a_route_s_model_and_404s_another(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    seam = _sdk(make_guard(fake))
    model = seam.models.retrieve("fake-model")
    assert (model.id, model.object, model.owned_by) == ("fake-model", "model", "primary")
    with pytest.raises(openai.NotFoundError) as caught:
        seam.models.retrieve("gpt-9")
    assert caught.value.code == "model_not_found"
    assert "gpt-9" in caught.value.message
    assert [m.id for m in seam.models.list()] == ["fake-model"]


def test_async_seam_404s_and_retrieves(fake: FakeProvider, make_guard: MakeGuard) -> None:
    guard = make_guard(fake)

    async def run() -> tuple[str, int]:
        client = openai.AsyncOpenAI(
            api_key="sk-x", base_url="http://guard.test/v1", http_client=async_http_client(guard)
        )
        model = await client.models.retrieve("fake-model")
        try:
            await client.embeddings.create(model="m", input="x")
        except openai.NotFoundError as exc:
            return model.id, exc.status_code
        return model.id, 0

    assert anyio.run(run) == ("fake-model", 404)


def test_the_look_alike_client_raises_the_guard_s_error_for_an_unknown_path(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    from llmguard_sdk.transport import _client

    client = _client(make_guard(fake), "httpx", asynchronous=False, raise_errors=True)
    with pytest.raises(RequestValidationError, match="does not serve"):
        client.post("/v1/embeddings", json={"input": "x"})
    assert isinstance(client, httpx.Client)


def test_anthropic_s_sdk_lists_and_retrieves_models_in_its_shape(
    fake: FakeProvider, make_guard: MakeGuard
) -> None:
    # the model list and a model came in OpenAI's shape: anthropic's ModelInfo had no type,
    # display_name or created_at (None where its types promise a str and a datetime)
    import anthropic

    from llmguard_sdk.client import anthropic_client

    client = anthropic_client(make_guard(fake))  # anthropic's own, over the seam
    page = client.models.list()
    assert [(m.id, m.type, m.display_name) for m in page.data] == [
        ("fake-model", "model", "fake-model")
    ]
    assert (page.has_more, page.first_id, page.last_id) == (False, "fake-model", "fake-model")
    model = client.models.retrieve("fake-model")
    assert model.created_at.year == 1970
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.models.retrieve("claude-9")
    assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
