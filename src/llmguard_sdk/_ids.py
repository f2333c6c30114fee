"""Ids that no other call of any process uses, made without a system call per id: a random
part drawn once per process (again after a fork) and a count; and the prefix of the Guard's
idempotency keys (what tells them from a caller's own)."""

from __future__ import annotations

import itertools
import os

__all__ = ["IDEMPOTENCY_PREFIX", "UniqueIds"]

IDEMPOTENCY_PREFIX = "llmguard-"
"""How the idempotency keys the Guard makes begin (a key a caller set does not)."""


class UniqueIds:
    """``next()`` gives ``prefix`` + ``random_digits`` random hex digits (this process's) +
    16 hex digits of a count; a forked child draws its own random part."""

    def __init__(self, prefix: str = "", *, random_digits: int = 16):
        self._prefix, self._random_bytes = prefix, random_digits // 2
        self._renew()
        os.register_at_fork(after_in_child=self._renew)

    def _renew(self) -> None:
        self._head = self._prefix + os.urandom(self._random_bytes).hex()
        self._count = itertools.count()

    def next(self) -> str:
        """A new id (thread-safe: the count is taken under the GIL)."""
        return f"{self._head}{next(self._count):016x}"
