"""An input too long in Anthropic's words, ``prompt is too long: N tokens > M maximum``, with
the numbers wherever the refusal gives them: the Guard's ``max_input_tokens``
(:class:`~llmguard_sdk.errors.InputTooLargeError`), a route's window the Guard knows, and a
provider's own words (OpenAI's and vLLM's ``maximum context length is M tokens. However,
your messages resulted in N tokens``, Claude's own, llama.cpp's ``request (N tokens) exceeds
the available context size (M tokens)`` or its error's ``n_prompt_tokens`` and ``n_ctx``,
llama-cpp-python's ``Requested tokens (N) exceed context window of M``). LangChain's
Anthropic model and Claude's users tell an overflow by its first words, and code that trims
the input reads the numbers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import InputTooLargeError, ProviderError
from ..providers._error_kinds import body_error

__all__ = ["anthropic_overflow", "overflow_numbers"]

# (tokens, maximum) in each wording that gives them
_WORDINGS = (
    re.compile(r"(?P<tokens>\d+) tokens > (?P<limit>\d+) maximum"),  # Claude's own
    re.compile(  # OpenAI's, vLLM's (its "requested" counts the completion too, as a window does)
        r"maximum context length is (?P<limit>\d+) tokens\b.{0,80}?"
        r"\b(?:resulted in|requested|has) (?P<tokens>\d+)(?: input)? tokens",
        re.DOTALL,
    ),
    re.compile(r"needs about (?P<tokens>\d+) tokens; this route's context holds (?P<limit>\d+)"),
    re.compile(  # llama.cpp's server (its words moved between builds)
        r"(?:request|input) \((?P<tokens>\d+) tokens\) (?:exceeds (?:the available )?|is "
        r"larger than the max )context size \((?P<limit>\d+) tokens\)"
    ),
    re.compile(r"Requested tokens \((?P<tokens>\d+)\) exceed context window of (?P<limit>\d+)"),
)


def overflow_numbers(exc: BaseException) -> tuple[int, int] | None:
    """The input's tokens and the most the refusal allows, where ``exc`` (an overflow) says
    them; ``None`` where it does not."""
    if isinstance(exc, InputTooLargeError):
        return exc.tokens, exc.limit
    text = str(exc)
    for wording in _WORDINGS:
        found = wording.search(text)
        if found is not None:
            return int(found["tokens"]), int(found["limit"])
    return _counted(exc)


def _counted(exc: BaseException) -> tuple[int, int] | None:
    """The numbers llama.cpp's server gives beside its words (older builds: only there), in
    its error answer's ``error.n_prompt_tokens`` and ``error.n_ctx``."""
    body = exc.body if isinstance(exc, ProviderError) else None
    error = body_error(body) if body else None
    if not isinstance(error, Mapping):
        return None
    tokens, limit = error.get("n_prompt_tokens"), error.get("n_ctx")
    if type(tokens) is int and type(limit) is int:  # (no bool, no float)
        return tokens, limit
    return None


def anthropic_overflow(exc: BaseException, said: str) -> str:
    """The message of overflow ``exc`` (``said``: the error's own text, which follows) in
    Anthropic's words, with the numbers where known."""
    numbers = overflow_numbers(exc)
    if numbers is not None:
        lead = f"prompt is too long: {numbers[0]} tokens > {numbers[1]} maximum"
        return said if said.startswith(lead) else f"{lead} ({said})"
    return said if said.lower().startswith("prompt is too long") else f"prompt is too long: {said}"
