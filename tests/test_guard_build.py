"""Building and closing a Guard: what it prepares before its first call, and what its close
leaves closed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from llmguard_sdk import ConfigurationError, Guard, OpenAICompatibleProvider

from .conftest import genai_prices_or_skip

SOURCE = str(Path(__file__).resolve().parent.parent / "src")

_WARMED = """
import json, threading
from llmguard_sdk import Guard, OpenAICompatibleProvider, tokens
before = tokens._encoding_loaded, sorted(tokens._others)
routes = [
    OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="gpt-4o-mini", name="a"),
    OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="text-davinci-003", name="b"),
]
with tokens._lock:  # the load cannot finish while the Guard is built: built all the same
    guard = Guard(routes, environ={}, telemetry=False, max_input_tokens=100_000)
    during = tokens._encoding_loaded
loader = [t for t in threading.enumerate() if t.name == "llmguard-tokenizer"]
for thread in loader:
    thread.join(60)
print(json.dumps({"before": before, "during": during, "loaders": len(loader),
                  "loaded": tokens._encoding_loaded, "others": sorted(tokens._others)}))
guard.close()
"""


def test_a_guard_loads_the_encodings_of_its_routes_when_it_is_built() -> None:
    """The first token count loaded tiktoken's encoding (half a second) inside the first
    call's deadline; a Guard with a stage that counts (here ``max_input_tokens``) now starts
    loading cl100k_base and its routes' encodings as it is built, in a thread of its own,
    without waiting for them (a fresh interpreter, so that nothing loaded them before)."""
    env = {**os.environ, "PYTHONPATH": SOURCE}
    found = subprocess.run(
        [sys.executable, "-c", _WARMED], capture_output=True, text=True, env=env, timeout=120
    )
    assert found.returncode == 0, found.stderr
    report = json.loads(found.stdout.strip().splitlines()[-1])
    assert report["before"] == [False, []]  # nothing loaded by the import
    assert report["during"] is False  # the Guard did not wait for the load (it held)
    assert report["loaders"] == 1
    assert report["loaded"] is True  # cl100k_base, every count's fallback
    assert {"o200k_base", "p50k_base"} <= set(report["others"])  # the routes' own, probed


_UNCOUNTED = """
import json, sys, threading
from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.testing import FakeProvider
with FakeProvider() as fake:
    route = OpenAICompatibleProvider(fake.base_url, api_key="k", model="gpt-4o-mini", name="a")
    options = {"none": {}, "limit": {"max_input_tokens": 100_000}}[sys.argv[1]]
    guard = Guard(route, environ={}, telemetry=False, **options)
    loaders = [t for t in threading.enumerate() if t.name == "llmguard-tokenizer"]
    for thread in loaders:
        thread.join(60)
    answer = guard.chat([{"role": "user", "content": "hi"}])
    print(json.dumps({"loaders": len(loaders), "tiktoken": "tiktoken" in sys.modules,
                      "usage": answer.usage.input_tokens, "estimated": answer.usage.estimated}))
    guard.close()
"""


@pytest.mark.parametrize(("options", "loaded"), [("none", False), ("limit", True)])
def test_a_guard_whose_stages_count_no_tokens_loads_no_tokenizer(
    options: str, loaded: bool
) -> None:
    """A Guard loaded tiktoken's encodings as it was built whatever its stages (a tenth of a
    second of CPU or more, in its first call's time: every cold start of a serverless
    function paid it); one whose stages count no tokens (no ``max_input_tokens``, rate
    limit, budget ...) loads none, and its first call, whose provider reports its usage,
    imports no tiktoken (a fresh interpreter, so that nothing loaded it before)."""
    env = {**os.environ, "PYTHONPATH": SOURCE}
    found = subprocess.run(
        [sys.executable, "-c", _UNCOUNTED, options],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    report = json.loads(found.stdout.strip().splitlines()[-1])
    assert report["loaders"] == (1 if loaded else 0)
    assert report["tiktoken"] is loaded
    assert report["usage"] > 0  # the provider's own usage
    assert report["estimated"] is False


_NUMPY = """
import json, sys, threading
from llmguard_sdk import Guard, OpenAICompatibleProvider, ResponseCache
before = "numpy" in sys.modules
route = OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="a")
options = {"exact": {"cache": ResponseCache(semantic=False)}, "semantic": {"cache": True},
           "none": {}}[sys.argv[1]]
guard = Guard(route, environ={}, telemetry=False, **options)
importers = [t for t in threading.enumerate() if t.name == "llmguard-import"]
for thread in importers:
    thread.join(60)
print(json.dumps({"before": before, "importers": len(importers),
                  "after": "numpy" in sys.modules}))
guard.close()
"""


@pytest.mark.parametrize(
    ("cache", "imported"), [("semantic", True), ("exact", False), ("none", False)]
)
def test_a_guard_with_a_semantic_cache_imports_numpy_when_it_is_built(
    cache: str, imported: bool
) -> None:
    """A semantic cache's first vector imported numpy (a tenth of a second; a third under
    load) inside the first call's deadline; a Guard with one now starts the import as it is
    built, in a thread of its own; a Guard without one imports nothing it does not use."""
    env = {**os.environ, "PYTHONPATH": SOURCE}
    found = subprocess.run(
        [sys.executable, "-c", _NUMPY, cache], capture_output=True, text=True, env=env, timeout=120
    )
    assert found.returncode == 0, found.stderr
    report = json.loads(found.stdout.strip().splitlines()[-1])
    assert report == {"before": False, "importers": int(imported), "after": imported}


class _ClosesBadly(OpenAICompatibleProvider):
    """A route whose close fails after releasing its pool (a socket already gone)."""

    def close(self) -> None:
        super().close()
        raise OSError(f"{self.name}: socket gone")

    async def aclose(self) -> None:
        await super().aclose()
        raise OSError(f"{self.name}: socket gone")


class _RecordsClose(OpenAICompatibleProvider):
    closed = 0

    def close(self) -> None:
        super().close()
        self.closed += 1

    async def aclose(self) -> None:
        await super().aclose()
        self.closed += 1


def _routes() -> list[OpenAICompatibleProvider]:
    url = "http://127.0.0.1:9/v1"
    return [
        _ClosesBadly(url, model="m", name="first"),
        _ClosesBadly(url, model="m", name="second"),
        _RecordsClose(url, model="m", name="third"),
    ]


def test_close_closes_every_route_when_one_fails_then_raises_the_first_error() -> None:
    """close() stopped at the first route whose close raised: the routes after it stayed
    open. Now every route is closed, then the first error is raised, the others noted."""
    routes = _routes()
    guard = Guard(routes, environ={}, telemetry=False)
    with pytest.raises(OSError, match="first: socket gone") as info:
        guard.close()
    assert routes[2].closed == 1  # type: ignore[attr-defined]
    assert any("second: socket gone" in note for note in getattr(info.value, "__notes__", []))


def test_aclose_closes_every_route_when_one_fails_then_raises_the_first_error() -> None:
    routes = _routes()
    guard = Guard(routes, environ={}, telemetry=False)

    async def main() -> None:
        await guard.aclose()

    with pytest.raises(OSError, match="first: socket gone") as info:
        anyio.run(main)
    assert routes[2].closed == 1  # type: ignore[attr-defined]
    assert any("second: socket gone" in note for note in getattr(info.value, "__notes__", []))


def test_a_guard_used_in_with_still_raises_its_close_error() -> None:
    routes = _routes()
    with pytest.raises(OSError, match="first"), Guard(routes, environ={}, telemetry=False):
        pass
    assert routes[2].closed == 1  # type: ignore[attr-defined]


class _NoProvider:
    """A provider object lacking ``aclose`` (so no :class:`Provider`), alone, not in a list."""

    name = "mine"
    model = "m"


@pytest.mark.parametrize(
    "given",
    [object(), 5, _NoProvider(), "http://127.0.0.1:9/v1", b"route", iter([])],
    ids=["object", "int", "no-aclose", "str", "bytes", "iterator"],
)
def test_providers_that_are_no_provider_nor_a_list_are_a_configuration_error(
    given: object,
) -> None:
    """``Guard(obj)`` with an object that is no Provider raised a bare TypeError ("'object'
    object is not iterable"), a string was read as a list of its characters ("'h' is not a
    Provider"), and a generator was read empty (a Guard without routes, refused at its first
    call): each is a ConfigurationError naming what was given."""
    with pytest.raises(ConfigurationError, match="providers must be a Provider") as caught:
        Guard(given, environ={})  # type: ignore[arg-type]
    assert repr(given)[:20] in str(caught.value)


_PRICES = """
import json
from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import _genai_table
before = _genai_table.windows()
guard = Guard(
    OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="gpt-4o-mini", name="a"),
    environ={},
    telemetry=False,
)
for thread in __import__("threading").enumerate():  # (no call made: the Guard's own read)
    if thread.name == "llmguard-prices":
        thread.join(60)
print(json.dumps({"before": before, "read": _genai_table.windows() is not None}))
guard.close()
"""


def test_a_guard_reads_its_price_data_when_it_is_built() -> None:
    """The first call priced (every answer gets an estimated cost) read genai-prices' whole
    data, a third of a second or more, inside its deadline after its answer had come (under
    load, 9 s of a 10 s seam call); a Guard now starts reading it as it is built, in a
    background thread (a fresh interpreter, so that nothing read it before)."""
    genai_prices_or_skip()
    env = {**os.environ, "PYTHONPATH": SOURCE}
    found = subprocess.run(
        [sys.executable, "-c", _PRICES], capture_output=True, text=True, env=env, timeout=120
    )
    assert found.returncode == 0, found.stderr
    report = json.loads(found.stdout.strip().splitlines()[-1])
    assert report["before"] is None  # nothing read by the import
    assert report["read"] is True
