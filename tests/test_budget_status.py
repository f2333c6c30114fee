"""What is left of a budget, asked in public: ``llmguard budget status`` (and the Guard's
``budget_status``) show each counter's limit, settled spend, holds and reset time."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider, RequestValidationError
from llmguard_sdk.budget import Budget, Budgets, BudgetUnavailableError, Price, PriceTable
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.store import RedisStore
from llmguard_sdk.testing import FakeProvider

from .conftest import USER

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})
CALL_USD = (6 * 100 + 3 * 200) / 1e6  # "hello there": 6 input and 3 output tokens


def _guard(fake: FakeProvider, **options: object) -> Guard:
    return Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        budgets=Budgets(
            [Budget(limit_usd=1.0, scope="tenant"), Budget(limit_usd=50.0, window="month")],
            prices=PRICES,
        ),
        environ={},
        **options,  # type: ignore[arg-type]
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmguard_sdk.cli", "budget", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_command_reads_a_tenants_counters_from_redis(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    _reads_counters(fake, redis_url, redis_prefix)


def test_the_command_reads_counters_from_redis_cluster(
    fake: FakeProvider, redis_cluster_url: str, cluster_prefix: str
) -> None:
    """``--store redis+cluster://...`` was refused ("bad Redis URL")."""
    _reads_counters(fake, redis_cluster_url, cluster_prefix)


def _reads_counters(fake: FakeProvider, redis_url: str, redis_prefix: str) -> None:
    guard = _guard(fake, store=redis_url, key_prefix=redis_prefix)
    try:
        guard.chat(USER, max_tokens=3, tenant="acme")
        guard.chat(USER, max_tokens=3, tenant="acme")
        guard.chat(USER, max_tokens=3, tenant="other")
    finally:
        guard.close()
    common = ["status", "--store", redis_url, "--prefix", redis_prefix]
    done = _cli(*common, "--tenant", "acme", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = json.loads(done.stdout)["counters"]
    assert row["scope"] == "tenant:acme"
    assert row["limit_usd"] == 1.0
    assert row["spent_usd"] == pytest.approx(2 * CALL_USD)
    assert row["held_usd"] == 0
    assert time.time() < row["resets_at"] <= time.time() + 86400
    every = json.loads(_cli(*common, "--json").stdout)["counters"]
    assert len(every) == 3  # two tenants' daily counters and the global monthly one
    assert sum(r["spent_usd"] for r in every if r["limit_usd"] == 50.0) == pytest.approx(
        3 * CALL_USD
    )
    text = _cli(*common, "--tenant", "acme").stdout
    assert "tenant:acme" in text
    assert "$   1.000000" in text
    nobody = _cli(*common, "--tenant", "nobody")
    assert nobody.returncode == 1  # (as cost report of no calls)
    assert "no budget counters found for tenant nobody" in nobody.stderr


def test_the_command_says_when_redis_does_not_answer() -> None:
    done = _cli("status", "--store", "redis://127.0.0.1:1/0")
    assert done.returncode == 1
    assert "did not answer" in done.stderr  # an error line: stdout stays the output
    assert not done.stdout


def test_the_guard_tells_what_is_left_sync_and_async(fake: FakeProvider) -> None:
    guard = _guard(fake)
    assert guard.budget_status(tenant="acme")[0]["spent_usd"] == 0
    guard.chat(USER, max_tokens=3, tenant="acme")
    rows = guard.budget_status(tenant="acme")
    assert [row["scope"] for row in rows] == ["tenant:acme", "global"]
    tenant, overall = rows
    assert (tenant["limit_usd"], overall["limit_usd"]) == (1.0, 50.0)
    assert tenant["spent_usd"] == pytest.approx(CALL_USD)
    assert tenant["held_usd"] == 0
    assert tenant["window"] == "day"
    assert overall["resets_at"] > tenant["resets_at"] > time.time()  # month after the day
    assert [r["scope"] for r in guard.budget_status()] == ["global"]  # no tenant: global only
    assert asyncio.run(guard.abudget_status(tenant="acme")) == guard.budget_status(tenant="acme")
    guard.close()
    plain = Guard(OpenAICompatibleProvider(fake.base_url, model="fake-model"), environ={})
    assert plain.budget_status(tenant="acme") == []  # no budgets: nothing to tell
    plain.close()


def test_the_guard_says_budgets_are_unavailable_when_redis_does_not_answer(
    fake: FakeProvider, tmp_path: Path
) -> None:
    """It raised redis-py's ConnectionError, an exception outside the SDK's tree."""
    store = RedisStore("redis://127.0.0.1:1/0", socket_timeout=0.25, journal_dir=str(tmp_path))
    guard = _guard(fake, store=store)
    try:
        with pytest.raises(BudgetUnavailableError) as raised:
            guard.budget_status(tenant="acme")
        assert raised.value.scope == "*"
        assert math.isnan(raised.value.spent_usd)
        with pytest.raises(BudgetUnavailableError):
            asyncio.run(guard.abudget_status(tenant="acme"))
    finally:
        guard.close()


def test_a_scope_keyword_it_does_not_know_is_refused(fake: FakeProvider) -> None:
    """``budget_status(tennant="acme")`` answered the global counter alone, as if no tenant
    had been named: a typo read as another scope's spend."""
    guard = _guard(fake)
    try:
        with pytest.raises(RequestValidationError, match="tennant"):
            guard.budget_status(tennant="acme")  # type: ignore[call-arg]
        with pytest.raises(RequestValidationError, match="tennant"):
            asyncio.run(guard.abudget_status(tennant="acme"))  # type: ignore[call-arg]
        assert [row["scope"] for row in guard.budget_status(tenant="acme")] == [
            "tenant:acme",
            "global",
        ]
    finally:
        guard.close()


def test_a_tenants_named_budget_is_found_and_another_scopes_is_not(
    fake: FakeProvider, redis_url: str, redis_prefix: str
) -> None:
    """``--tenant`` looked for counters named ``tenant.*``: a tenant budget given a
    ``name=`` was never shown, and a user budget of that id could pass for one."""
    budgets = [
        Budget(limit_usd=1.0, scope="tenant", name="gold"),
        Budget(limit_usd=2.0, scope="user", name="vip"),
    ]
    guard = Guard(
        OpenAICompatibleProvider(fake.base_url, model="fake-model", name="primary"),
        budgets=Budgets(budgets, prices=PRICES),
        store=redis_url,
        key_prefix=redis_prefix,
        environ={},
    )
    try:
        guard.chat(USER, max_tokens=3, tenant="acme", user="acme")
    finally:
        guard.close()
    store = RedisStore(redis_url, key_prefix=redis_prefix)
    try:
        (spec,) = RedisBudgetBackend(store).stored_counters(tenant="acme")
    finally:
        store.close()
    assert (spec.scope, spec.limit) == ("tenant:acme", 1_000_000_000)
