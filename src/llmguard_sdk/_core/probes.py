"""Background probes of routes whose breaker is open (``BreakerPolicy.probe_every``).

A call that finds a route's breaker open asks :class:`Prober` to probe the route; at most one
probe per route and process runs each ``probe_every`` seconds, in a daemon thread: a one-token
request (not a user's call: no budget, cache or telemetry), bounded by ``probe_every`` (10 s at
most). When it succeeds, no slower than ``slow_call_seconds``, the breaker's open wait ends
(in every process, with Redis): the next call half-opens it and the route is back within
seconds of its recovery. A route paused by a 429 is not probed (``Permit.paused``): the
provider asked for no request until its Retry-After, and a probe could not end that pause.
"""

from __future__ import annotations

import logging
import math
import threading
import time

from ..breaker import Breakers
from ..models import ChatRequest, Message
from ..providers.base import Provider

__all__ = ["Prober", "is_probe"]

logger = logging.getLogger("llmguard_sdk")

_PING = ChatRequest(messages=[Message(role="user", content="ping")], max_tokens=1)


def is_probe(request: ChatRequest) -> bool:
    """Whether ``request`` is a background probe's (for drills that tell them apart)."""
    return request is _PING


class Prober:
    """Probes open routes in the background, each at most once every ``every`` seconds."""

    def __init__(self, breakers: Breakers, every: float) -> None:
        self._breakers = breakers
        self._every = every
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # one entry per route
        self._running: set[threading.Thread] = set()
        self._closed = False

    def maybe_probe(self, route: Provider, model: str) -> None:
        """Start a probe of ``route`` unless one started less than ``every`` seconds ago."""
        now = time.monotonic()
        with self._lock:
            if self._closed or now - self._last.get(route.name, -math.inf) < self._every:
                return
            self._last[route.name] = now
            thread = threading.Thread(
                target=self._probe, args=(route, model), name="llmguard-probe", daemon=True
            )
            self._running.add(thread)
        thread.start()

    def _probe(self, route: Provider, model: str) -> None:
        started = time.monotonic()
        try:
            route.complete(_PING, model=model, deadline=started + min(self._every, 10.0))
        except Exception as exc:
            logger.debug("probe of %s failed: %s", route.name, exc)
        else:
            slow = self._breakers.policy.slow_call_seconds
            if slow is not None and time.monotonic() - started >= slow:
                logger.debug("probe of %s was slow: the route stays open", route.name)
            elif not self._closed:
                self._breakers.probe_passed(route.name)
        finally:
            with self._lock:
                self._running.discard(threading.current_thread())

    def close(self, wait: float = 1.0) -> None:
        """Start no more probes; wait up to ``wait`` seconds for running ones (daemons: a
        probe still running after that ends with the process)."""
        with self._lock:
            self._closed = True
            running = list(self._running)
        until = time.monotonic() + wait
        for thread in running:
            thread.join(max(0.0, until - time.monotonic()))
