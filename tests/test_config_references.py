"""``${NAME}`` references are read in ``api_key``, ``base_url``, ``headers`` and ``store``;
anywhere else one is refused naming the key, not taken as written."""

from __future__ import annotations

from typing import Any

import pytest

from llmguard_sdk import ConfigurationError, Guard
from llmguard_sdk._config_file import load_config

ROUTE = {"model": "vllm/m", "base_url": "http://127.0.0.1:9/v1"}
GROUP = {"group": "g", "deployments": [{**ROUTE, "name": "d"}]}
TASKS = {"tiers": {"s": ["vllm"]}}


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"routes": [{**ROUTE, "model": "vllm/${MODEL}"}]}, "routes.0.model"),
        ({"routes": [{**ROUTE, "name": "${ROUTE_NAME}"}]}, "routes.0.name"),
        ({"routes": [{"model": "azure/d", "api_version": "${OPENAI_API_VERSION}"}]},
         "routes.0.api_version"),
        ({"routes": [{**GROUP, "group": "${GROUP}"}]}, "routes.0.group"),
        ({"routes": [{**GROUP, "region": "${REGION}"}]}, "routes.0.region"),
        ({"routes": [{**GROUP, "regions": {"d": "${REGION}"}}]}, "routes.0.regions"),
        ({"routes": [GROUP], "tasks": {"tiers": {"s": ["${TIER}"]}}}, "tasks.tiers"),
        ({"routes": [ROUTE], "tasks": {**TASKS, "default": "${TIER}"}}, "tasks.default"),
        ({"routes": [ROUTE], "tasks": {**TASKS, "rules": [{"tier": "s", "tenant": ["${T}"]}]}},
         "tasks.rules.0.tenant"),
        ({"routes": [ROUTE], "tasks": {**TASKS, "cascades": {"c": {"tiers": ["s", "${T}"]}}}},
         "tasks.cascades.c.tiers"),
    ],
)  # fmt: skip
def test_a_reference_where_none_is_read_is_refused_naming_the_key(
    data: dict[str, Any], key: str
) -> None:
    """``model = "vllm/${MODEL}"`` sent the model ``${MODEL}``; a tier, tenant or region
    named ``${...}`` never matched anything, without a word."""
    with pytest.raises(ConfigurationError, match="reference is read only in api_key") as caught:
        load_config(data)
    assert f"configuration: {key}:" in str(caught.value)


def test_references_where_they_are_read_still_resolve() -> None:
    route = {
        "model": "vllm/m",
        "base_url": "http://${GW_HOST}/v1",
        "api_key": "${GW_KEY}",
        "headers": {"X-Team": "${TEAM}"},
    }
    environ = {"GW_HOST": "127.0.0.1:9", "GW_KEY": "k", "TEAM": "t", "R": "memory"}
    config = {"routes": [route], "store": "${R}"}
    with Guard.from_config(config, environ=environ, telemetry=False) as guard:
        assert guard.routes[0].base_url == "http://127.0.0.1:9/v1"  # type: ignore[attr-defined]
