"""A cascade escalates when its tier's routes failed, not on an error of the request itself:
that stops the tier's chain, and the cascade, as it stops a plain chain."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmguard_sdk import Cascade, Guard, OpenAICompatibleProvider, TaskRouter
from llmguard_sdk.errors import BadRequestError, ContentPolicyError, ProviderError
from llmguard_sdk.router import is_route_failure
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER


@pytest.fixture
def fakes() -> Iterator[dict[str, FakeProvider]]:
    servers = {n: FakeProvider(name=n, model=f"m-{n}") for n in ("mini", "backup", "big")}
    for server in servers.values():
        server.start()
    yield servers
    for server in servers.values():
        server.stop()


def _guard(fakes: dict[str, FakeProvider], **options: object) -> Guard:
    routes = [
        OpenAICompatibleProvider(s.base_url, model=s.model, name=s.name) for s in fakes.values()
    ]
    tasks = TaskRouter(
        tiers={"small": ["mini", "backup"], "large": ["big"]},
        cascades={"auto": Cascade(["small", "large"])},
        default="auto",
    )
    return Guard(routes, tasks=tasks, environ={}, retry=None, **options)  # type: ignore[arg-type]


def _served(fakes: dict[str, FakeProvider]) -> dict[str, int]:
    return {name: server.stats.requests for name, server in fakes.items()}


def test_a_request_the_provider_refused_as_wrong_is_raised_not_escalated(
    fakes: dict[str, FakeProvider],
) -> None:
    fakes["mini"].script(Fault(status=400, error_message="Invalid 'messages[0]': bad field"))
    with _guard(fakes) as guard, pytest.raises(BadRequestError):
        guard.chat(USER)
    # (was served by big: the 400 escalated past the tier's own fallback)
    assert _served(fakes) == {"mini": 1, "backup": 0, "big": 0}


def test_an_error_moves_on_hands_on_goes_to_the_tier_s_fallback(
    fakes: dict[str, FakeProvider],
) -> None:
    def moves_on(error: ProviderError) -> bool:
        return isinstance(error, ContentPolicyError) or is_route_failure(error)

    fakes["mini"].script(Fault(status=400, error_code="content_policy_violation"))
    with _guard(fakes, moves_on=moves_on) as guard:
        answer = guard.chat(USER)
    assert answer.route == "backup"
    assert answer.metadata["cascade"]["escalated_from"] == []
    assert _served(fakes) == {"mini": 1, "backup": 1, "big": 0}


def test_a_tier_whose_routes_all_failed_escalates(fakes: dict[str, FakeProvider]) -> None:
    fakes["mini"].script(Fault(status=503))
    fakes["backup"].script(Fault(status=503))
    with _guard(fakes) as guard:
        answer = guard.chat(USER)
    assert answer.route == "big"
    assert [t["reason"] for t in answer.metadata["cascade"]["escalated_from"]] == ["error"]
