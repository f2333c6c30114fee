"""The ``llmguard`` command's registry: each command is data, registered by one function.

A :class:`Command` names its parser's arguments (a function that adds them) and what runs it;
a :class:`Group` is a command with actions (``llmguard cost estimate``). :func:`register` adds
either to argparse's subparsers and binds the runner with ``set_defaults(run=...)``, so
``main`` dispatches without a chain of ``if`` s, and a :class:`~llmguard_sdk.errors.
ConfigurationError` from any runner becomes one line and exit status 2 (a Ctrl-C: one line,
status 130).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..store import RedisStore

__all__ = [
    "Command",
    "Group",
    "number",
    "positive_int",
    "positive_number",
    "redis_store",
    "register",
    "searched",
]

Runner = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """One command, or one action of a :class:`Group`."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Runner
    description: str | None = None


@dataclass(frozen=True)
class Group:
    """A command whose actions are commands of their own."""

    name: str
    help: str
    actions: tuple[Command, ...]
    description: str | None = None


def register(subparsers: Any, item: Command | Group, *, path: str = "llmguard") -> None:
    """Add ``item`` (and a group's actions) to ``subparsers``."""
    parser = subparsers.add_parser(
        item.name, help=item.help, description=item.description or item.help
    )
    where = f"{path} {item.name}"
    if isinstance(item, Group):
        actions = parser.add_subparsers(dest=f"{item.name}_action", metavar="ACTION")
        actions.required = True
        for action in item.actions:
            register(actions, action, path=where)
        return
    item.arguments(parser)
    parser.set_defaults(run=_reporting(where, item.run))


def _reporting(where: str, run: Runner) -> Runner:
    def run_reporting(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except ConfigurationError as exc:
            print(f"{where}: {exc}", file=sys.stderr)  # stdout: the --json output
            return 2
        except KeyboardInterrupt:  # Ctrl-C in a drill, an eval, a calibration: no traceback
            print(f"{where}: interrupted", file=sys.stderr)
            return 130  # (128 + SIGINT: what a shell reports of a command Ctrl-C ended)

    return run_reporting


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:  # (argparse said "invalid positive_int value": the function's name)
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def number(text: str) -> float:
    """An argparse type: a number (``nan`` and ``inf`` too: the caller's type says which
    it takes), said as one when it is not, never by this function's name."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def positive_number(text: str) -> float:
    """An argparse type: a finite number above 0."""
    value = number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError("must be a positive number")
    return value


def store_arguments(parser: argparse.ArgumentParser, *, users: str) -> None:
    """Add ``--store`` (required) and ``--prefix`` to a command that reads the Redis its
    Guards share: ``users`` names who use that store in the help ("the caches")."""
    parser.add_argument(
        "--store", required=True, help=f"the Redis (or redis+cluster://) URL {users} use"
    )
    parser.add_argument(
        "--prefix", default="llmguard", help="the store's key prefix (default: %(default)s)"
    )


def redis_store(args: argparse.Namespace) -> RedisStore:
    """The store ``--store`` / ``--prefix`` name: a Redis or Redis Cluster URL the Guards use
    (``redis+cluster://`` too). Anything else, ``memory`` among them (a process's own: no
    other process reads it), is a :class:`ConfigurationError` naming the URLs taken;
    ``open_store``'s said ``memory`` was one."""
    from urllib.parse import urlsplit

    from .._state.urls import CLUSTER_SCHEMES, REDIS_SCHEMES, redacted_url
    from ..store import RedisStore, open_store

    if urlsplit(args.store.strip()).scheme not in (*REDIS_SCHEMES, *CLUSTER_SCHEMES):
        raise ConfigurationError(
            "--store: the URL of the Redis the Guards share (redis://, rediss://, unix://, "
            f"redis+cluster:// or rediss+cluster://), got {redacted_url(args.store)!r}"
        )
    store = open_store(args.store, key_prefix=args.prefix)  # (a bad Redis URL: its error)
    assert isinstance(store, RedisStore)  # (a Redis scheme: a RedisStore or a cluster's)
    return store


def searched(args: argparse.Namespace) -> str:
    """Where ``--store`` and ``--prefix`` had a command look (``in URL under key prefix
    'P'``, the URL's password hidden): said when it finds nothing, for a misspelled prefix or
    the wrong Redis to show."""
    from .._state.urls import redacted_url

    return f"in {redacted_url(args.store)} under key prefix {args.prefix!r}"


def redis_failed(args: argparse.Namespace, exc: BaseException) -> str:
    """What a command says when Redis failed it (its URL's password hidden): Redis
    ``refused`` it where Redis answered with an error (refused credentials, a database it does
    not have, a command refused), ``did not answer`` where it did not (down, unreachable,
    timed out): the one to look into differs."""
    import redis

    from .._state.urls import redacted_url

    failed = exc.__cause__ if isinstance(exc.__cause__, redis.RedisError) else exc
    answered = isinstance(failed, redis.ResponseError | redis.AuthenticationError)
    verb = "refused" if answered else "did not answer"
    return f"Redis at {redacted_url(args.store)} {verb}: {exc}"
