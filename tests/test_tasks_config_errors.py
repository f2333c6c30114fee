"""Configuration mistakes in a TaskRouter's tiers and a cascade's ``json_schema`` check are
:class:`ConfigurationError` naming what is wrong, not a bare TypeError or ValueError from
deep inside (``TaskRouter(tiers={"a": 5})``: 'int' object is not iterable;
``json_schema("x")``: dictionary update sequence element has length 1)."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import TaskRouter
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.router import json_schema


@pytest.mark.parametrize("members", [5, 1.5, object(), {"mini"}, b"mini"])
def test_a_tier_that_lists_no_routes_is_a_configuration_error(members: Any) -> None:
    with pytest.raises(ConfigurationError, match="tier 'a'"):
        TaskRouter(tiers={"a": members})


@pytest.mark.parametrize("schema", ["x", 5, ["type", "object"], ("a", "b")])
def test_a_schema_that_is_no_mapping_is_a_configuration_error(schema: Any) -> None:
    with pytest.raises(ConfigurationError, match="json_schema"):
        json_schema(schema)
