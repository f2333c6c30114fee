"""The usage parser's counts by type: a plain ``int`` is read at once, anything else as before
(a bool is no count, an ``int`` subclass is one, a negative or absurd one is none), in the top
level counts and in the details (a mapping that is not a dict read as a dict is)."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from llmguard_sdk.budget._usage import MOST_TOKENS, usage_from_payload


class _Count(enum.IntEnum):
    TWELVE = 12
    ABSURD = MOST_TOKENS + 1


class _Details(Mapping[str, Any]):
    """A details object that is a Mapping but no dict."""

    def __init__(self, **values: Any) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def test_a_plain_count_and_an_int_subclass_read_alike() -> None:
    plain, _ = usage_from_payload({"prompt_tokens": 30, "completion_tokens": 12})
    sub, _ = usage_from_payload({"prompt_tokens": 30, "completion_tokens": _Count.TWELVE})
    assert plain is not None
    assert sub is not None
    assert (sub.input_tokens, sub.output_tokens) == (plain.input_tokens, plain.output_tokens)


@pytest.mark.parametrize("output", [True, -1, 1.5, "12", None])
def test_what_is_no_count_leaves_no_usage(output: object) -> None:
    assert usage_from_payload({"prompt_tokens": 30, "completion_tokens": output}) == (None, None)


@pytest.mark.parametrize("absurd", [MOST_TOKENS + 1, _Count.ABSURD])
def test_an_absurd_count_of_either_type_leaves_no_usage(absurd: int) -> None:
    assert usage_from_payload({"prompt_tokens": absurd, "completion_tokens": 1}) == (None, None)
    details = {"prompt_tokens_details": {"cached_tokens": absurd}}
    assert usage_from_payload({"prompt_tokens": 9, "completion_tokens": 1, **details}) == (
        None,
        None,
    )


@pytest.mark.parametrize("cached", [True, -3, 2.0, None])
def test_a_detail_that_is_no_count_reads_zero(cached: object) -> None:
    usage, _ = usage_from_payload(
        {
            "prompt_tokens": 30,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
    )
    assert usage is not None
    assert usage.cached_input_tokens == 0


@pytest.mark.parametrize("details", [{"cached_tokens": 7}, _Details(cached_tokens=7)])
def test_details_in_a_dict_or_another_mapping(details: Mapping[str, Any]) -> None:
    usage, _ = usage_from_payload(
        {"prompt_tokens": 30, "completion_tokens": 2, "prompt_tokens_details": details}
    )
    assert usage is not None
    assert usage.cached_input_tokens == 7


@pytest.mark.parametrize("details", [None, 5, "x", ["cached_tokens"]])
def test_details_that_are_no_mapping_read_zero(details: object) -> None:
    usage, _ = usage_from_payload(
        {"prompt_tokens": 30, "completion_tokens": 2, "prompt_tokens_details": details}
    )
    assert usage is not None
    assert usage.cached_input_tokens == 0
