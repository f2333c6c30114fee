"""A script that changes state, run once per command however often the command is sent.

redis-py's cluster client sends a command again when its reply was lost (its retry, and its
cluster pipeline whatever the retry), so a script whose reply was lost ran twice: a budget
held twice, a rate limit charged twice, a lease or a permit taken twice. On a store whose
client may do that (:attr:`RedisStore.resends`), such a script is wrapped: each command
carries a key of its own (a fresh id, under the hash tag of the command's first key, so on
the same slot) and the seconds to keep it; the script's first run keeps its reply there
(JSON), and a run that finds the key answers that reply and changes nothing. A re-send is
the same command, so the same key; a new decision (a queued call asking again, a budget
asking again at a cheaper level) is a new command with a new key, and is decided anew.

Cost per wrapped command: a GET and a SET inside the script (no round trip), and one key of
about 40 + 20..150 bytes (name, reply) that lives the store's ``resend_seconds``.

Private.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._ids import UniqueIds

if TYPE_CHECKING:
    from .stores import RedisStore

__all__ = ["marked", "wrapped"]

# The script runs as a function of its own, where KEYS and ARGV are the command's without
# the marker key and its seconds (locals that hide the globals: the script reads them as
# it always did).
_WRAPPER = """local once_key, once_seconds = KEYS[#KEYS], ARGV[#ARGV]
local KEYS, ARGV = {unpack(KEYS, 1, #KEYS - 1)}, {unpack(ARGV, 1, #ARGV - 1)}
local once_first = redis.call('GET', once_key)
if once_first then
  return cjson.decode(once_first)
end
local once_reply = (function()
%s
end)()
redis.call('SET', once_key, cjson.encode(once_reply), 'EX', once_seconds)
return once_reply
"""

_IDS = UniqueIds(random_digits=8)


def wrapped(source: str) -> str:
    """``source`` wrapped to run once per command (see the module)."""
    return _WRAPPER % source


def marked(
    store: RedisStore, keys: Sequence[str], args: Sequence[Any]
) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """The keys and arguments of a wrapped script's command: ``keys`` and ``args`` with a
    new marker key (on the hash tag of ``keys[0]``) and the seconds to keep it."""
    tag = keys[0].partition("{")[2].partition("}")[0]
    marker = store.key("once", tag, _IDS.next())
    return (*keys, marker), (*args, store.resend_seconds)
