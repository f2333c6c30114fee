"""Where :class:`~llmguard_sdk.errors.UnsupportedRequestError` is defined, beside the tree
(:mod:`llmguard_sdk.errors` exports it, and names it as its own)."""

from __future__ import annotations

from .errors import BadRequestError

__all__ = ["UnsupportedRequestError"]


class UnsupportedRequestError(BadRequestError):
    """The route cannot serve this kind of call, though another route may: a local model
    asked to call a tool (``tool_choice`` ``"required"``, Anthropic's ``any``, a named tool)
    or to read a content part other than text (an image, audio, a file). Raised before the
    route does any work. As a :class:`~llmguard_sdk.errors.ContextLengthExceededError` is,
    it is not retried on the route, it is no failure of the route's circuit breaker, and the
    chain moves on to the next route (after the last one, to a stale cached answer, else
    :class:`~llmguard_sdk.errors.AllRoutesFailedError`).

    .. versionadded:: 0.2.0
    """

    __module__ = "llmguard_sdk.errors"  # where users import it from (and pickle finds it)
