"""Prefix drift is tracked per template and tenant, as cache keys are made: per-tenant builders
of one template name, each with a stable prefix of its own, reported a drift at every switch
between tenants; one tenant's prefix changing is still drift, and memory stays bounded."""

from __future__ import annotations

from llmguard_sdk import scoped
from llmguard_sdk.prompts import DriftMonitor, PrefixDrift, PromptBuilder


def _builders(monitor: DriftMonitor) -> dict[str, PromptBuilder]:
    return {
        tenant: PromptBuilder(
            "support",
            instructions=f"You answer for {company}.",
            drift=monitor,
            min_cache_tokens=None,
        )
        for tenant, company in (("t-1", "Acme"), ("t-2", "Globex"))
    }


def test_per_tenant_builders_of_one_template_do_not_drift_by_turns() -> None:
    events: list[PrefixDrift] = []
    monitor = DriftMonitor([events.append])
    builders = _builders(monitor)
    for _ in range(3):
        for tenant, builder in builders.items():
            builder.build("hello", tenant=tenant)
        with scoped(tenant="t-1"):  # the scope's tenant, as build takes it by default
            builders["t-1"].build("again")
    assert events == []  # was 6 drifts, one at each switch of tenant


def test_one_tenants_prefix_changing_is_still_drift_and_names_the_tenant() -> None:
    events: list[PrefixDrift] = []
    monitor = DriftMonitor([events.append])
    builders = _builders(monitor)
    builders["t-1"].build("hello", tenant="t-1")
    builders["t-2"].build("hello", tenant="t-2")
    builders["t-1"].set_instructions("You answer for Acme. Mention the sale.")
    builders["t-1"].build("hello", tenant="t-1")
    assert [(e.template, e.tenant, e.changes) for e in events] == [("support", "t-1", 1)]
    PromptBuilder("support", instructions="New.", drift=monitor).build("hello")  # no tenant
    assert len(events) == 1  # the first call without a tenant
    monitor.forget("support")  # every tenant's
    builders["t-2"].set_instructions("Other.")
    builders["t-2"].build("hello", tenant="t-2")
    assert len(events) == 1


def test_the_monitor_remembers_a_bounded_number_of_template_and_tenant_pairs() -> None:
    events: list[PrefixDrift] = []
    monitor = DriftMonitor([events.append], max_templates=2)
    for tenant in ("a", "b", "c"):
        monitor.observe("support", "h1", "x", {}, tenant=tenant)
    monitor.observe("support", "h2", "y", {}, tenant="a")  # "a" was forgotten: a first call
    monitor.observe("support", "h2", "y", {}, tenant="c")  # "c" is remembered
    assert [e.tenant for e in events] == ["c"]
