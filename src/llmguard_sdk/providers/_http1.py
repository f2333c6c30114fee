"""What the provider's two HTTP/1.1 transports share (:mod:`._http11` over ``http.client``,
:mod:`._ahttp11` over anyio streams): how a head and a chunk size are read, what a request
may say, which idle connection goes first, which are past their expiry, and whether one is
still open."""

from __future__ import annotations

import re
import select
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "MAX_HEADERS",
    "MAX_LINE",
    "asks_to_close",
    "body_length",
    "chunk_size",
    "chunked",
    "head_fields",
    "illegal_header",
    "put_idle",
    "readable",
    "sweep_expired",
    "take_longest_idle",
]

MAX_LINE = 65_536  # http.client's bounds on a header line and on their number
MAX_HEADERS = 100
_NAME = re.compile(rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+")  # a header's name: a token (RFC 9110 5.6.2)
_BREAK = re.compile(rb"[\r\n\x00]")  # what a header's value may not hold (it ends the line)
# a chunk's size: hex digits, fewer than 16 (2**60 bytes: no body anyone sends; more digits
# only make a size that would keep a reader at one chunk for ever)
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")
_C = TypeVar("_C")


def illegal_header(name: bytes, value: bytes) -> bool:
    """Whether a header would break its line: a name that is no token, or a value with a
    line break or a NUL (h11 refuses them; written as they came, a value could add headers,
    or a whole request, of its own)."""
    return _NAME.fullmatch(name) is None or _BREAK.search(value) is not None


def head_fields(lines: list[bytes]) -> list[tuple[str, str]]:
    """A head's header lines (without the blank line that ends them) as ``(name, value)``,
    as httpx's h11 reads them: a value without the spaces around it, a line that starts with
    a space or a tab continues the last (joined by one space).

    Raises:
        ValueError: a line without a name and a colon (h11 refuses it; ``http.client``
            would read the rest as the body).
    """
    fields: list[tuple[str, str]] = []
    for line in lines:
        text = line.decode("iso-8859-1")
        if text[:1] in (" ", "\t") and fields:  # an obsolete folded line
            name, value = fields[-1]
            fields[-1] = (name, f"{value} {text.strip()}")
            continue
        name, colon, value = text.partition(":")
        if not colon or not name.strip():
            raise ValueError(f"malformed header line {text.strip()!r}")
        fields.append((name.strip(), value.strip()))
    return fields


def body_length(values: list[str]) -> int | None:
    """The ``Content-Length`` of a head's values: as ``http.client`` reads one (a bad or
    negative one: none, the body read until the connection closes), and as h11 reads one
    given more than once alike (a list, or lines: proxies repeat it), that length.

    Raises:
        ValueError: lengths that disagree (h11 refuses them: which one ends the body is
            unknown).
    """
    lengths = {part.strip() for value in values for part in value.split(",")}
    if len(lengths) > 1:
        raise ValueError(f"conflicting Content-Length values {sorted(lengths)[:4]}")
    try:
        length = int(lengths.pop()) if lengths else None
    except ValueError:
        return None
    return length if length is None or length >= 0 else None


def chunked(values: list[str]) -> bool:
    """Whether a head's ``Transfer-Encoding`` values (each line's) frame its body in
    chunks: ``chunked`` alone. None given: not chunked.

    Raises:
        ValueError: any other coding (``gzip, chunked``, ``identity``, ``chunked`` twice),
            refused as h11 refuses it: taken for no framing, the body was read until the
            connection closed, a kept-alive one holding the call to its read timeout.
    """
    codings = [part.strip().lower() for value in values for part in value.split(",")]
    if not codings or codings == ["chunked"]:
        return bool(codings)
    raise ValueError(f"unsupported Transfer-Encoding {', '.join(codings)[:60]!r}")


def chunk_size(line: bytes) -> int | None:
    """The size a chunk-size line gives (its extensions, after ``;``, ignored); ``None`` for
    anything but 1 to 15 hex digits (``int(line, 16)`` also reads a sign, ``0x`` and
    underscores, and any number of digits)."""
    size = line.split(b";", 1)[0].strip(b" \t\r\n")
    return int(size, 16) if _CHUNK_SIZE.fullmatch(size) is not None else None


def put_idle(
    idle: dict[Any, list[tuple[_C, float]]], order: deque[Any], origin: Any
) -> list[tuple[_C, float]]:
    """``origin``'s idle connections (latest last), its list made (and ``origin`` queued in
    ``order``, the origins :func:`sweep_expired` visits in turn) where it has none."""
    pooled = idle.get(origin)
    if pooled is None:
        pooled = idle[origin] = []
        order.append(origin)
    return pooled


def sweep_expired(
    idle: dict[Any, list[tuple[_C, float]]], order: deque[Any], fresh: Callable[[float], bool]
) -> list[_C]:
    """Take out (to be closed) the idle connections past their expiry (``fresh(since)``
    false) of the next origin in ``order``, which goes to the back, or out with its list
    where none is left: a call looks at one origin, whatever their number, and each is
    looked at in turn, so a connection to an origin no longer called is closed within as
    many calls as there are origins with idle connections."""
    if not order:
        return []
    origin = order.popleft()
    pooled = idle.get(origin)
    expired = []
    while pooled and not fresh(pooled[0][1]):  # the longest idle first
        expired.append(pooled.pop(0)[0])
    if pooled:
        order.append(origin)
    else:
        idle.pop(origin, None)
    return expired


def take_longest_idle(idle: dict[Any, list[tuple[_C, float]]]) -> _C | None:
    """Take the connection idle longest out of ``idle`` (per origin, each connection with
    the time it went idle, latest last); ``None`` where none is idle."""
    oldest = min(
        (pooled for pooled in idle.values() if pooled),
        key=lambda pooled: pooled[0][1],
        default=None,
    )
    return None if oldest is None else oldest.pop(0)[0]


def asks_to_close(request: Any) -> bool:
    """Whether ``request`` says ``Connection: close``: its connection ends with it."""
    value = request.headers.get("connection")
    return bool(value) and "close" in (token.strip() for token in value.lower().split(","))


def readable(fd: int) -> bool:
    """Whether descriptor ``fd`` has something to read (or an end, or an error) right now:
    ``poll`` where there is one (``select`` takes no descriptor past 1023: a process with
    many files open would read every idle connection as closed)."""
    if fd < 0:
        return True  # closed
    if not hasattr(select, "poll"):  # Windows: its select has no such bound
        return bool(select.select([fd], [], [], 0)[0])
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))  # POLLHUP and POLLERR come unasked
