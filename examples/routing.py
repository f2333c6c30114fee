"""Deployment groups: one model served by several deployments, ranked per call.

Three deployments of one model answer on loopback FakeProviders. With ``strategy="latency"``
the slow one is measured and then left alone (a trickle of exploration, not bulk traffic);
with region tags a call's ``region=`` goes to its region first and fails over to the others;
with ``strategy="cheapest"`` each call goes to the cheapest deployment whose context window
holds it; with two groups, a call's ``model=`` names the group it goes to (as a LiteLLM
Router's ``model_name``), and a name of no group is refused.
"""

from llmguard_sdk import DeploymentGroup, Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.errors import UnknownModelError
from llmguard_sdk.testing import FakeProvider, Fault

QUESTION = [{"role": "user", "content": "Where is my parcel?"}]

with (
    FakeProvider(name="east") as east,
    FakeProvider(name="west") as west,
    FakeProvider(name="frankfurt") as frankfurt,
):
    fakes = (east, west, frankfurt)

    def deployments() -> list[OpenAICompatibleProvider]:
        return [
            OpenAICompatibleProvider(f.base_url, model="gpt-4o-mini", name=f.name) for f in fakes
        ]

    # latency: west answers in 0.4 s, the others at once
    west.always(Fault(latency=0.4))
    group = DeploymentGroup("gpt-4o-mini", deployments(), strategy="latency", seed=7)
    with Guard(group, environ={}) as guard:
        served = [guard.chat(QUESTION).route for _ in range(30)]
    counts = {name: served.count(name) for name in ("east", "west", "frankfurt")}
    print("latency: calls per deployment", counts)
    trickle = counts["west"] <= 3  # its first answer (the connection) and one measured
    print("latency: the slow deployment kept to a trickle" if trickle else f"west took {counts}")
    west.always(Fault())

    # regions: the caller's region first, the other regions as failover
    group = DeploymentGroup(
        "gpt-4o-mini",
        deployments(),
        strategy="round_robin",
        regions={"east": "us", "west": "us", "frankfurt": "eu"},
        region="us",
    )
    with Guard(group, environ={}) as guard:
        print("region us:", sorted({guard.chat(QUESTION).route for _ in range(4)}))
        print("region eu:", guard.chat(QUESTION, region="eu").route)
        frankfurt.always(Fault(status=503))
        print(
            "region eu, frankfurt down:",
            guard.chat(QUESTION, region="eu").route in {"east", "west"},
        )
    frankfurt.always(Fault())

    # cheapest: priced per route (route name / model); frankfurt is cheapest but small
    prices = PriceTable(
        {
            "east/gpt-4o-mini": Price(input=0.30, output=1.20),
            "west/gpt-4o-mini": Price(input=0.15, output=0.60),
            "frankfurt/gpt-4o-mini": Price(input=0.10, output=0.40),
        }
    )
    routes = deployments()
    routes[2].context_window = 50  # type: ignore[attr-defined]
    group = DeploymentGroup("gpt-4o-mini", routes, strategy="cheapest")
    with Guard(group, environ={}, prices=prices) as guard:
        print("cheapest, short question:", guard.chat(QUESTION, max_tokens=10).route)
        long = [{"role": "user", "content": "Summarise this: " + "lorem ipsum " * 40}]
        print("cheapest, long question:", guard.chat(long, max_tokens=10).route)

    # two groups: a call's model= names the group it goes to; no model=: the chain's first
    def group(name: str, model: str, *fakes: FakeProvider) -> DeploymentGroup:
        routes = [OpenAICompatibleProvider(f.base_url, model=model, name=f.name) for f in fakes]
        return DeploymentGroup(name, routes, strategy="round_robin")

    small = group("small", "gpt-4o-mini", east, west)
    big = group("big", "gpt-4o", frankfurt)
    with Guard([small, big], environ={}) as guard:
        print("model=big:", guard.chat(QUESTION, model="big").route)
        print("no model=:", guard.chat(QUESTION).route in {"east", "west"})
        try:
            guard.chat(QUESTION, model="bigg")
        except UnknownModelError as refused:
            print("model=bigg: refused, the groups are", refused.groups)
