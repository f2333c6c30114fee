"""A minimal loopback chat-completions server on one asyncio event loop, for throughput benches.

``python bench/_asyncio_server.py`` prints its base URL (``http://127.0.0.1:PORT/v1``) and
serves until its stdin closes. Every request (HTTP/1.1, keep-alive, a ``Content-Length``
body) gets the same small chat completion, with usage.

Why next to the FakeProvider: the FakeProvider's server is a ``ThreadingHTTPServer``, one
thread per connection. At 500 concurrent connections its 500 threads take turns on one GIL,
and its answer rate swings from round to round by itself, for every client alike. This
server answers from one event loop (no threads), so what a throughput round measures is the
client's own rate. It has none of the FakeProvider's scripting (faults, streams, batches).
"""

from __future__ import annotations

import asyncio
import json
import sys

_BODY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Your parcel is on its way."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }
).encode()
_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    + f"content-length: {len(_BODY)}\r\n\r\n".encode()
    + _BODY
)
_MAX_HEADER = 64 * 1024  # a request head longer than this closes the connection
_MAX_BODY = 16 * 1024 * 1024


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer each request of one connection until the client closes it."""
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip() or 0)
            if not 0 <= length <= _MAX_BODY:
                return
            if length:
                await reader.readexactly(length)
            writer.write(_RESPONSE)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        return
    finally:
        writer.close()


async def _main() -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0, limit=_MAX_HEADER, backlog=1024)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    loop = asyncio.get_running_loop()
    async with server:  # until stdin closes: this server ends with the bench that started it
        await loop.run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(_main())
