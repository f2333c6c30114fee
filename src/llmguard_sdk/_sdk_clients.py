"""What the SDK clients over the Guard's transport share (openai's ``guard.client()``,
anthropic's ``anthropic_client(guard)``), importing neither SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from .transport import _client

if TYPE_CHECKING:
    from .guard import Guard

_COPY = "an SDK client of a Guard needs the Guard (or, from copy(), the SDK's own keywords)"

_KEY = "llmguard"  # never sent anywhere: the transport answers in process
T = TypeVar("T")


def _options(
    guard: Guard, *, asynchronous: bool, base_url: str, raise_errors: bool = True
) -> dict[str, Any]:
    """An SDK client's options over the Guard's transport (openai's, anthropic's): no retries
    (one loop, the Guard's) and no timeout of its own (the Guard's bounds each call, a per-call
    ``timeout=`` shortens it; anthropic's default one also refuses a plain call with a large
    ``max_tokens``)."""
    # httpx2 where installed (openai 3.x), else httpx (openai 1.x and 2.x)
    client = _client(
        guard, None, asynchronous=asynchronous, raise_errors=raise_errors, base_url=base_url
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
