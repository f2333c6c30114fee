"""What the SDK clients over the Guard's transport share (openai's ``guard.client()``,
anthropic's ``anthropic_client(guard)``), importing neither SDK."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .errors import LLMGuardError
from .transport import _client

if TYPE_CHECKING:
    from .guard import Guard

_COPY = "an SDK client of a Guard needs the Guard (or, from copy(), the SDK's own keywords)"

_KEY = "llmguard"  # never sent anywhere: the transport answers in process
T = TypeVar("T")
E = TypeVar("E", bound=BaseException)
StreamError = Callable[[LLMGuardError, Any], BaseException]
_TEXT = "_llmguard_text"  # an SDK error that is also the Guard's: the Guard error's text


def _options(
    guard: Guard, *, asynchronous: bool, base_url: str, stream_error: StreamError | None = None
) -> dict[str, Any]:
    """An SDK client's options over the Guard's transport (openai's, anthropic's): no retries
    (one loop, the Guard's) and no timeout of its own (the Guard's bounds each call; a per-call
    ``timeout=`` shortens a plain call's and bounds a stream's silence, see
    :mod:`llmguard_sdk.transport`; anthropic's default one also refuses a plain call with a
    large ``max_tokens``). A failed call is answered as the seam answers it (the SDK raises its
    error for the status); ``stream_error``: what a stream that fails after it began raises
    (the transport's ``stream_error``), else the seam's error event."""
    # httpx2 where installed (openai 3.x), else httpx (openai 1.x and 2.x)
    client = _client(
        guard, None, asynchronous=asynchronous, base_url=base_url, stream_error=stream_error
    )
    return {
        "api_key": _KEY,
        "base_url": base_url,
        "max_retries": 0,
        "http_client": client,
        "timeout": None,
    }


def _given(guard: Guard | None, options: dict[str, Any], **how: Any) -> dict[str, Any]:
    """An SDK client's keywords: :func:`_options` of ``guard``, or (the SDK's ``copy()`` builds
    a new client of the class from its own keywords, and sets the Guard afterwards) those."""
    if guard is not None:
        return _options(guard, **how)
    if not options:
        raise TypeError(_COPY)
    return options


class _Tagged:
    """Puts the Guard's view on every parsed object; ``copy()`` / ``with_options()`` keep the
    Guard (the SDK builds the copy from its own keywords, the Guard's transport among them)."""

    guard: Guard | None

    def copy(self, *args: Any, **kwargs: Any) -> Any:
        """The SDK's ``copy()`` (``with_options()``), answered by the same Guard."""
        copied = super().copy(*args, **kwargs)  # type: ignore[misc]
        copied.guard = self.guard
        return copied

    with_options = copy

    def _process_response_data(self, *, data: object, cast_to: type[T], response: Any) -> T:
        parsed: T = super()._process_response_data(  # type: ignore[misc]
            data=data, cast_to=cast_to, response=response
        )
        served = response.extensions.get("llmguard")
        if served is not None and hasattr(parsed, "__pydantic_fields__"):
            object.__setattr__(parsed, "llmguard", served)  # outside the fields: not dumped
        return parsed


def _both(guard_error: object, made: E, text: str | None = None) -> E:
    """``made`` (the SDK's error for a failed call) as an error that is also ``guard_error``'s
    class, with the Guard error's attributes and the SDK's (the SDK's win where both have one:
    ``status_code``, ``body``), the Guard error's message (``text``, where given, in
    ``str()``), traceback and chaining; ``made`` itself when there is no Guard error or the
    two classes cannot be combined."""
    if not isinstance(guard_error, LLMGuardError):
        return made
    kind = _both_class(type(guard_error), type(made))  # type: ignore[arg-type]  # (hashable)
    if kind is None:
        return made
    both = cast("E", kind.__new__(kind))
    both.args = guard_error.args
    vars(both).update(vars(guard_error))
    vars(both).update(vars(made))
    # its text as it was (a ProviderError's names its status_code, which is now the SDK's)
    vars(both)[_TEXT] = str(guard_error) if text is None else text
    both.__traceback__ = guard_error.__traceback__
    both.__cause__ = guard_error.__cause__
    both.__context__ = guard_error.__context__
    both.__suppress_context__ = guard_error.__suppress_context__
    return both


@functools.lru_cache(maxsize=128)
def _both_class(guard: type, sdk: type) -> type[BaseException] | None:
    """The class of the Guard's ``guard`` errors that are also the SDK's ``sdk`` ones, made
    once per pair; named as ``guard`` is, so tracebacks read as before. ``None`` where their
    layouts cannot be combined (no such pair today: pydantic's ``ValidationError`` is the only
    C-level base in the tree, and settings errors never come from a call)."""
    namespace = {
        "__module__": guard.__module__,
        "__qualname__": guard.__qualname__,
        "__doc__": f"{guard.__name__} that is also {sdk.__module__}'s {sdk.__name__}.",
        "__reduce__": _reduce_both,
        "__str__": _text,
    }
    try:
        return type(guard.__name__, (guard, sdk), namespace)
    except TypeError:
        return None


def _text(error: BaseException) -> str:
    return str(vars(error)[_TEXT])


def _reduce_both(error: BaseException) -> tuple[Any, ...]:
    # the class is made at run time: pickled as its two bases (each by its own name)
    guard, sdk = type(error).__bases__
    return (_rebuilt_both, (guard, sdk, error.args), vars(error))


def _rebuilt_both(
    guard: type[LLMGuardError], sdk: type[BaseException], args: tuple[Any, ...]
) -> BaseException:
    kind = _both_class(guard, sdk)  # type: ignore[arg-type]  # (a class is hashable)
    if kind is None:  # (cannot happen: it was made before it was pickled)
        raise TypeError(f"{guard.__name__} and {sdk.__name__} cannot be combined")
    error = kind.__new__(kind)
    error.args = args
    return error


class _BothErrors:
    """An SDK client's status error for a failed call (made from the seam's answer, as for
    any server's: openai's, anthropic's ``_make_status_error``), as the Guard's error too (the
    transport's ``llmguard_error``); put before the SDK's client class. Its text is the
    seam's error message: the Guard error's, with OpenAI's wording for an overflow (what
    frameworks look for)."""

    def _make_status_error(self, err_msg: str, *, body: object, response: Any) -> Any:
        made = super()._make_status_error(  # type: ignore[misc]
            err_msg, body=body, response=response
        )
        error = body.get("error") if isinstance(body, dict) else None
        text = error.get("message") if isinstance(error, dict) else None
        guard_error = response.extensions.get("llmguard_error")
        return _both(guard_error, made, text if isinstance(text, str) else None)
