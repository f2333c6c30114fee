"""A call's ``model=`` selects a deployment group by its name, as a LiteLLM Router's
``model_name`` does: the call starts at that group (its deployments as its strategy ranks
them, then the chain's routes after it). A name of no group that every route would ignore is
refused. Two groups, "small" and "big", on loopback FakeProviders of their own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import openai
import pytest

from llmguard_sdk import (
    Budget,
    CallEvent,
    DeploymentGroup,
    Guard,
    OpenAICompatibleProvider,
    RequestValidationError,
    TaskRouter,
)
from llmguard_sdk.budget import Budgets, Price, PriceTable
from llmguard_sdk.errors import UnknownModelError
from llmguard_sdk.releases import Release
from llmguard_sdk.testing import FakeProvider, Fault

from .conftest import USER

Fakes = dict[str, FakeProvider]
NAMES = ("small-0", "small-1", "big-0", "big-1", "backup")


@pytest.fixture
def fakes() -> Iterator[Fakes]:
    servers = {name: FakeProvider(name=name, model=f"{name.split('-')[0]}-model") for name in NAMES}
    for server in servers.values():
        server.start()
    yield servers
    for server in servers.values():
        server.stop()


def _routes(fakes: Fakes, *names: str) -> list[OpenAICompatibleProvider]:
    return [
        OpenAICompatibleProvider(fakes[n].base_url, model=fakes[n].model, name=n) for n in names
    ]


def _chain(fakes: Fakes, **options: Any) -> list[DeploymentGroup | OpenAICompatibleProvider]:
    """small, then big, then a backup route: the chain a call without model= walks."""
    small = DeploymentGroup("small", _routes(fakes, "small-0", "small-1"), **options)
    big = DeploymentGroup("big", _routes(fakes, "big-0", "big-1"), **options)
    return [small, big, *_routes(fakes, "backup")]


def _served(fakes: Fakes) -> dict[str, int]:
    return {name: server.stats.requests for name, server in fakes.items() if server.stats.requests}


def test_model_names_a_group_and_the_call_goes_to_that_groups_deployments_only(
    fakes: Fakes,
) -> None:
    """``model="big"`` went to the chain's first route ("small"): a route's own model won,
    and the name was ignored."""
    with Guard(_chain(fakes, strategy="round_robin"), environ={}) as guard:
        routes = [guard.chat(USER, model="big").route for _ in range(4)]
        assert sorted(routes) == ["big-0", "big-0", "big-1", "big-1"]  # its strategy shares
        assert _served(fakes) == {"big-0": 2, "big-1": 2}
        # each deployment is sent its own model, not the group's name
        assert {r.body["model"] for n in ("big-0", "big-1") for r in fakes[n].requests} == {
            "big-model"
        }
        assert guard.chat(USER).route.startswith("small-")  # no model=: the chain, as before
        assert guard.chat(USER, model="small").route.startswith("small-")


def test_a_model_a_later_groups_deployments_serve_goes_to_that_group(fakes: Fakes) -> None:
    """``model="big-model"``, the model of the "big" group's deployments, went to the chain's
    first group ("small", which serves "small-model"): only a group's name selected it. The
    call starts at the first group whose deployment serves the model, or at the route outside
    groups that serves it (it started at the chain's start, "small")."""
    with Guard(_chain(fakes, strategy="round_robin"), environ={}) as guard:
        routes = [guard.chat(USER, model="big-model").route for _ in range(4)]
        streamed = guard.chat(USER, model="big-model", stream=True)
        with streamed:
            assert "".join(chunk.text for chunk in streamed) == "Echo: hello there"
        assert guard.chat(USER, model="small-model").route.startswith("small-")
        assert guard.chat(USER, model="backup-model").route == "backup"
    assert sorted(routes) == ["big-0", "big-0", "big-1", "big-1"]
    assert streamed.response.route.startswith("big-")
    assert {r.body["model"] for n in ("big-0", "big-1") for r in fakes[n].requests} == {"big-model"}


def test_async_and_streamed_calls_select_the_group_too(fakes: Fakes) -> None:
    async def calls() -> list[str]:
        async with Guard(_chain(fakes), environ={}) as guard:
            plain = await guard.achat(USER, model="big")
            stream = await guard.achat(USER, model="big", stream=True)
            async with stream:
                text = "".join([chunk.text async for chunk in stream])
            assert text == "Echo: hello there"
            return [plain.route, stream.response.route]

    routes = anyio.run(calls)
    with Guard(_chain(fakes), environ={}) as guard:
        with guard.chat(USER, model="big", stream=True) as stream:
            assert "".join(chunk.text for chunk in stream) == "Echo: hello there"
        routes.append(stream.response.route)
    assert all(route.startswith("big-") for route in routes)
    assert set(_served(fakes)) <= {"big-0", "big-1"}
    assert sum(fakes[n].stats.streams for n in ("big-0", "big-1")) == 2


def test_a_selected_group_fails_over_to_the_chain_after_it_never_before_it(
    fakes: Fakes,
) -> None:
    """The chain is the fallback configuration: the group's other deployments first, then
    the routes listed after the group; the entries before it are not tried (nor ranked)."""
    fakes["big-0"].always(Fault(status=503))
    fakes["big-1"].always(Fault(status=503))
    with Guard(_chain(fakes, strategy="ordered"), environ={}, retry=None) as guard:
        answer = guard.chat(USER, model="big")
    assert answer.route == "backup"
    assert _served(fakes) == {"big-0": 1, "big-1": 1, "backup": 1}


def test_a_name_of_no_group_that_every_route_would_ignore_is_refused(fakes: Fakes) -> None:
    events: list[CallEvent] = []
    with Guard(_chain(fakes), environ={}, hooks=[events.append]) as guard:
        with pytest.raises(UnknownModelError) as refused:
            guard.chat(USER, model="bigg")
        with pytest.raises(RequestValidationError, match=r"\['small', 'big'\]"):
            anyio.run(lambda: guard.achat(USER, model="bigg", stream=True))
        # a model a route serves keeps its meaning: the call starts at that route
        assert guard.chat(USER, model="backup-model").route == "backup"
    error = refused.value
    assert (error.model, error.groups) == ("bigg", ["small", "big"])
    assert error.models == ["small-model", "big-model", "backup-model"]
    assert "'bigg'" in str(error)
    assert sum(_served(fakes).values()) == 1  # the refused calls sent nothing
    assert [e.outcome for e in events] == ["error", "error", "ok"]  # reported as refused


def test_any_name_is_the_model_of_a_route_without_one_of_its_own(fakes: Fakes) -> None:
    """A route with no model is sent the call's model=: the name has a meaning, as before."""
    chain = _chain(fakes)
    chain[-1] = OpenAICompatibleProvider(fakes["backup"].base_url, name="backup")
    fakes["small-0"].always(Fault(status=503))
    fakes["small-1"].always(Fault(status=503))
    fakes["big-0"].always(Fault(status=503))
    fakes["big-1"].always(Fault(status=503))
    with Guard(chain, environ={}, retry=None) as guard:
        assert guard.chat(USER, model="llama-3").route == "backup"
    assert fakes["backup"].requests[-1].body["model"] == "llama-3"


def test_the_drop_in_client_selects_the_group_and_lists_the_groups(fakes: Fakes) -> None:
    with Guard(_chain(fakes), environ={}) as guard:
        client = guard.client()
        assert isinstance(client, openai.OpenAI)
        completion = client.chat.completions.create(model="big", messages=USER)
        assert completion.llmguard.route.startswith("big-")  # type: ignore[attr-defined]
        assert completion.model == "big-model"  # the deployment's, as it answered
        with client.chat.completions.create(model="big", messages=USER, stream=True) as chunks:
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        with pytest.raises(openai.NotFoundError) as refused:
            client.chat.completions.create(model="bigg", messages=USER)
        listed = [model.id for model in client.models.list()]
        assert client.models.retrieve("big").id == "big"
    assert isinstance(refused.value, UnknownModelError)
    assert refused.value.body["code"] == "model_not_found"  # type: ignore[index]
    assert listed == ["small", "big", "small-model", "big-model", "backup-model"]
    assert set(_served(fakes)) <= {"big-0", "big-1"}


def test_the_cache_keeps_a_groups_answers_apart_from_the_chains(fakes: Fakes) -> None:
    with Guard(_chain(fakes), environ={}, cache=True) as guard:
        first = guard.chat(USER)
        big = guard.chat(USER, model="big")
        again = guard.chat(USER, model="big")
    assert first.route.startswith("small-")
    assert big.route.startswith("big-")  # not the chain's cached answer
    assert again.route == "cache"


def test_task_routing_decides_the_calls_routes_and_refuses_no_name(fakes: Fakes) -> None:
    """With ``tasks=``, the call's tier decides (a group's name as model= would bypass the
    rules and cascades of every client that passes a model name): as before."""
    tasks = TaskRouter({"first": ["small", "backup"]})
    with Guard(_chain(fakes), environ={}, tasks=tasks) as guard:
        assert guard.chat(USER, model="big").route.startswith("small-")
        assert guard.chat(USER, model="anything").route.startswith("small-")


def test_a_release_starts_its_calls_at_the_group_and_refuses_no_name(fakes: Fakes) -> None:
    """Under a release the arm's chain starts at the group; a name no group has is served by
    the arm's chain (another version may name its groups otherwise)."""
    chain = _chain(fakes)
    release = Release("bot", "v1", chain, allow_alias=True)
    with Guard(release=release, environ={}, telemetry=False) as guard:
        assert guard.chat(USER, model="big").route.startswith("big-")
        assert guard.chat(USER, model="other").route.startswith("small-")


def test_a_budget_downgrade_serves_a_selected_groups_call_from_its_routes(
    fakes: Fakes,
) -> None:
    """The downgrade's routes lie before the selected group: they serve (as for a task's
    tier), rather than none."""
    prices = PriceTable(
        {
            "small-model": Price(input=0.001, output=0.001),
            "big-model": Price(input=1e6, output=1e6),
            "backup-model": Price(input=1e6, output=1e6),
        }
    )
    budget = Budget(limit_usd=1.0, on_exhausted="downgrade")
    budgets = Budgets([budget], prices=prices, downgrade_to=["small-0"])
    with Guard(_chain(fakes), environ={}, budgets=budgets) as guard:
        assert guard.chat(USER, model="big", max_tokens=10).route == "small-0"
    assert _served(fakes) == {"small-0": 1}


def test_without_groups_a_name_no_route_serves_is_served_by_the_routes_own_models(
    fakes: Fakes,
) -> None:
    """A Guard without deployment groups refuses no ``model=``: its routes serve their own
    models (a framework's default name through the drop-in client keeps working), and the
    README says the refusal is a Guard-with-groups one (it read as if a typo was refused on
    any Guard whose routes all have their own model)."""
    from pathlib import Path

    with Guard(_routes(fakes, "backup"), environ={}) as guard:
        answer = guard.chat(USER, model="gpt4o-mini")
    assert answer.route == "backup"
    assert fakes["backup"].requests[-1].body["model"] == "backup-model"
    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text("utf-8").split())
    assert "on a Guard with deployment groups whose routes all have their own" in readme
    assert "A Guard without groups refuses no name" in readme


def test_a_route_without_a_model_before_a_group_serves_the_groups_model_first(
    fakes: Fakes,
) -> None:
    """A route with no model of its own serves every model asked: ``model="big-model"`` with
    such a route before the "big" group is served by it, not by the group (the group, later in
    the chain, is its fallback). The selection had skipped the route: its call went to the
    group and the route was never tried."""
    generic = OpenAICompatibleProvider(fakes["backup"].base_url, name="generic")
    big = DeploymentGroup("big", _routes(fakes, "big-0", "big-1"))
    with Guard([generic, big], environ={}, retry=None) as guard:
        assert guard.chat(USER, model="big-model").route == "generic"
        fakes["backup"].always(Fault(status=503))
        assert guard.chat(USER, model="big-model").route.startswith("big-")
    assert fakes["backup"].requests[0].body["model"] == "big-model"


def test_a_groups_deployment_without_a_model_selects_its_group_for_any_model(
    fakes: Fakes,
) -> None:
    """A model no route before it names starts at the group whose deployment has no model of
    its own (that deployment serves every model asked), not at the chain's start."""
    small = DeploymentGroup("small", _routes(fakes, "small-0", "small-1"))
    anything = DeploymentGroup(
        "anything", [OpenAICompatibleProvider(fakes["big-0"].base_url, name="open")]
    )
    with Guard([small, anything], environ={}, retry=None) as guard:
        assert guard.chat(USER, model="llama-3").route == "open"
        assert guard.chat(USER, model="small-model").route.startswith("small-")


def test_a_model_a_route_outside_groups_serves_starts_the_call_at_that_route(
    fakes: Fakes,
) -> None:
    """``model="backup-model"``, served only by a route outside groups between two groups,
    started at the chain's start ("small", which serves its own model): it starts at that
    route, then the chain after it (the "big" group), never the entries before it; as a later
    group's model does. A route without a model of its own outside groups is where any model
    no route before it names starts."""
    small = DeploymentGroup("small", _routes(fakes, "small-0", "small-1"))
    big = DeploymentGroup("big", _routes(fakes, "big-0", "big-1"))
    (backup,) = _routes(fakes, "backup")
    with Guard([small, backup, big], environ={}, retry=None) as guard:
        assert guard.chat(USER, model="backup-model").route == "backup"
        assert guard.chat(USER, model="small-model").route.startswith("small-")
        fakes["backup"].always(Fault(status=503))
        assert guard.chat(USER, model="backup-model").route.startswith("big-")
    assert sum(fakes[n].stats.requests for n in ("small-0", "small-1")) == 1
    assert [r.body["model"] for r in fakes["backup"].requests] == ["backup-model"] * 2
    fakes["backup"].always(None)
    generic = OpenAICompatibleProvider(fakes["backup"].base_url, name="generic")
    small = DeploymentGroup("small", _routes(fakes, "small-0", "small-1"))
    big = DeploymentGroup("big", _routes(fakes, "big-0", "big-1"))
    with Guard([small, generic, big], environ={}, retry=None) as guard:
        assert guard.chat(USER, model="llama-3").route == "generic"
        assert guard.chat(USER, model="big-model").route == "generic"  # it serves any model
    assert fakes["backup"].requests[-1].body["model"] == "big-model"
    assert sum(fakes[n].stats.requests for n in ("small-0", "small-1")) == 1  # not tried


def test_a_release_starts_at_its_route_outside_groups_that_serves_the_model(
    fakes: Fakes,
) -> None:
    small = DeploymentGroup("small", _routes(fakes, "small-0", "small-1"))
    (backup,) = _routes(fakes, "backup")
    release = Release("bot", "v1", [small, backup], allow_alias=True)
    with Guard(release=release, environ={}, telemetry=False) as guard:
        assert guard.chat(USER, model="backup-model").route == "backup"
        assert guard.chat(USER).route.startswith("small-")
