"""Safe releases of models and prompts: pinned versions, canaries that roll back by
themselves, shadow traffic.

A :class:`Release` is a named, versioned bundle of what defines a feature's behaviour (its
routes with exact model ids, its prompt, its parameters). Give a Guard one
(``Guard(release=...)``), or a :class:`ReleasePlan` with a candidate::

    guard = Guard(release=ReleasePlan(
        current, candidate=next_one,
        canary=CanaryPolicy(stages=(0.01, 0.05, 0.25, 1.0), sticky_by="user"),
        shadow=ShadowPolicy(share=0.05),
    ), store="redis://...")

The canary's stage lives in the store, so every process agrees (in Redis: the default memory
store keeps it in the process alone, forgotten at a restart); ``guard.releases`` (and
``llmguard release status|promote|rollback``) reads and moves it. Every call carries its
release and arm (``control``, ``canary``, ``shadow``) in telemetry. A Guard warns (a
:class:`ReleaseEvent`, a metric, a log record) before a pinned model retires.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

from .backends import MemoryReleaseBackend, RedisReleaseBackend
from .comparators import COMPARATORS, Comparator
from .control import ReleaseControl
from .policy import CanaryPolicy, Decision, Stage
from .release import Arm, Release, ReleaseEvent, ReleaseHook, ReleasePlan, is_moving_alias
from .shadow import ShadowPolicy

__all__ = [
    "COMPARATORS",
    "Arm",
    "CanaryPolicy",
    "Comparator",
    "Decision",
    "MemoryReleaseBackend",
    "RedisReleaseBackend",
    "Release",
    "ReleaseControl",
    "ReleaseEvent",
    "ReleaseHook",
    "ReleasePlan",
    "ShadowPolicy",
    "Stage",
    "is_moving_alias",
]
