"""Streaming, sync and async: chunks as they arrive, usage and time to first token at the end.

A stream may move to the next route only until its first content reaches you; after that a
broken stream raises StreamInterruptedError (with the partial text) instead of replaying.
"""

import anyio

from llmguard_sdk import Guard, OpenAICompatibleProvider, StreamInterruptedError
from llmguard_sdk.testing import FakeProvider, Fault

MESSAGES = [{"role": "user", "content": "count to five slowly"}]

with FakeProvider() as api:
    guard = Guard(OpenAICompatibleProvider(api.base_url, model="fake-model"))

    api.script(Fault(first_token_delay=0.05, inter_token_delay=0.01))
    with guard.chat(MESSAGES, stream=True) as stream:
        for chunk in stream:
            print(chunk.text, end="", flush=True)
    print()
    print("usage:", stream.response.usage)
    print(f"first token after {stream.response.timings.first_token_s * 1000:.0f} ms")

    api.script(Fault(cut_stream_after=3))
    try:
        with guard.chat(MESSAGES, stream=True) as stream:
            for _chunk in stream:
                pass
    except StreamInterruptedError as error:
        print("stream broke after:", repr(error.partial_text))

    async def main() -> None:
        stream = await guard.achat(MESSAGES, stream=True)
        async with stream:
            text = "".join([chunk.text async for chunk in stream])
        print("async:", text)
        await guard.aclose()

    anyio.run(main)
