"""A release's parameters may add tools to a PromptBuilder's request (one without tools of its
own). The request's prefix hash describes the static part sent, tools included (the cached
prefix changes with them), so it is the hash of the tools sent: it was computed from the
request's own tools (none), and two releases sending different tools read as one prefix."""

from __future__ import annotations

from llmguard_sdk import PromptBuilder
from llmguard_sdk.prompts import PREFIX_HASH_KEY
from llmguard_sdk.releases import Release

from .test_releases_prompts import RELEASED, ROUTE_A, STATIC, TOOL


def _hash(release: Release) -> str:
    built = PromptBuilder("support", instructions=STATIC, drift=None).build("Which oil?")
    applied = release.apply(built.request())
    assert applied.tools == [TOOL]  # the release's tools are sent
    assert applied.metadata is not None
    return applied.metadata[PREFIX_HASH_KEY]


def test_a_release_prompt_with_the_releases_tools_is_hashed_with_them() -> None:
    release = Release(
        "support", "v2", ROUTE_A, system_prompt=RELEASED, parameters={"tools": [TOOL]}
    )
    expected = PromptBuilder("other", instructions=RELEASED, tools=[TOOL], drift=None)
    assert _hash(release) == expected.prefix_hash  # (was the hash of RELEASED alone)


def test_a_builders_static_part_with_the_releases_tools_is_hashed_with_them() -> None:
    release = Release("support", "v2", ROUTE_A, parameters={"tools": [TOOL]})
    expected = PromptBuilder("other", instructions=STATIC, tools=[TOOL], drift=None)
    assert _hash(release) == expected.prefix_hash  # (was the builder's hash without tools)
