"""Calls of an OpenAI-compatible provider over one client of an HTTP library (the sync
one, or the async calls' httpx2 or httpx), one after another."""

from __future__ import annotations

import time

import anyio

from llmguard_sdk import ChatRequest, OpenAICompatibleProvider

LIBRARIES = ["sync", "httpx2", "httpx"]
"""The sync calls' client, and the async calls' two libraries."""


def send_calls(
    provider: OpenAICompatibleProvider, library: str, requests: list[ChatRequest], stream: bool
) -> None:
    """Send ``requests`` one after another over one client of ``library``."""
    if library == "sync":
        for request in requests:
            deadline = time.monotonic() + 5
            if stream:
                list(provider.stream(request, model="m", deadline=deadline))
            else:
                provider.complete(request, model="m", deadline=deadline)
        return
    provider._async_library = library  # type: ignore[assignment]

    async def run() -> None:
        try:
            for request in requests:
                deadline = time.monotonic() + 5
                if stream:
                    [c async for c in provider.astream(request, model="m", deadline=deadline)]
                else:
                    await provider.acomplete(request, model="m", deadline=deadline)
        finally:
            await provider.aclose()

    anyio.run(run)
