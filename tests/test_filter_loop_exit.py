"""Sync calls' filter loop is shut down at interpreter exit: a client a filter keeps with
``PerLoop`` is closed, and a filter's unfinished async generator's ``finally`` runs, before
the process ends (its daemon thread was left to die with the process: neither ran), and the
process still exits at once with status 0."""

from __future__ import annotations

import os
import subprocess
import sys

from llmguard_sdk.testing import FakeProvider

# A fresh interpreter: a Guard whose async output filter keeps a PerLoop client and leaves an
# async generator of its own unfinished, called from sync code; then the script ends.
# What a filter holds on its loop: a PerLoop client, and (in ``unfinished``) generators.
HELD = """
from llmguard_sdk import PerLoop

class Client:
    async def aclose(self):
        print("client closed", flush=True)

clients = PerLoop(Client)
unfinished = []

async def ticks():
    try:
        yield 1
        yield 2
    finally:
        print("generator finally", flush=True)
"""

SCRIPT = (
    HELD
    + """
import sys
from llmguard_sdk import Guard, OpenAICompatibleProvider

async def moderate(response):
    clients.get()
    generator = ticks()
    await generator.__anext__()
    unfinished.append(generator)

route = OpenAICompatibleProvider(sys.argv[1], api_key="k", model="gpt-4o-mini", name="p")
guard = Guard([route], retry=None, output_filters=[moderate], telemetry=False, environ={})
print(guard.chat([{"role": "user", "content": "hi"}], timeout=10).route, flush=True)
"""
)


def _exit(script: str, fake: FakeProvider, **env: str) -> subprocess.CompletedProcess[str]:
    """``script`` run to its end in a fresh interpreter (a hang at exit fails here)."""
    return subprocess.run(
        [sys.executable, "-c", script, fake.base_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_the_filter_loop_closes_what_it_holds_at_exit(fake: FakeProvider) -> None:
    done = _exit(SCRIPT, fake, PYTHONWARNINGS="error::RuntimeWarning")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "p"
    assert sorted(lines[1:]) == ["client closed", "generator finally"]
    assert "Task was destroyed" not in done.stderr


# A daemon thread's sync call still waiting on an async input filter as the script ends.
IN_FLIGHT = """
import asyncio, sys, threading, time
from llmguard_sdk import Guard, OpenAICompatibleProvider

async def slow(request):
    await asyncio.sleep(30)
    return request

route = OpenAICompatibleProvider(sys.argv[1], api_key="k", model="gpt-4o-mini", name="p")
guard = Guard([route], retry=None, input_filters=[slow], telemetry=False, environ={})
started = threading.Event()

def work():
    started.set()
    try:
        guard.chat([{"role": "user", "content": "hi"}], timeout=60)
    except BaseException as error:
        print("the call raised", type(error).__name__, flush=True)
        raise
    print("the call returned", flush=True)

threading.Thread(target=work, daemon=True).start()
started.wait()
time.sleep(0.5)
print("exit", flush=True)
"""


def test_a_daemon_threads_call_in_flight_at_exit_dies_with_the_process(
    fake: FakeProvider,
) -> None:
    """The loop's shutdown at exit cancels the filter's wait; the daemon thread's call does
    not raise that cancellation (``Exception in thread ... CancelledError`` on stderr, a
    ``CancelledError`` out of a sync call): it never ends, as before, and the process exits
    with status 0."""
    done = _exit(IN_FLIGHT, fake)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["exit"]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert fake.stats.requests == 0


# A loop given up (a filter's blocking code held it) that still waits, as the script ends,
# for a daemon thread's call whose filter keeps a PerLoop client and an unfinished generator.
GIVEN_UP = (
    HELD
    + """
import asyncio, sys, threading, time
from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.errors import ProviderTimeoutError

kept, released = threading.Event(), threading.Event()

async def either(request):
    if request.messages[0].content == "block":
        released.wait(30)  # blocking code: the loop is given up
        return request
    clients.get()
    generator = ticks()
    await generator.__anext__()
    unfinished.append(generator)
    kept.set()
    await asyncio.sleep(60)
    return request

route = OpenAICompatibleProvider(sys.argv[1], api_key="k", model="gpt-4o-mini", name="p")
guard = Guard([route], retry=None, input_filters=[either], telemetry=False, environ={})

def slow():
    guard.chat([{"role": "user", "content": "slow"}], timeout=120)

threading.Thread(target=slow, daemon=True).start()
kept.wait(30)
try:
    guard.chat([{"role": "user", "content": "block"}], timeout=0.2)
except ProviderTimeoutError:
    print("given up", flush=True)
released.set()  # the old loop turns again, waiting for the slow call's filter
time.sleep(0.2)
"""
)


def test_a_given_up_loop_still_winding_down_at_exit_closes_what_it_holds(
    fake: FakeProvider,
) -> None:
    """Exit stopped only the current filter loop: one given up earlier and still waiting for
    a call's filter (up to that call's deadline) died with the process, its PerLoop client
    never closed and its generator's ``finally`` never run."""
    done = _exit(GIVEN_UP, fake)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "given up"
    assert sorted(lines[1:]) == ["client closed", "generator finally"]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert fake.stats.requests == 0
