"""Redis refusing the store's user, a fault of its configuration that the next command meets
again: an ACL user without the stages' keys or commands (NOPERM; inside a script, an ERR that
names the ACL), and refused credentials (WRONGPASS, NOAUTH).

A refused permission was an outage: every stage of the store paused, logged as "Redis
unavailable" once a second (each probe's answer ended the outage, the refusal began the
next), while Redis served everything else. It is a refusal now: nothing paused, logged once
per stage as an error that names the command's keys and the ACL the user lacks. Refused
credentials stay an outage (no command can run), logged as an error that names them.

Real Redis: ACL users of each test's own (``ACL SETUSER``, deleted afterwards) on the shared
server; a redis-server of the test's own where a test flushes its scripts or sets a password.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from redis_cluster import RedisServer

from llmguard_sdk._state.health import Outage, forbidden, refused
from llmguard_sdk._state.steps import Batch, answer, run
from llmguard_sdk.budget import BudgetUnavailableError
from llmguard_sdk.budget.redis import RedisBudgetBackend
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.errors import StoreUnavailableError
from llmguard_sdk.ratelimit import RateLimit
from llmguard_sdk.ratelimit.redis import RedisRateLimiter
from llmguard_sdk.store import RedisScripts, RedisStore
from tests.conftest import RawRedis
from tests.test_cache import FAQ, ask
from tests.test_cache import answer as cached
from tests.test_redis_refusals import HOLD, SPEC

MakeUser = Callable[..., str]
LIMITS = {"route": [RateLimit(rpm=100)]}


def _users(url: str) -> Iterator[MakeUser]:
    """``make(*rules, password=...)``: the URL of a Redis user of the caller's own at ``url``
    (``ACL SETUSER name reset on >password *rules``); every one is deleted afterwards."""
    admin: RawRedis = redis.Redis.from_url(url)
    made: list[str] = []

    def make(*rules: str, password: str = "right", login: str = "") -> str:
        name = f"llmguard-test-{uuid.uuid4().hex[:12]}"
        admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{password}", *rules)
        made.append(name)
        parts = urlsplit(url)
        where = f"{parts.hostname}:{parts.port}"
        return parts._replace(netloc=f"{name}:{login or password}@{where}").geturl()

    try:
        yield make
    finally:
        for name in made:
            admin.execute_command("ACL", "DELUSER", name)
        admin.close()


@pytest.fixture
def acl_user(redis_url: str) -> Iterator[MakeUser]:
    """Users of this test's own on the shared Redis (see :func:`_users`)."""
    yield from _users(redis_url)


@pytest.fixture
def own_redis(redis_server: RedisServer) -> Iterator[tuple[str, MakeUser]]:
    """A redis-server of this test's own (its scripts may be flushed), and its users."""
    for make in _users(redis_server.url):
        yield redis_server.url, make


def _messages(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "llmguard_sdk"]


RULES = {
    "keys": ("~elsewhere:*", "+@all"),  # the stages' keys: NOPERM of EVALSHA's keys
    "command": ("~{prefix}:*", "+@all", "-evalsha"),  # NOPERM of EVALSHA itself
}


@pytest.mark.parametrize("kind", sorted(RULES))
def test_a_user_without_permission_is_told_once_and_pauses_nothing(
    acl_user: MakeUser, redis_prefix: str, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """A rate limiter whose user may not use its keys (or EVALSHA) decides locally, each
    decision, with nothing paused; the error is logged once, with the keys and the ACL."""
    url = acl_user(*(rule.format(prefix=redis_prefix) for rule in RULES[kind]))
    store = RedisStore(url, key_prefix=redis_prefix)
    limiter = RedisRateLimiter(store, LIMITS)
    try:
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            for _ in range(3):
                assert limiter.reserve("route").allowed  # (this process's share)
        assert (store.health.failures, store.health.outages) == (0, 0)  # nothing paused
        ((level, text),) = _messages(caplog)
        assert level == "ERROR"
        assert text.startswith("rate limits: Redis refused a command (NOPERM ")
        assert "evalsha" in text if kind == "command" else "one of the keys" in text
        assert f"the command's key: {redis_prefix}:rl:" in text
        grant = "lacks an ACL permission: grant it the keys under the store's key_prefix"
        assert f"{grant} ('~{redis_prefix}:*')" in text
        assert "unavailable" not in text
    finally:
        store.close()


def test_a_fail_closed_budget_without_permission_says_so(
    acl_user: MakeUser, redis_prefix: str, tmp_path: Path
) -> None:
    """A fail-closed budget refuses the call saying the user lacks a permission (not that
    Redis cannot be reached), with nothing paused; so does a status read."""
    url = acl_user("~elsewhere:*", "+@all")
    store = RedisStore(url, key_prefix=redis_prefix, journal_dir=str(tmp_path))
    backend = RedisBudgetBackend(store, name="acl")
    try:
        result = backend.reserve("r1", [SPEC], **HOLD)
        assert (result.allowed, result.unavailable, result.retry_after) == (False, True, 0.0)
        assert "Redis refused the budget script (NOPERM " in result.detail
        assert "lacks an ACL permission" in result.detail
        with pytest.raises(BudgetUnavailableError) as failed:
            backend.status([SPEC])
        assert "lacks an ACL permission" in str(failed.value)
        assert store.health.failures == 0
    finally:
        store.close()


def test_a_script_whose_own_command_is_refused_is_a_permission_refusal(
    acl_user: MakeUser, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A script's own command on a key the user may not use is refused with an ERR (naming
    the ACL), not NOPERM: it is told as a missing permission all the same."""
    store = RedisStore(acl_user(f"~{redis_prefix}:*", "+@all"), key_prefix=redis_prefix)
    scripts = RedisScripts(store, "return redis.call('GET', 'elsewhere:' .. ARGV[1])")
    outage = Outage("test stage", "deciding locally", store)
    try:
        with pytest.raises(redis.ResponseError) as failed:
            run(answer(scripts.command(0, [store.key("t", "x", "y")], ["z"])))
        assert refused(failed.value)
        assert forbidden(failed.value)
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            outage.failed(failed.value)
        ((level, text),) = _messages(caplog)
        assert level == "ERROR"
        assert "lacks an ACL permission" in text
        assert store.health.failures == 0
    finally:
        store.close()


@pytest.mark.parametrize("fault", ["wrong password", "disabled user"])
def test_refused_credentials_are_an_outage_that_says_so(
    acl_user: MakeUser, redis_prefix: str, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    """WRONGPASS: no command of the store's can run, so Redis is paused as in an outage (one
    failed attempt per pause, not per call), logged once as an error naming the credentials
    (it read "Redis unavailable", a warning, as a network fault does)."""
    if fault == "wrong password":
        url = acl_user(f"~{redis_prefix}:*", "+@all", login="wrong")
    else:
        url = acl_user(f"~{redis_prefix}:*", "+@all", "off")
    store = RedisStore(url, key_prefix=redis_prefix, retry_pause=5.0)
    limiter = RedisRateLimiter(store, LIMITS)
    try:
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            for _ in range(3):
                assert limiter.reserve("route").allowed
        assert (store.health.failures, store.health.outages) == (1, 1)  # paused, once
        ((level, text),) = _messages(caplog)
        assert level == "ERROR"
        assert text.startswith("rate limits: Redis refused the store's credentials (")
        assert "check the username and password of the store's URL" in text
    finally:
        store.close()


def test_every_refusal_of_a_credentials_outage_names_them(
    acl_user: MakeUser, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    """A fail-closed budget whose Redis refuses the store's credentials names them in every
    refusal while Redis is paused, not only in the first (the others read as Redis away);
    once Redis takes them, nothing of that outage is told."""
    admin: RawRedis = redis.Redis.from_url(redis_url)
    url = acl_user(f"~{redis_prefix}:*", "+@all", login="later")
    name = urlsplit(url).username
    store = RedisStore(url, key_prefix=redis_prefix, journal_dir=str(tmp_path), retry_pause=0.2)
    backend = RedisBudgetBackend(store, name="credentials")
    try:
        results = [backend.reserve(f"r{i}", [SPEC], **HOLD) for i in range(3)]
        assert (store.health.failures, store.health.outages) == (1, 1)  # paused, once
        for result in results:
            assert (result.allowed, result.unavailable) == (False, True)
            assert "Redis refused the store's credentials (" in result.detail
            assert "check the username and password of the store's URL" in result.detail
        assert store.health.why.startswith("Redis refused the store's credentials")
        admin.execute_command("ACL", "SETUSER", name, ">later")  # (the URL's password now)
        time.sleep(0.3)  # (the pause ends: the next reservation reaches Redis)
        assert backend.reserve("ok", [SPEC], **HOLD).allowed
        assert (store.health.failures, store.health.why) == (0, "")
    finally:
        store.close()
        admin.close()


def test_no_password_where_one_is_needed_says_so(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """NOAUTH (a server with a password, a URL without one): as refused credentials; a
    fail-closed budget's refusal names them too."""
    admin: RawRedis = redis.Redis.from_url(redis_server.url)
    admin.config_set("requirepass", "s3cret")
    store = RedisStore(redis_server.url, key_prefix="noauth", journal_dir=str(tmp_path))
    try:
        with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
            result = RedisBudgetBackend(store).reserve("r1", [SPEC], **HOLD)
        assert (result.allowed, result.unavailable) == (False, True)
        assert "Redis refused the store's credentials" in result.detail
        assert store.health.failures == 1
        ((level, text),) = _messages(caplog)
        assert level == "ERROR"
        assert "Redis refused the store's credentials (" in text
    finally:
        store.close()
        admin.close()


def _unique_script() -> str:
    return f"-- {uuid.uuid4().hex}\nreturn redis.call('INCR', KEYS[1])"


def test_scripts_redis_lacks_run_for_a_user_who_may_not_load_them(
    acl_user: MakeUser, redis_url: str, redis_prefix: str
) -> None:
    """The commands of a script Redis lacks go again with the script (EVAL). They were sent
    after a SCRIPT LOAD, which a user without ``script|load`` was refused: every command of
    the round failed, those that had run too (their effect applied, their answer lost), and
    Redis was paused."""
    admin: RawRedis = redis.Redis.from_url(redis_url)
    store = RedisStore(acl_user(f"~{redis_prefix}:*", "+@all", "-script"), key_prefix=redis_prefix)
    known, unknown = _unique_script(), _unique_script()
    admin.script_load(known)
    scripts = RedisScripts(store, known, unknown)
    key = store.key("t", "x", "n")
    steps = [answer(scripts.command(0, [key])), answer(scripts.command(1, [key]))]
    try:
        assert [outcome.result() for outcome in Batch(steps).run()] == [1, 2]
        assert run(answer(scripts.command(1, [key]))) == 3  # (Redis keeps it now)
        assert store.health.failures == 0
    finally:
        store.close()
        admin.close()


def test_a_cache_clear_goes_on_across_a_script_flush(
    own_redis: tuple[str, MakeUser],
) -> None:
    """The response cache's clear runs its scripts as every stage does (they went through
    redis-py's own script objects, which reload a script with SCRIPT LOAD): a SCRIPT FLUSH
    between calls breaks neither it nor the calls after it, also for a user who may not
    send SCRIPT LOAD (whose clear failed: "Redis could not be reached")."""
    url, make = own_redis
    admin: RawRedis = redis.Redis.from_url(url)
    for user in (url, make("~*", "+@all", "-script")):
        cache = ResponseCache(RedisStore(user, key_prefix="flushed"), sync_interval=0.0)
        try:
            assert cache.store(ask(FAQ), cached("a"))
            admin.script_flush()
            cache.clear()
            assert cache.lookup(ask(FAQ)) is None
            admin.script_flush()
            assert cache.store(ask(FAQ), cached("b"))
            admin.script_flush()
            hit = cache.lookup(ask(FAQ))
            assert hit is not None
            assert hit.response.text == "b"
            admin.script_flush()
            cache.clear()
            assert cache.lookup(ask(FAQ)) is None
        finally:
            cache.close()
    admin.close()


def test_a_cache_clear_refused_says_why(acl_user: MakeUser, redis_prefix: str) -> None:
    """A clear that Redis refused for a missing permission raises StoreUnavailableError saying
    so (it said "Redis could not be reached"), and pauses nothing."""
    store = RedisStore(acl_user("~elsewhere:*", "+@all"), key_prefix=redis_prefix)
    cache = ResponseCache(store, sync_interval=0.0)
    try:
        with pytest.raises(StoreUnavailableError) as failed:
            cache.clear()
        text = str(failed.value)
        assert "could not be reached" not in text
        assert "Redis refused it (NOPERM " in text
        assert f"('~{redis_prefix}:*')" in text
        assert store.health.failures == 0
    finally:
        cache.close()
