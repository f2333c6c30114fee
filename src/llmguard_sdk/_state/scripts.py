"""The Lua scripts of a backend: their text (:func:`lua`) and the commands that run them
(:class:`RedisScripts`).

Private. Nothing here imports redis.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from .once import marked, wrapped
from .steps import Command

if TYPE_CHECKING:
    from .stores import RedisStore

__all__ = ["RedisScripts", "lua"]


def lua(module: str, name: str) -> str:
    """The text of the Lua script ``lua/<name>.lua`` beside ``module`` (its ``__name__``)."""
    package = module.rpartition(".")[0]
    return resources.files(package).joinpath(f"lua/{name}.lua").read_text(encoding="utf-8")


class RedisScripts:
    """Lua scripts of one backend, as the commands that run them (EVALSHA, in a
    :class:`~._state.steps.Batch`: nothing is sent before a step of a batch asks).

    The scripts numbered in ``once`` change state: on a store whose client may send a
    command again (:attr:`RedisStore.resends`), each of their commands runs once and a
    re-send gets the first reply (:mod:`._state.once`)."""

    def __init__(self, store: RedisStore, *sources: str, once: Collection[int] = ()) -> None:
        self._store = store
        self._once = frozenset(once) if store.resend_seconds > 0 else frozenset()
        sources = tuple(wrapped(s) if i in self._once else s for i, s in enumerate(sources))
        self._sources = sources
        self._shas = [hashlib.sha1(s.encode("utf-8")).hexdigest() for s in sources]

    def command(self, index: int, keys: Sequence[str], args: Sequence[Any] = ()) -> Command:
        """Script number ``index`` with ``keys`` and ``args``, as a :class:`Command` for a
        :class:`Batch` (nothing is sent yet)."""
        if index in self._once:
            keys, args = marked(self._store, keys, args)
        return Command(
            self._store, self._sources[index], self._shas[index], tuple(keys), tuple(args)
        )
