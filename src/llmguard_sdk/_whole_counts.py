"""The bound of every whole-number count a setting holds, and the one message that says so.

A count of tokens (a route's ``context_window``, the Guard's ``max_input_tokens``) or of
attempts (``retry_attempts``) is a whole number from 1 to :data:`MOST`, 2**31 - 1: a request's
``max_tokens`` bound (an int32, as the chat APIs take), far above any model's context. The same
words are said wherever one is given: a configuration file, an ``LLMGUARD_*`` variable, an
argument, a provider's ``context_window=``.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from .models import _MOST_OUTPUT_TOKENS

__all__ = ["MOST", "count_problem", "read_count"]

MOST = _MOST_OUTPUT_TOKENS
"""The largest count a setting takes, 2**31 - 1."""


def _refusal(value: object, unit: str) -> str:
    return f"must be a whole number of {unit} from 1 to {MOST}, got {value!r:.40}"


def count_problem(value: object, unit: str = "tokens") -> str | None:
    """Why ``value``, given in code, is no count of ``unit`` (a bool, a string, a float, out of
    bounds), or None when it is one."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MOST:
        return None
    return _refusal(value, unit)


def _number(text: str) -> Decimal | None:
    """The number ``text`` writes (``1e3``, ``1_000``, `` 64.0 ``), or None."""
    try:
        return Decimal(text.strip())
    except InvalidOperation:
        return None


def _whole(number: Decimal) -> bool:
    return number.is_finite() and 1 <= number <= MOST and number == number.to_integral_value()


def read_count(value: object, unit: str = "tokens") -> object:
    """A pydantic ``before`` validator's reading of a count of ``unit`` (the caller refuses a
    bool first): a number out of bounds (NaN too) raises ``ValueError`` with the bound, as does
    text that writes no whole number within it (``1e30`` said pydantic's "unable to parse
    string as an integer"); text that does is read as the int (``1e3``: 1000, as in a JSON or
    TOML file). Anything else is pydantic's to judge (2.5: "a fractional part")."""
    if isinstance(value, str):
        number = _number(value)
        if number is None or not _whole(number):
            raise ValueError(_refusal(value, unit))
        return int(number)
    if isinstance(value, int | float) and not 1 <= value <= MOST:  # (NaN too)
        raise ValueError(_refusal(value, unit))
    return value
