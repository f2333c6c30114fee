"""A plain (not streamed) call whose answer broke after its provider's HTTP 200 (the status
line and headers came, the connection closed mid-body) is charged at least its prompt: the
provider took the request and bills the input it processed. A request that never reached the
provider (the connection refused) or that it reset before any answer costs nothing. Chat
completions, Claude's Messages and OpenAI's Responses; sync and async. Real Redis budgets,
the loopback FakeProvider."""

from __future__ import annotations

import pytest

from llmguard_sdk import LLMGuardError
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import MODES, chat_in_mode
from .test_budget_dropped_stream import APIS, PROMPT_USD, _charged, _guard, _route


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_an_answer_cut_after_its_200_is_charged_its_prompt(
    fake: FakeProvider, redis_url: str, redis_prefix: str, api: str, mode: str
) -> None:
    """Half the answer's body came after its 200 (before: $0 charged)."""
    fake.script(Fault(cut_stream_after=0))
    with _guard([_route(api, fake)], (redis_url, redis_prefix)) as guard:
        with pytest.raises(LLMGuardError) as failed:
            chat_in_mode(guard, mode, max_tokens=20)
        assert failed.value.status_code == 200  # type: ignore[attr-defined]
        assert len(fake.requests) == 1
        assert _charged(guard) == pytest.approx(PROMPT_USD)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("api", APIS)
def test_an_answer_reset_before_its_status_costs_nothing(
    fake: FakeProvider, redis_url: str, redis_prefix: str, api: str, mode: str
) -> None:
    """The provider read the request and reset the connection, no answer: $0."""
    fake.script(Fault(reset=True))
    with _guard([_route(api, fake)], (redis_url, redis_prefix)) as guard:
        with pytest.raises(LLMGuardError) as failed:
            chat_in_mode(guard, mode, max_tokens=20)
        assert failed.value.status_code is None  # type: ignore[attr-defined]
        assert _charged(guard) == 0


@pytest.mark.parametrize("api", APIS)
def test_a_call_whose_connection_was_refused_costs_nothing(
    redis_url: str, redis_prefix: str, api: str
) -> None:
    """The route's port refuses the connection: the request never reached a provider."""
    dead = FakeProvider(model="fake-model", name="primary")
    dead.start()
    dead.stop()
    with _guard([_route(api, dead)], (redis_url, redis_prefix)) as guard:
        with pytest.raises(LLMGuardError):
            chat_in_mode(guard, "sync", max_tokens=20)
        assert _charged(guard) == 0
