"""``with`` and ``async with`` for objects that close: one definition for all of them."""

from __future__ import annotations

from typing_extensions import Self

__all__ = ["AsyncCloses", "Closes"]


class Closes:
    """``with obj:`` calls ``obj.close()`` at the end of the block."""

    def close(self) -> None:
        """Release what the object holds."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncCloses:
    """``async with obj:`` awaits ``obj.aclose()`` at the end of the block."""

    async def aclose(self) -> None:
        """Release what the object holds."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
