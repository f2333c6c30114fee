"""A stream's assembly keeps one copy of what the route streamed: the estimate of a stream
that reports no usage is counted at its end from the assembled text, reasoning, thinking
blocks and tool calls' arguments. It kept a second copy of the whole output, a piece a
chunk, only to count it, and built each piece as the chunk came."""

from __future__ import annotations

import time
import tracemalloc

from llmguard_sdk import ChatRequest, Message, StreamChunk
from llmguard_sdk._core.assembly import Assembler
from llmguard_sdk.context import CallContext, Scope
from llmguard_sdk.tokens import count_text_tokens

from .conftest import USER

PIECE = "x" * 400  # each chunk's piece of text, and of reasoning
CHUNKS = 1000


def _context() -> CallContext:
    request = ChatRequest(messages=[Message(**m) for m in USER])
    return CallContext(request, Scope(), time.monotonic() + 60)


def _chunks() -> list[StreamChunk]:
    return [
        StreamChunk(text=PIECE, model="m", metadata={"reasoning": PIECE}) for _ in range(CHUNKS)
    ]


def test_a_streams_assembly_keeps_no_second_copy_of_its_output() -> None:
    """Text and reasoning pieces, 800 characters a chunk: the assembly holds the reasoning
    joined (400,000 characters) and its text pieces (the chunks'), nothing more of the size of
    the stream. It held 800,000 characters more (each chunk's text and reasoning joined)."""
    chunks, ctx = _chunks(), _context()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assembler = Assembler(ctx, "", ctx.begin_attempt("r"))
        for chunk in chunks:
            assembler.add(chunk)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert assembler.metadata["reasoning"] == PIECE * CHUNKS
    assert held < 1.5 * len(PIECE) * CHUNKS  # (the joined reasoning and some bookkeeping)


def test_a_continuations_estimate_counts_its_own_output_alone() -> None:
    """A route continuing a broken one's reasoning and text counts what it streamed itself:
    its text, its reasoning after the carried reasoning, its tool call's arguments."""
    ctx = _context()
    carried = {"reasoning": "Earlier thoughts.", "thinking": [{"thinking": "old"}]}
    assembler = Assembler(ctx, "Earlier text.", ctx.begin_attempt("r"), carried)
    call = {"index": 0, "id": "c1", "function": {"name": "f", "arguments": '{"a":'}}
    assembler.add(StreamChunk(text="", metadata={"reasoning": " More thoughts."}))
    assembler.add(StreamChunk(text="New text.", tool_calls=[call]))
    more = {"index": 0, "function": {"arguments": " 1}"}}
    assembler.add(StreamChunk(text="", metadata={"thinking": [{"thinking": "new"}]}))
    assembler.add(StreamChunk(text="", tool_calls=[more], finish_reason="tool_calls"))
    used = assembler.used("m", 5)
    assert used is not None
    own = "New text." + " More thoughts." + "new" + '{"a": 1}'
    assert used.output_tokens == count_text_tokens(own, "m").tokens
    assert used.input_tokens == 5
    assert assembler.text == "Earlier text.New text."
