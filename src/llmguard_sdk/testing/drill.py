"""An outage drill: steady traffic through a Guard while its primary route dies and comes back.

:func:`run_drill` starts two local :class:`~llmguard_sdk.testing.FakeProvider` servers
(``primary`` and ``backup``) and, when it is installed, the bundled local model
(:class:`~llmguard_sdk.LocalProvider`) as the last route. It sends chat calls at a fixed rate
(each one its own task, launched on schedule, so slow calls never slow the rate) and takes the
primary down in three ways, one after the other, before bringing it back:

1. ``refused``: the primary's server is stopped; connections are refused.
2. ``503``: it is started again, but every call gets a 503.
3. ``hang``: every call is read and never answered.
4. ``after``: it answers normally again (the primary's *return*).

The :class:`DrillReport` says how the traffic fared (answered share, latency before, during
and after the outage), how the primary's circuit breaker behaved (when it opened, its
half-open probes, how many calls still reached the dead primary, how long recovery took), and
whether the targets of an outage hold.

How it is measured:

* Every call's start and end come from :func:`time.monotonic`; its latency is the difference,
  its served route is ``response.route`` (``"failed"`` when the Guard raised).
* Breaker transitions come from ``breaker_hooks``, stamped with :func:`time.monotonic`.
* Attempts on the primary are logged by a thin pass-through around its provider (the Guard is
  unchanged; the wrapper only notes each attempt's start, end and error). That is the only
  exact count: refused connections never reach the server, and a call's
  :class:`~llmguard_sdk.CallEvent` keeps only the *last* error per route and counts retries
  that a breaker may refuse before they are sent. The primary server's own request log
  (:attr:`~llmguard_sdk.testing.FakeProvider.requests`) cross-checks the attempts that did
  reach it (503 and hang phases).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from ..breaker import BreakerPolicy, BreakerTransition
from ..errors import ConfigurationError
from ..guard import Guard
from ..providers.base import Provider
from ..providers.openai_compat import OpenAICompatibleProvider
from ._drill_analysis import _analyse
from ._drill_report import DrillReport
from ._drill_run import (
    ATTEMPT_TIMEOUT,
    BACKUP_LATENCY,
    BREAKER,
    CALL_TIMEOUT,
    RETRY,
    _on_event,
    _Run,
    _Tap,
)
from ._faults import Fault
from ._outage import check_drill_times
from ._provider import FakeProvider

__all__ = ["DrillReport", "run_drill"]


def _local_route(enabled: bool) -> tuple[Provider | None, str]:
    if not enabled:
        return None, "not used (local=False)"
    try:
        from ..providers.local import LocalProvider

        local = LocalProvider(n_ctx=512, warm_up=True)
    except ConfigurationError as missing:
        return None, f"not installed, the drill ran without it: {missing}"
    if not local.wait_loaded(60):
        return local, "still loading when the traffic started"
    return local, ""


def run_drill(
    *,
    rate: float = 20.0,
    before: float = 3.0,
    outage: float = 2.0,
    after: float = 4.0,
    local: bool = True,
    png: str | None = None,
    breaker: BreakerPolicy | None = None,
) -> DrillReport:
    """Run an outage drill and return its :class:`DrillReport` (see the module docs).

    Args:
        rate: chat calls started per second.
        before: seconds of normal traffic before the outage.
        outage: seconds of each outage phase (refused, 503, hang; three in all).
        after: seconds of traffic after the primary's return.
        local: add the bundled local model as the last route when it is installed.
        png: write a timeline PNG here (see :meth:`DrillReport.write_png`).
        breaker: the Guard's breaker policy (default: the drill's short one below;
            ``BreakerPolicy()`` for the SDK's defaults).

    The default run lasts about 13 s. The Guard: ``timeout`` 5 s, ``attempt_timeout`` 0.4 s,
    retries ``RetryPolicy(attempts=2, base=0.02, cap=0.5)``, breakers
    ``BreakerPolicy(window=20, minimum_calls=5, failure_rate=0.5, open_seconds=1,
    max_open_seconds=2, half_open_permits=1)``; the backup answers after 10 ms.
    """
    check_drill_times(rate=rate, before=before, outage=outage, after=after)
    transitions: list[tuple[float, BreakerTransition]] = []
    policy = BREAKER if breaker is None else breaker

    def on_transition(transition: BreakerTransition) -> None:
        transitions.append((time.monotonic(), transition))

    local_route, local_note = _local_route(local)
    with (
        FakeProvider(model="primary-model", name="primary", hang_limit=10) as primary,
        FakeProvider(model="backup-model", name="backup") as backup,
    ):
        backup.always(Fault(latency=BACKUP_LATENCY))
        tap = _Tap(
            OpenAICompatibleProvider(primary.base_url, model="primary-model", name="primary")
        )
        routes: list[Provider] = [
            tap,
            OpenAICompatibleProvider(backup.base_url, model="backup-model", name="backup"),
        ]
        if local_route is not None:
            routes.append(local_route)
        guard = Guard(
            routes,
            timeout=CALL_TIMEOUT,
            attempt_timeout=ATTEMPT_TIMEOUT,
            retry=RETRY,
            breaker=policy,
            breaker_hooks=[on_transition],
            hooks=[_on_event],
            environ={},
        )

        def back_with_503s() -> None:
            primary.always(Fault(status=503))  # before start(): no normal answer slips through
            primary.start()

        plan: list[tuple[str, float, Callable[[], None]]] = [
            ("refused", before, primary.stop),
            ("503", before + outage, back_with_503s),
            ("hang", before + 2 * outage, lambda: primary.always(Fault(hang=True))),
            ("after", before + 3 * outage, lambda: primary.always(None)),
        ]
        run = _Run(guard, primary, tap, rate, plan, before + 3 * outage + after, policy)
        anyio.run(run.traffic)
        received = [r.time for r in primary.requests]
    report = _analyse(run, transitions, received, [r.name for r in routes], local_note)
    if png is not None:
        report.write_png(png)
    return report
