"""The store: key scheme, tenant hashing, and a real Redis connection."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard, MemoryStore, RedisStore
from llmguard_sdk.cache import ResponseCache
from llmguard_sdk.store import RedisClusterStore, hash_id, open_store
from tests.conftest import crowd_a_small_pool


def test_memory_is_the_default() -> None:
    guard = Guard(environ={})
    assert isinstance(guard.store, MemoryStore)


def test_key_scheme_has_prefix_kind_and_hash_tag() -> None:
    store = MemoryStore("app1")
    assert store.key("rl", "openai.gpt-4o", "tokens") == "app1:rl:{openai.gpt-4o}:tokens"
    with pytest.raises(ValueError, match="hash_id"):
        store.key("budget", "tenant with spaces")


def test_tenant_ids_are_hashed_stably() -> None:
    assert hash_id("acme") == hash_id("acme")
    assert hash_id("acme") != hash_id("acme2")
    assert "acme" not in hash_id("acme")
    assert len(hash_id("acme")) == 16


def test_redis_store_talks_to_a_real_redis(redis_url: str, redis_prefix: str) -> None:
    guard = Guard(store=redis_url, key_prefix=redis_prefix, environ={})
    store = guard.store
    assert isinstance(store, RedisStore)
    assert store.ping()
    key = store.key("probe", hash_id("tenant-a"), "value")
    store.client.set(key, b'{"ok": true}', ex=60)
    assert store.client.get(key) == b'{"ok": true}'
    guard.close()


def test_redis_store_from_environment(redis_url: str, redis_prefix: str) -> None:
    guard = Guard(environ={"LLMGUARD_STORE": redis_url, "LLMGUARD_KEY_PREFIX": redis_prefix})
    assert isinstance(guard.store, RedisStore)
    assert guard.store.key_prefix == redis_prefix
    guard.close()


def test_unreachable_redis_does_not_stop_startup() -> None:
    store = open_store("redis://127.0.0.1:1/0")
    assert isinstance(store, RedisStore)
    assert store.ping() is False
    store.close()


@pytest.mark.parametrize("bad", ["mongodb://x", "redis-cluster", "http://127.0.0.1:6379"])
def test_bad_store_spec_is_a_configuration_error(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        open_store(bad)


def test_password_is_redacted_in_repr() -> None:
    store = RedisStore("redis://user:hunter2@127.0.0.1:6379/0")
    assert "hunter2" not in repr(store)


def test_more_callers_than_connections_wait_for_one(redis_url: str, redis_prefix: str) -> None:
    """Callers beyond ``max_connections`` (threads and async tasks) wait (at most
    ``pool_timeout``) for a connection of the pool; a full pool is not Redis down (every stage
    would go local, fail-closed budgets refusing every call)."""
    store = RedisStore(redis_url, key_prefix=redis_prefix, max_connections=2, socket_timeout=5)
    crowd_a_small_pool(store)
    assert store.health.outages == 0


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "50", 10_001])
def test_max_connections_must_be_a_positive_integer(bad: object) -> None:
    # 10_001 and more: redis-py's blocking pool fills a queue with that many slots when it is
    # built (10**9: the constructor ran for most of an hour, its memory growing to gigabytes)
    # 0 (or less) made redis-py's blocking pool fill its unbounded queue forever: the
    # constructor never returned, its memory growing
    with pytest.raises(ConfigurationError, match="max_connections"):
        RedisStore("redis://127.0.0.1:1/0", max_connections=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [float("inf"), 1e10, float("nan"), 0, -1])
def test_socket_timeout_must_be_a_bounded_positive_number(bad: float) -> None:
    # inf (or 1e10) was accepted, then every Redis operation raised OverflowError (not a Redis
    # error: no stage fell back, and ping(), which promises False, raised it too)
    with pytest.raises(ConfigurationError, match="socket_timeout"):
        RedisStore("redis://127.0.0.1:1/0", socket_timeout=bad)


@pytest.mark.parametrize("bad", [123, b"app", None, ""])
def test_a_key_prefix_that_is_no_text_is_a_configuration_error(bad: Any) -> None:
    # 123 raised AttributeError ('int' object has no attribute 'replace'), b"app" TypeError
    with pytest.raises(ConfigurationError, match="key_prefix"):
        MemoryStore(bad)
    with pytest.raises(ConfigurationError, match="key_prefix"):
        open_store("redis://127.0.0.1:1/0", key_prefix=bad)


@pytest.mark.parametrize("cls", [RedisStore, RedisClusterStore])
@pytest.mark.parametrize("url", [123, None, b"redis://x"])
def test_a_url_that_is_no_text_is_a_configuration_error(cls: type[RedisStore], url: Any) -> None:
    # AttributeError ('int' object has no attribute 'decode') or TypeError from urllib
    with pytest.raises(ConfigurationError, match="url"):
        cls(url)


def test_a_journal_dir_that_is_no_path_is_a_configuration_error() -> None:
    # taken as given, then the budgets' journal failed on it (os.path on an int)
    with pytest.raises(ConfigurationError, match="journal_dir"):
        RedisStore("redis://127.0.0.1:1/0", journal_dir=123)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["local_share", "retry_pause"])
def test_a_bool_is_no_share_or_pause(name: str) -> None:
    # bool is an int: local_share=True was a share of 1 (each process the whole limit)
    with pytest.raises(ConfigurationError, match=name):
        RedisStore("redis://127.0.0.1:1/0", **{name: True})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [None, 6379, ["memory"]])
def test_a_store_spec_that_is_not_text_is_a_configuration_error(bad: object) -> None:
    # open_store called .strip() on it: AttributeError (ResponseCache(store=None) too)
    with pytest.raises(ConfigurationError, match="store"):
        open_store(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="store"):
        ResponseCache(store=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "query",
    [
        "max_connections=0",
        "max_connections=1000000000",
        "socket_timeout=inf",
        "socket_connect_timeout=1e12",
        "timeout=inf",
    ],
)
def test_the_urls_pool_options_are_checked_too(query: str) -> None:
    # the URL's query wins over the keywords: max_connections=0 there hung the constructor,
    # an infinite timeout there made every operation raise OverflowError
    with pytest.raises(ConfigurationError, match=query.partition("=")[0]):
        RedisStore(f"redis://127.0.0.1:1/0?{query}")


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("redis://127.0.0.1:6379/0?prefix=app", "prefix"),  # a TypeError at the first call
        ("redis://127.0.0.1:6379/0?health_check_interval=-5", "health_check_interval"),
        ("redis://127.0.0.1:6379/0?health_check_interval=1.5", "health_check_interval"),
        ("redis://127.0.0.1:6379/0?socket_keepalive=maybe", "socket_keepalive"),
        ("redis://127.0.0.1:6379/0?retry_on_error=x", "retry_on_error"),  # the store's own
        ("redis://127.0.0.1:6379/0?ssl_cert_reqs=none", "ssl_cert_reqs"),  # TLS options: rediss
        ("redis://127.0.0.1:6379/0?db=-1", "db"),
        ("redis+cluster://127.0.0.1:7000?prefix=app", "prefix"),  # silently dropped
        ("redis+cluster://127.0.0.1:7000?password=x", "password"),
        ("redis+cluster://127.0.0.1:7000?health_check_interval=5", "health_check_interval"),
    ],
)
def test_a_urls_unknown_or_bad_option_is_refused_when_the_store_is_built(
    url: str, name: str
) -> None:
    # redis-py passes a query option it does not know on to its connection class: the store
    # was built, then its first command raised TypeError (read as a bug, not Redis down)
    with pytest.raises(ConfigurationError, match=name):
        open_store(url)


def test_a_urls_known_options_are_taken(redis_url: str, redis_prefix: str) -> None:
    query = "health_check_interval=5&socket_keepalive=true&client_name=app&socket_timeout=2"
    store = RedisStore(f"{redis_url}?{query}", key_prefix=redis_prefix)
    try:
        assert store.ping()
        assert store.client.client_getname() == "app"
        kwargs = store.client.connection_pool.connection_kwargs
        assert (kwargs["health_check_interval"], kwargs["socket_keepalive"]) == (5, True)
    finally:
        store.close()


def test_a_password_in_the_urls_query_is_redacted_too() -> None:
    # redis-py takes ?password=... as the password: repr() (and a ResponseCache's) showed it
    store = RedisStore("redis://127.0.0.1:6379/0?db=0&password=hunter2&client_name=x")
    assert "hunter2" not in repr(store)
    assert "hunter2" not in repr(ResponseCache(store=store))
    assert "client_name=x" in repr(store)
    with pytest.raises(ConfigurationError) as refused:
        RedisStore("redis://127.0.0.1:6379/0?password=hunter2&max_connections=0")
    assert "hunter2" not in str(refused.value)
