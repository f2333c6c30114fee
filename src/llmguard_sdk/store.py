"""Where shared state lives: in this process's memory, or in Redis.

Every Redis-backed stage (rate limits, breakers, budgets, caches, retry budgets) gets its
connection and its key names from here, so the key scheme has one home:

``{prefix}:{kind}:{{{tag}}}:{part}:{part}...``

``kind`` names the stage (``rl``, ``cb``, ``budget``, ...). ``tag`` is the Redis Cluster hash
tag: the keys of one atomic decision share it, so one Lua script can touch them all on one
slot. Tenant and user ids never appear in clear: :func:`hash_id` turns them into short,
stable digests.

A ``redis+cluster://host:port[,host:port...]`` URL (``rediss+cluster://`` for TLS) opens a
:class:`RedisClusterStore`: the same stages on Redis Cluster, each script sent to the node
that serves its keys' slot, MOVED and ASK redirections followed by the client.

Each stage's decision is also a *step* that a batch runs together with the other stages'
steps, one Redis pipeline per round, so a guarded call waits for Redis twice: once before
its provider call and once after (the machinery is private, in ``llmguard_sdk._state``).

Connections are opened lazily, with short socket timeouts, so a Redis that is down when the
application starts does not stop it from starting. Every store has one :class:`RedisHealth`,
a breaker around Redis itself: after a failure every stage leaves Redis alone for a while
(growing while the failures go on), so a dead or hung Redis costs no waiting per call.

redis is imported when a Redis store is built, not by ``import llmguard_sdk``.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

# The machinery is private; these names stay importable from here for the modules that
# still import them from this module (not part of the public surface).
from ._state.steps import Batch as Batch
from ._state.steps import Call as Call
from ._state.steps import Command as Command
from ._state.steps import Outcome as Outcome
from ._state.steps import Pause as Pause
from ._state.steps import Step as Step
from ._state.steps import arun as arun
from ._state.steps import done as done
from ._state.steps import run as run
from ._state.steps import start as start
from ._state.steps import work as work
from ._state.stores import MemoryStore, RedisClusterStore, RedisStore, Store
from ._state.stores import Outage as Outage
from ._state.stores import RedisHealth as RedisHealth
from ._state.stores import RedisScripts as RedisScripts
from ._state.stores import hash_id as hash_id
from ._state.stores import open_store as open_store
from ._state.stores import redis_errors as redis_errors

__all__ = ["MemoryStore", "RedisClusterStore", "RedisStore", "Store"]


def __getattr__(name: str) -> tuple[type[Exception], ...]:
    """``REDIS_ERRORS``, the exceptions of an unreachable Redis (imports redis); kept for code
    written against earlier releases: use ``redis_errors()`` inside the package."""
    if name == "REDIS_ERRORS":
        return redis_errors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
