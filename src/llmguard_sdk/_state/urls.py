"""What a Redis URL may say, checked before any connection is made: its schemes, the options
its query may set (each with a check of its text) and their ranges, and the URL as it may be
shown (its password hidden).

Private. Nothing here imports redis.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

__all__ = [
    "CLUSTER_QUERY_OPTIONS",
    "CLUSTER_SCHEMES",
    "FLAGS",
    "MAX_CONNECTIONS",
    "MAX_SOCKET_TIMEOUT",
    "POOL_OPTIONS",
    "QUERY_OPTIONS",
    "REDIS_SCHEMES",
    "TLS_OPTIONS",
    "TLS_QUERY_OPTIONS",
    "check_query",
    "database_of",
    "check_url_options",
    "is_number",
    "is_whole",
    "redacted_url",
]

REDIS_SCHEMES = ("redis", "rediss", "unix")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
# the pool options a Redis URL's query may set (over the keywords)
POOL_OPTIONS = ("socket_timeout", "socket_connect_timeout", "timeout", "max_connections")


MAX_SOCKET_TIMEOUT = 3600.0  # a socket timeout past ~1e10 s overflows the platform's time_t
# Redis's own default maxclients; redis-py's blocking pool fills a queue with a slot per
# connection when it is built (10**9: most of an hour, gigabytes)
MAX_CONNECTIONS = 10_000


def is_number(value: object) -> bool:
    """Whether ``value`` is a number (an int or a float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole(value: object) -> bool:
    """Whether ``value`` is a whole number (an int, not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


TLS_OPTIONS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
FLAGS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _whole_text(low: int) -> Callable[[str], bool]:
    return lambda text: text.isascii() and text.isdigit() and int(text) >= low


# What a Redis URL's query may set, each with a check of its text; redis-py passes any name
# it does not know on to its connection class (a TypeError at the first command), and
# reads a flag that is no flag as true. The pool options' ranges: check_url_options.
QUERY_OPTIONS: dict[str, Callable[[str], bool]] = {
    **dict.fromkeys(POOL_OPTIONS, lambda text: True),
    "db": _whole_text(0),
    "health_check_interval": _whole_text(0),  # seconds; 0: no check
    "socket_keepalive": lambda text: text.lower() in FLAGS,
    **dict.fromkeys(("client_name", "username", "password"), lambda text: True),
}
TLS_QUERY_OPTIONS: dict[str, Callable[[str], bool]] = {
    **dict.fromkeys(TLS_OPTIONS, lambda text: True),
    "ssl_check_hostname": lambda text: text.lower() in FLAGS,
}
CLUSTER_QUERY_OPTIONS = {name: QUERY_OPTIONS[name] for name in POOL_OPTIONS}


def check_query(query: str, known: Mapping[str, Callable[[str], bool]]) -> None:
    """Raise ValueError for an option of a Redis URL's ``query`` not in ``known``, or whose
    text its check refuses: at once, naming it, rather than at the first command."""
    for name, text in parse_qsl(query):
        check = known.get(name)
        if check is None:
            takes = ", ".join(sorted(known))
            raise ValueError(f"unknown option {name!r} in the URL's query (it takes {takes})")
        if not check(text.strip()):
            raise ValueError(f"option {name}={text!r} in the URL's query is out of range")


def database_of(parts: SplitResult) -> int:
    """The database a redis://, rediss:// or cluster URL's path names (0 without one), as
    redis-py reads it; ValueError for a path that is not a whole number of 0 or more: redis-py
    took database 0 for ``/abc`` without a word, 12 for ``/1/2``, and ``/-1`` was the
    server's error at the first command. (A unix:// URL's path is its socket's.)"""
    text = unquote(parts.path).removeprefix("/")
    if text and not (text.isascii() and text.isdigit()):
        raise ValueError(
            f"the database (the URL's path) must be a whole number, 0 or more, got {text!r}"
        )
    return int(text or 0)


def check_url_options(options: dict[str, Any]) -> None:
    """Raise ValueError for pool options of a Redis URL's query that the keywords refuse."""
    for name in ("socket_timeout", "socket_connect_timeout", "timeout"):
        seconds = options.get(name)
        if seconds is not None and not 0 < seconds <= MAX_SOCKET_TIMEOUT:
            raise ValueError(f"{name} must be in (0, {MAX_SOCKET_TIMEOUT:g}] seconds")
    if not 1 <= options.get("max_connections", 1) <= MAX_CONNECTIONS:
        raise ValueError(f"max_connections must be in [1, {MAX_CONNECTIONS}]")


def redacted_url(url: str) -> str:
    """``url`` with its password hidden (``user:***@``, ``?password=***``)."""
    parts = urlsplit(url)
    if parts.password:
        url = url.replace(f":{parts.password}@", ":***@")
    return _QUERY_PASSWORD.sub(r"\1***", url)  # redis-py takes ?password=... too


_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)
