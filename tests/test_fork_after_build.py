"""A Guard built, then the process forked at once (a server that loads its app, then forks
its workers: ``gunicorn --preload``): the workers' calls answer. The loads a Guard starts as
it is built (tokenizer, price data) held their locks in the parent's threads at the fork;
every worker inherited them held by a thread it does not have, and its first call waited for
them for good."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmguard_sdk.testing import FakeProvider

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

# A fresh interpreter (nothing loaded yet): build a Guard, fork 3 workers at once, each
# makes a call; prints each worker's exit code (-1: still waiting after 30 s, killed).
SCRIPT = """
import os, sys, time
from llmguard_sdk import Guard, OpenAICompatibleProvider

route = OpenAICompatibleProvider(sys.argv[1], api_key="k", model="gpt-4o-mini", name="p")
guard = Guard([route], retry=None)
workers = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        guard.chat([{"role": "user", "content": "hi"}], max_tokens=5)
        os._exit(0)
    workers.append(pid)
codes = []
for pid in workers:
    deadline = time.monotonic() + 30
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        codes.append(-1)
    else:
        codes.append(os.waitstatus_to_exitcode(done[1]))
print(codes)
"""


def _run(script: str, fake: FakeProvider) -> str:
    """What ``script`` printed, run in a fresh interpreter with ``fake``'s URL."""
    done = subprocess.run(
        [sys.executable, "-c", script, fake.base_url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning"},  # (fork, threads)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_workers_forked_right_after_a_guard_is_built_answer(fake: FakeProvider) -> None:
    assert _run(SCRIPT, fake) == "[0, 0, 0]"
    assert fake.stats.requests == 3


# A Guard that called once (its connection kept alive), then forked: the worker calls too.
WARM_THEN_FORK = """
import os, sys
from llmguard_sdk import Guard, OpenAICompatibleProvider

route = OpenAICompatibleProvider(sys.argv[1], api_key="k", model="gpt-4o-mini", name="p")
guard = Guard([route], retry=None)
guard.chat([{"role": "user", "content": "warm"}], max_tokens=5)
pid = os.fork()
if pid == 0:
    guard.chat([{"role": "user", "content": "worker"}], max_tokens=5)
    os._exit(0)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_forked_worker_opens_connections_of_its_own(fake: FakeProvider) -> None:
    """The worker sent its request on the parent's kept-alive connection (one socket, two
    processes): workers calling at once wrote into each other's requests (the provider
    answered 400, "request body is not valid JSON") or read another's answer."""
    assert _run(WARM_THEN_FORK, fake) == "0"
    assert fake.stats.requests == 2
    assert fake.stats.connections == 2  # the worker's own
