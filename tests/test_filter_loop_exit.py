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
SCRIPT = """
import sys
from llmguard_sdk import Guard, OpenAICompatibleProvider, PerLoop

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

async def moderate(response):
    clients.get()
    generator = ticks()
    await generator.__anext__()
    unfinished.append(generator)

route = OpenAICompatibleProvider(sys.argv[1], api_key="k", model="gpt-4o-mini", name="p")
guard = Guard([route], retry=None, output_filters=[moderate], telemetry=False, environ={})
print(guard.chat([{"role": "user", "content": "hi"}], timeout=10).route, flush=True)
"""


def test_the_filter_loop_closes_what_it_holds_at_exit(fake: FakeProvider) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, fake.base_url],
        capture_output=True,
        text=True,
        timeout=60,  # (a hang at exit fails here)
        env={**os.environ, "PYTHONWARNINGS": "error::RuntimeWarning"},
    )
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
    done = subprocess.run(
        [sys.executable, "-c", IN_FLIGHT, fake.base_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["exit"]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert fake.stats.requests == 0
