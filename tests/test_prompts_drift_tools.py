"""A drift that only the tools caused shows where the tools changed, not the unchanged text."""

from __future__ import annotations

import logging

import pytest

from llmguard_sdk.prompts import DriftMonitor, PrefixDrift, PromptBuilder

INSTRUCTIONS = "You answer questions about orders. Keep it short."


def _tool(name: str, description: str) -> dict[str, object]:
    return {"type": "function", "function": {"name": name, "description": description}}


def _watched(name: str, description: str, events: list[PrefixDrift]) -> PromptBuilder:
    """A builder with one tool whose drifts go to ``events``."""
    monitor = DriftMonitor([events.append])
    return PromptBuilder(
        name, instructions=INSTRUCTIONS, tools=[_tool("lookup", description)], drift=monitor
    )


def test_a_tools_only_drift_points_into_the_tools_json() -> None:
    events: list[PrefixDrift] = []
    builder = _watched("orders", "Find an order.", events)
    builder.build("where is my order?")
    builder.set_tools([_tool("lookup", "Find an order by its number.")])
    builder.build("where is my order?")
    (event,) = events
    assert event.sections == ("tools",)
    # before: the unchanged instructions on both sides ('...Keep it short.' -> the same)
    assert event.before != event.after
    assert "Find an order." in event.before
    assert "Find an order by its number." in event.after


def test_the_drift_log_says_the_tools_changed_and_how(caplog: pytest.LogCaptureFixture) -> None:
    builder = PromptBuilder(
        "orders-log", instructions=INSTRUCTIONS, tools=[_tool("lookup", "v1")], drift=DriftMonitor()
    )
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        builder.build("q")
        builder.set_tools([_tool("lookup", "v2")])
        builder.build("q")
    assert "tools at character" in caplog.text
    assert "of their JSON" in caplog.text
    assert "v1" in caplog.text
    assert "v2" in caplog.text


def test_a_text_drift_still_points_into_the_text() -> None:
    events: list[PrefixDrift] = []
    builder = _watched("orders-text", "v1", events)
    builder.build("q")
    builder.set_instructions(INSTRUCTIONS + " Be kind.").set_tools([_tool("lookup", "v2")])
    builder.build("q")
    (event,) = events
    assert event.sections == ("instructions", "tools")
    assert event.offset == len(INSTRUCTIONS)
    assert "Be kind." in event.after
