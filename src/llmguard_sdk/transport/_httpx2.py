"""The httpx2 twins of the httpx transports (openai-python 3.x and anthropic build on httpx2)."""

from __future__ import annotations

import httpx2

from ._adapters import _AsyncSide, _Events, _SyncSide


class _Body(_Events, httpx2.SyncByteStream, httpx2.AsyncByteStream):
    pass


class Httpx2Transport(_SyncSide, httpx2.BaseTransport):
    """An ``httpx2.BaseTransport`` that answers through a Guard."""

    _library, _body = httpx2, _Body


class Httpx2AsyncTransport(_AsyncSide, httpx2.AsyncBaseTransport):
    """An ``httpx2.AsyncBaseTransport`` that answers through a Guard."""

    _library, _body = httpx2, _Body
