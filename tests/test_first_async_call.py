"""A process's first ``achat`` never holds up its event loop on what a Guard loads on first use.

Building a Guard starts loading, in background threads, the tokenizer encodings, the
genai-prices data and numpy. The first async call waited for those loads, and ran the lazy
imports it needed (anyio's event-loop backend, slowed tenfold by the imports under way), on the
event loop's thread: every other task of the process stood still for a tenth of a second to
more than a second. Each test runs in a fresh process (nothing loaded or imported yet).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_GATED_LOAD = """
import asyncio, sys, threading
from llmguard_sdk import Guard, OpenAICompatibleProvider, tokens
from llmguard_sdk.budget import Budget
from llmguard_sdk.testing import FakeProvider

OPTIONS = eval(sys.argv[1])
tokens._lock.acquire()  # the tokenizer's load stays under way until this test ends it
enough = threading.Event()
held_ticks = []

def end_the_load():
    enough.wait(10)  # (only a way out should the loop be stuck: the count decides)
    held_ticks.append(TICKS[0])
    tokens._lock.release()

TICKS = [0]

async def main(guard):
    call = asyncio.ensure_future(guard.achat([{"role": "user", "content": "hello"}]))
    while not call.done():
        await asyncio.sleep(0)
        TICKS[0] += 1
        if TICKS[0] == 50:
            enough.set()
    return (await call).text

with FakeProvider(model="gpt-4o-mini") as fake:
    guard = Guard(
        OpenAICompatibleProvider(fake.base_url, model=fake.model),
        environ={},
        **OPTIONS,
    )
    threading.Thread(target=end_the_load, daemon=True).start()
    text = asyncio.run(main(guard))
    guard.close()
print(held_ticks[0], bool(text))
"""


@pytest.mark.parametrize(
    "options",
    [
        "{'budgets': [Budget(limit_usd=5.0)]}",  # counted as the spend is reserved
        "{'max_input_tokens': 8}",  # counted as the call is checked, before any round trip
    ],
)
def test_the_first_async_call_waits_for_a_load_under_way_without_stopping_the_loop(
    options: str,
) -> None:
    """While the tokenizer's load is under way (held here until the loop has turned 50
    times), the first call waits for it off the loop: other tasks keep running. It blocked
    the loop thread on the tokenizer's lock, so the loop turned a few times at most."""
    run = subprocess.run(
        [sys.executable, "-c", _GATED_LOAD, options],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ticks, answered = run.stdout.split()
    assert int(ticks) >= 50, f"the loop turned {ticks} times while the load was under way"
    assert answered == "True"


_IMPORTS_ON_THE_LOOP = """
import asyncio, sys, threading
from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Budget
from llmguard_sdk.testing import FakeProvider

watching = []
imported = []

def hook(event, args):
    if event == "import" and watching and threading.get_ident() == watching[0]:
        imported.append(args[0])

sys.addaudithook(hook)

async def main(guard):
    watching.append(threading.get_ident())
    try:
        await guard.achat([{"role": "user", "content": "hello"}])
    finally:
        watching.clear()

with FakeProvider(model="gpt-4o-mini") as fake:
    guard = Guard(
        OpenAICompatibleProvider(fake.base_url, model=fake.model),
        budgets=[Budget(limit_usd=5.0)],
        cache=True,
        environ={},
    )
    asyncio.run(main(guard))
    guard.close()
print(" ".join(imported))
"""


def test_the_first_async_call_imports_nothing_on_the_event_loop() -> None:
    """The first call imported anyio's asyncio backend (and its lazy modules) on the loop's
    thread, while the Guard's loads (tiktoken, genai-prices, numpy) held the import lock:
    a quarter of a second. A Guard now imports it as it is built, before those loads start."""
    run = subprocess.run(
        [sys.executable, "-c", _IMPORTS_ON_THE_LOOP], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == []
