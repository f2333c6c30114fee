"""The settings' error (see :mod:`llmguard_sdk.errors`, which exports it): both a
:class:`~llmguard_sdk.errors.ConfigurationError` and pydantic's ``ValidationError``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from ._base import ConfigurationError

__all__ = ["SettingsValidationError", "settings_error"]


class SettingsValidationError(ConfigurationError, ValidationError):
    """:class:`~llmguard_sdk.GuardSettings` refused a value: built directly
    (``GuardSettings(timeout=-1)``, ``model_validate`` ...), from ``LLMGUARD_*`` variables or
    from a Guard's arguments.

    It is both a :class:`ConfigurationError`, as every bad setting the SDK refuses, and
    pydantic's ``ValidationError``, as settings built directly raised before, so either
    ``except`` catches it. ``str()`` is the SDK's one line, each problem as ``field: what was
    expected`` (or the variable or argument that gave it); ``errors()``, ``error_count()``,
    ``json()`` and ``title`` are pydantic's details, a value that may hold a secret (a key, a
    URL's password) masked in them. It is built from a ``ValidationError`` with
    :meth:`from_validation_error`, not called.

    .. versionadded:: 0.2.0
    """

    @classmethod
    def from_validation_error(
        cls,
        error: ValidationError,
        message: str,
        *,
        shown_input: Callable[[Mapping[str, Any]], object] | None = None,
    ) -> SettingsValidationError:
        """``error``'s details with ``message`` as the text; ``shown_input`` gives, for each
        of the details, the input ``errors()`` shows (a secret masked)."""
        details: list[Any] = [
            {**detail, "input": shown_input(detail)} if shown_input else detail
            for detail in error.errors()
        ]
        made = cls.from_exception_data(error.title, details, hide_input=True)
        made.args = (message,)
        return made

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ValidationError.__str__(self)

    def __repr__(self) -> str:  # pydantic's repr repeats every input: never a value here
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt from its details, as pydantic's own are; the message and attributes on top
        details = (type(self), self.title, self.errors(), self.args)
        return (settings_error, details, vars(self))


def settings_error(
    cls: type[SettingsValidationError], title: str, details: list[Any], args: tuple[Any, ...]
) -> SettingsValidationError:
    error = cls.from_exception_data(title, details, hide_input=True)
    error.args = args
    return error
