"""The compact table of quiet budget counters' spend: the same answers as a dict, whatever
the order of puts and pops, in a few machine words a counter."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from llmguard_sdk.budget._spend import SpendTable

ALERTS = frozenset({0.5, 0.9})

operations = st.lists(
    st.tuples(
        st.sampled_from(["put", "pop", "get"]),
        st.integers(0, 300),  # few keys: puts and pops of the same ones, long probe runs
        st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(2**63, 2**80)),
        st.booleans(),
    ),
    max_size=600,
)


@given(operations)
@settings(max_examples=200, deadline=None)
def test_the_table_answers_as_a_dict_does(steps: list[tuple[str, int, int, bool]]) -> None:
    table, kept = SpendTable(), {}
    for operation, number, spent, fired in steps:
        key = f"tenant.each.day.{number:016x}"
        if operation == "put":
            table.put(key, spent, ALERTS if fired else None)
            kept[key] = (spent, ALERTS if fired else None)
        elif operation == "pop":
            assert table.pop(key) == kept.pop(key, None)
        else:
            assert table.get(key) == kept.get(key)
        assert len(table) == len(kept)
    assert all(table.get(key) == found for key, found in kept.items())


def test_keys_that_come_and_go_leave_the_others_findable() -> None:
    table = SpendTable()
    for i in range(5_000):
        table.put(f"k{i}", i)
    for i in range(0, 5_000, 2):  # every other one goes: the runs after each are shifted
        assert table.pop(f"k{i}") == (i, None)
    assert len(table) == 2_500
    assert all(table.get(f"k{i}") == (None if i % 2 == 0 else (i, None)) for i in range(5_000))
    table.put("k1", 7, ALERTS)
    assert table.get("k1") == (7, ALERTS)
    table.put("k1", 8)  # a later put without alerts drops them
    assert table.get("k1") == (8, None)


def test_a_counter_costs_a_few_machine_words_whatever_its_key() -> None:
    keys = [f"tenant.each.day.{i:016x}.{'x' * 40}" for i in range(50_000)]
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    table = SpendTable()
    for i, key in enumerate(keys):
        table.put(key, 10**9 + i)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 50_000 * 50  # 16 bytes a slot, at most 2/3 of the slots used
    assert table.get(keys[123]) == (10**9 + 123, None)
