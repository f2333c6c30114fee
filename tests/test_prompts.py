"""PromptBuilder, the static-part linter, drift events, cache keys and hit ratios."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest

from llmguard_sdk import (
    CallEvent,
    ChatRequest,
    ConfigurationError,
    Guard,
    OpenAICompatibleProvider,
    PromptLintError,
    RequestValidationError,
    Scope,
    Usage,
    scoped,
)
from llmguard_sdk.prompts import (
    PREFIX_HASH_KEY,
    STATIC_MESSAGES_KEY,
    TEMPLATE_KEY,
    Document,
    DriftMonitor,
    Example,
    PrefixCacheStats,
    PrefixDrift,
    PromptBuilder,
    canonical_json,
    lint_text,
    prompt_cache_key,
)
from llmguard_sdk.providers.wire import OPENAI_HINT_KEY
from llmguard_sdk.testing import FakeProvider

SEARCH = {
    "type": "function",
    "function": {
        "name": "search_orders",
        "description": "Find a customer's orders.",
        "parameters": {
            "type": "object",
            "properties": {"status": {"type": "string"}, "email": {"type": "string"}},
            "required": ["email"],
        },
    },
}
REFUND = {
    "function": {"parameters": {"type": "object", "properties": {}}, "name": "refund"},
    "type": "function",
}
INSTRUCTIONS = "You are the support assistant of a bicycle shop. Answer briefly and politely."


def builder(**options: Any) -> PromptBuilder:
    options.setdefault("drift", None)
    options.setdefault("tools", [SEARCH, REFUND])
    return PromptBuilder(
        "support",
        instructions=INSTRUCTIONS,
        examples=[("Do you sell helmets?", "Yes, in three sizes.")],
        documents=[
            Document("Returns are accepted within 30 days.", title="Returns", id="b-returns"),
            Document("Delivery takes two to four working days.", title="Delivery", id="a-delivery"),
        ],
        **options,
    )


# -- assembly ------------------------------------------------------------------------------


def test_sections_come_static_first_and_the_user_content_last() -> None:
    prompt = builder().build(
        "Where is my order?",
        history=[
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
        ],
        context={"now": "2025-03-01 10:00", "plan": "gold"},
    )
    roles = [m.role for m in prompt.messages]
    assert roles == ["system", "user", "assistant", "user"]
    system = prompt.messages[0].text
    order = [
        system.index(INSTRUCTIONS),
        system.index("## Examples"),
        system.index("Do you sell helmets?"),
        system.index("## Reference documents"),
        system.index("### Delivery"),  # id "a-delivery" sorts first
        system.index("### Returns"),
    ]
    assert order == sorted(order)
    last = prompt.messages[-1].text
    assert last.endswith("Where is my order?")
    assert last.index("now: 2025-03-01 10:00") < last.index("plan: gold") < last.index("Where")
    assert "2025" not in system  # per-call context never reaches the static part
    assert prompt.static_messages == 1
    assert prompt.history_messages == 2


def test_tools_are_canonical_json_in_a_stable_order() -> None:
    first = builder().build("q")
    shuffled = json.loads(json.dumps(SEARCH), object_pairs_hook=lambda p: dict(reversed(p)))
    second = builder(tools=[REFUND, shuffled]).build("q")
    assert first.tools is not None
    assert [t["function"]["name"] for t in first.tools] == ["refund", "search_orders"]
    assert json.dumps(first.tools) == json.dumps(second.tools)
    assert json.dumps(first.tools) == canonical_json(list(first.tools)).replace(",", ", ").replace(
        ":", ": "
    )
    assert first.prefix_hash == second.prefix_hash
    assert list(first.tools[1]["function"]["parameters"]["properties"]) == ["email", "status"]


def test_documents_keep_a_stable_order_whatever_order_they_come_in() -> None:
    docs: list[Document | str | dict[str, str]] = [
        Document("Text b.", id="2"),
        "Plain text a.",
        {"text": "Text c.", "id": "1"},
    ]
    one = PromptBuilder("docs", documents=docs, drift=None)
    other = PromptBuilder("docs", documents=list(reversed(docs)), drift=None)
    assert one.static_text == other.static_text
    assert one.static_text.index("Plain text a.") < one.static_text.index("Text c.")
    given = PromptBuilder("docs", drift=None).set_documents(docs, sort=False)
    assert given.static_text.index("Text b.") < given.static_text.index("Plain text a.")


def test_the_same_static_part_gives_the_same_prefix_and_the_tail_changes_nothing() -> None:
    b = builder()
    one = b.build("first question", history=[{"role": "user", "content": "x"}], context="a")
    two = b.build("another one", context="b", tenant="acme")
    assert one.prefix_hash == two.prefix_hash
    assert one.messages[0] == two.messages[0]
    assert builder().prefix_hash == b.prefix_hash  # stable across builders and processes
    changed = builder().set_instructions(INSTRUCTIONS + " Always sign as Sam.")
    assert changed.prefix_hash != b.prefix_hash


def test_request_carries_template_metadata_and_the_cache_key() -> None:
    prompt = builder().build("Where is my order?", tenant="acme")
    request = prompt.request(max_tokens=50, metadata={"team": "care"}, extra_body={"x": 1})
    assert isinstance(request, ChatRequest)
    assert request.max_tokens == 50
    assert request.metadata == {
        "team": "care",
        TEMPLATE_KEY: "support",
        PREFIX_HASH_KEY: prompt.prefix_hash,
        STATIC_MESSAGES_KEY: "1",
        OPENAI_HINT_KEY: "prompt_cache_key",  # (sent where the route's API takes it)
    }
    assert request.extra_body == {"x": 1, "prompt_cache_key": prompt_cache_key("support", "acme")}
    assert request.tools is not None
    assert len(request.tools) == 2
    assert prompt.request(send_cache_key=False).extra_body is None
    with pytest.raises(RequestValidationError, match="max_tokens"):
        prompt.request(max_tokens=0)
    params = prompt.openai_params()
    assert params["prompt_cache_key"] == prompt.cache_key
    assert params["messages"][0]["role"] == "system"


def test_cache_keys_are_stable_per_template_and_tenant_and_hide_the_tenant() -> None:
    key = prompt_cache_key("support", "acme")
    assert key == prompt_cache_key("support", "acme")
    assert key != prompt_cache_key("support", "globex")
    assert key != prompt_cache_key("billing", "acme")
    assert "acme" not in key
    assert prompt_cache_key("support") == "support"
    with scoped(tenant="acme"):
        assert builder().build("q").cache_key == key  # the scope's tenant by default


def test_templates_whose_names_are_rewritten_or_cut_still_get_keys_of_their_own() -> None:
    """Key characters are ASCII: every Chinese name became ``-``, and names were cut at 48."""
    assert prompt_cache_key("客服") != prompt_cache_key("账单")
    long = "customer-support-assistant-for-enterprise-billing-"
    assert prompt_cache_key(long + "v1") != prompt_cache_key(long + "v2")
    assert prompt_cache_key("support bot") != prompt_cache_key("support-bot") == "support-bot"
    for key in (prompt_cache_key("客服", "acme"), prompt_cache_key(long * 3)):
        assert re.fullmatch(r"[A-Za-z0-9_.:-]+", key), key
        assert len(key.partition(":")[0]) <= 48, key


def test_bad_input_raises_typed_errors() -> None:
    with pytest.raises(ConfigurationError):
        PromptBuilder("")
    with pytest.raises(ConfigurationError, match="two tools"):
        PromptBuilder("t", tools=[SEARCH, SEARCH])
    with pytest.raises(ConfigurationError, match="name"):
        PromptBuilder("t", tools=[{"type": "function"}])
    with pytest.raises(ConfigurationError, match="JSON"):
        PromptBuilder("t", tools=[{"name": "x", "bad": {1, 2}}])
    with pytest.raises(ConfigurationError, match="example"):
        PromptBuilder("t", examples=["just a string"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="no text"):
        PromptBuilder("t", documents=["  "])
    with pytest.raises(ValueError, match="unknown lint rules"):
        PromptBuilder("t", lint_ignore=["nonsense"])
    b = PromptBuilder("t", instructions="Be brief.", drift=None)
    with pytest.raises(RequestValidationError, match="empty"):
        b.build("")
    with pytest.raises(RequestValidationError, match="history"):
        b.build("q", history=[{"role": "wizard", "content": "x"}])


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"tools": ["search_orders"]}, "tool"),  # a name, not a definition
        ({"tools": [5]}, "tool"),
        (
            {"documents": [{"text": "Returns.", "title": 5}, {"text": "Delivery.", "title": "B"}]},
            "title",
        ),
        ({"documents": [{"text": "Returns.", "id": 7}]}, "id"),
        ({"documents": [Document(text=5)]}, "text"),  # type: ignore[arg-type]
    ],
)
def test_bad_tools_and_documents_are_configuration_errors(
    options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):
        PromptBuilder("t", drift=None, **options)


def test_a_single_document_string_is_one_document_not_one_per_character() -> None:
    b = PromptBuilder("t", documents="Returns.", drift=None)  # was 8 documents: "R", "e" ...
    assert b.static_text == "## Reference documents\n\n### Document 1\nReturns."
    handbook = "Returns are accepted within 30 days."  # raised: "a document has no text" (" ")
    assert PromptBuilder("t", documents=handbook, drift=None).static_text.endswith(handbook)


def test_a_context_mapping_with_keys_of_mixed_types_is_rendered() -> None:
    mixed: dict[Any, str] = {"plan": "pro", 7: "seven"}
    prompt = PromptBuilder("t", drift=None).build("q", context=mixed)
    assert prompt.messages[-1].content == "<context>\n7: seven\nplan: pro\n</context>\n\nq"


def test_equal_contexts_render_the_same_bytes_whatever_order_they_were_built_in() -> None:
    """Nested values of a context mapping were rendered with ``str()``: a dict in its
    insertion order, a set in its hash order (which differs between processes), so equal
    contexts made different requests, and the exact cache, keyed on them, missed. They are
    canonical JSON now (sorted keys, sets sorted); text and numbers stay as they were."""
    b = PromptBuilder("t", drift=None)
    one = b.build("q", context={"cart": {"b": 1, "a": [2, {"y": 0, "x": 1}]}, "tags": {"z", "x"}})
    two = b.build("q", context={"tags": {"x", "z"}, "cart": {"a": [2, {"x": 1, "y": 0}], "b": 1}})
    assert one.messages[-1].content == two.messages[-1].content
    assert one.messages[-1].content == (
        '<context>\ncart: {"a":[2,{"x":1,"y":0}],"b":1}\ntags: ["x","z"]\n</context>\n\nq'
    )
    plain = b.build("q", context={"plan": "pro", "seats": 3, "trial": False, "ends": None})
    assert plain.messages[-1].content == (
        "<context>\nends: None\nplan: pro\nseats: 3\ntrial: False\n</context>\n\nq"
    )


def test_content_parts_and_examples_in_every_form() -> None:
    b = PromptBuilder(
        "t",
        instructions="Describe images.",
        examples=[Example("a", "b"), {"user": "c", "assistant": "d"}],
        drift=None,
    )
    image = {"type": "image_url", "image_url": {"url": "https://example.invalid/x.png"}}
    prompt = b.build([{"type": "text", "text": "What is this?"}, image], context="tz: UTC")
    content = prompt.messages[-1].content
    assert isinstance(content, list)
    assert content[0] == {"type": "text", "text": "<context>\ntz: UTC\n</context>\n\n"}
    assert content[-1] == image
    assert "User: c\nAssistant: d" in prompt.static_text
    bare = PromptBuilder("bare", drift=None).build("hello")
    assert [m.role for m in bare.messages] == ["user"]
    assert bare.static_messages == 0


# -- the linter ----------------------------------------------------------------------------

CLEAN = (
    "You are the support assistant of a bicycle shop.\n\n"
    "Rules:\n- Be brief.\n- Quote prices in euros, e.g. 19.99 EUR.\n- Orders ship in 2 to 4 days.\n"
    'Reply as JSON like {"answer": "...", "confidence": 0.9}.\n'
    "Use the search_orders tool for order questions; section 4.2 covers refunds."
)


@pytest.mark.parametrize(
    ("rule", "text", "offender"),
    [
        ("timestamp", "Today is 2025-03-01.", "2025-03-01"),
        ("timestamp", "Generated at 2025-03-01T10:22:31Z for you.", "2025-03-01T10:22:31Z"),
        ("timestamp", "It is now 14:05 in Paris.", "14:05"),
        ("timestamp", "As of March 3, 2025 the shop is open.", "March 3, 2025"),
        ("timestamp", "Valid until 03/01/2025.", "03/01/2025"),
        ("timestamp", "epoch 1741000000 seconds", "1741000000"),
        ("timestamp", "Now: 1741000000.5241392 (time.time())", "1741000000.5241392"),
        ("timestamp", "The clock read 1741000000.", "1741000000"),
        (
            "random-id",
            "Request 3f2b8c1e-9a4d-4e2f-8b1a-0c9d8e7f6a5b.",
            "3f2b8c1e-9a4d-4e2f-8b1a-0c9d8e7f6a5b",
        ),
        ("random-id", "nonce deadbeef00c0ffee1234", "deadbeef00c0ffee1234"),
        ("random-id", "trace req_8fK3dL92mQx7Zp4Tn1Ba here", "req_8fK3dL92mQx7Zp4Tn1Ba"),
        ("unsorted-json", 'Schema: {"name": "x", "age": 3}.', '{"name": "x", "age": 3}'),
        ("unsorted-json", 'Nested {"a": {"z": 1, "b": 2}}', '{"a": {"z": 1, "b": 2}}'),
        ("whitespace", "Be brief.   \nThen stop.", "   "),
        ("whitespace", "Line one.\r\nLine two.", "\r"),
        ("whitespace", "Rule:\tone", "\t"),
        ("whitespace", "One.\n\n\n\nTwo.", "\n\n\n\n"),
        ("whitespace", "A\u00a0B", "\u00a0"),
        ("whitespace", " Leading space.", " "),
        ("per-user", "Write to jane.doe@example.com for help.", "jane.doe@example.com"),
        ("per-user", "Call +1 415-555-0100 now.", "+1 415-555-0100"),
        ("per-user", "The customer_id: 88412 is premium.", "customer_id: 88412"),
    ],
)
def test_each_lint_rule_finds_its_breaker_with_the_span(
    rule: str, text: str, offender: str
) -> None:
    found = [w for w in lint_text(text, section="instructions") if w.rule == rule]
    assert found, f"{rule} missed {offender!r}"
    warning = found[0]
    assert warning.text == offender
    assert text[warning.start : warning.end] == offender
    assert warning.section == "instructions"
    assert offender.strip() in str(warning) or warning.rule in str(warning)


def test_clean_text_passes_every_rule() -> None:
    assert lint_text(CLEAN) == []
    assert builder().lint() == []


def test_known_values_and_ignored_rules() -> None:
    text = "You help the ACME-Corp team."
    assert [w.text for w in lint_text(text, known_values=["ACME-Corp"])] == ["ACME-Corp"]
    assert lint_text(text, known_values=["ACME-Corp"], ignore=["per-user"]) == []
    assert lint_text("Today is 2025-03-01.", ignore=["timestamp"]) == []


def test_a_single_string_is_one_known_value_or_rule_not_its_characters() -> None:
    text = "You serve Globex Inc. Today is 2025-03-01."
    assert [w.text for w in lint_text(text, known_values="Globex", ignore="timestamp")] == [
        "Globex"
    ]
    b = PromptBuilder("t", instructions=text, lint_ignore="timestamp", drift=None)
    assert [w.text for w in b.lint("Globex")] == ["Globex"]  # found, not 6 letters missed


def test_strict_builders_raise_with_the_findings() -> None:
    strict = PromptBuilder(
        "strict", instructions="Today is 2025-03-01. Be brief.", strict=True, drift=None
    )
    with pytest.raises(PromptLintError) as caught:
        strict.build("hello")
    error = caught.value
    assert isinstance(error, RequestValidationError)
    assert error.template == "strict"
    assert [(w.rule, w.text) for w in error.warnings] == [("timestamp", "2025-03-01")]
    assert error.details[0]["section"] == "instructions"
    assert error.details[0]["start"] == 9
    relaxed = PromptBuilder(
        "relaxed", instructions="Today is 2025-03-01.", strict=True, lint_ignore=["timestamp"]
    )
    relaxed.drift = None
    relaxed.build("hello")  # no error


def test_a_tenant_in_the_static_part_is_found_at_build_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    strict = PromptBuilder("t", instructions="You serve Globex Inc.", strict=True, drift=None)
    strict.build("hi", tenant="acme")
    with pytest.raises(PromptLintError, match="Globex"):
        strict.build("hi", tenant="Globex")
    lenient = PromptBuilder("t2", instructions="You serve Globex Inc.", drift=None)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        lenient.build("hi", user="Globex")
    assert "Globex" in caplog.text


def test_lenient_builders_log_their_findings_once_per_prefix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    b = PromptBuilder("lenient", instructions="Today is 2025-03-01.", drift=None)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        b.build("one")
        b.build("two")
    assert caplog.text.count("cache-breaking text") == 1


def test_a_lenient_builder_logs_a_tenant_in_its_static_part_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # every build of the tenant's calls logged it again: a warning a call
    b = PromptBuilder("per-tenant", instructions="You serve Globex Inc.", drift=None)
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        for _ in range(3):
            b.build("hi", tenant="Globex")
        b.build("hi", tenant="acme")  # (not in the static part: nothing to say)
        b.build("hi", tenant="Inc.")  # another value found: said once too
        b.build("hi", tenant="Inc.")
    assert caplog.text.count("cache-breaking text") == 2


# -- drift ---------------------------------------------------------------------------------


def test_drift_fires_when_the_prefix_changes_and_not_when_only_the_tail_does() -> None:
    events: list[PrefixDrift] = []
    monitor = DriftMonitor([events.append])
    b = builder(drift=monitor)
    b.build("first", context={"now": "10:00"})
    b.build("second", context={"now": "10:01"}, history=[{"role": "user", "content": "x"}])
    assert events == []
    b.set_instructions(INSTRUCTIONS + " Mention the sale.")
    b.build("third")
    assert len(events) == 1
    event = events[0]
    assert event.template == "support"
    assert event.sections == ("instructions",)
    assert event.previous_hash != event.prefix_hash == b.prefix_hash
    assert event.offset == len(INSTRUCTIONS)
    assert "Mention the sale" in event.after
    assert event.changes == 1
    b.build("fourth")
    assert len(events) == 1


def test_drift_is_tracked_per_template_across_builders() -> None:
    events: list[PrefixDrift] = []
    monitor = DriftMonitor([events.append])
    for minute in ("10:00", "10:01"):  # the classic bug: a new system prompt on every call
        PromptBuilder("news", instructions=f"It is {minute}.", drift=monitor).build("q")
    PromptBuilder("other", instructions="Stable.", drift=monitor).build("q")
    assert [e.template for e in events] == ["news"]
    tools_changed = PromptBuilder(
        "news", instructions="It is 10:01.", tools=[REFUND], drift=monitor
    )
    tools_changed.build("q")
    assert events[-1].sections == ("tools",)
    monitor.forget("news")
    PromptBuilder("news", instructions="New start.", drift=monitor).build("q")
    assert len(events) == 2


def test_drift_without_hooks_logs_and_failing_hooks_do_not_break_builds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet = DriftMonitor()
    with caplog.at_level(logging.WARNING, logger="llmguard_sdk"):
        PromptBuilder("x", instructions="A.", drift=quiet).build("q")
        PromptBuilder("x", instructions="B.", drift=quiet).build("q")
    assert "static prefix changed" in caplog.text

    def broken(event: PrefixDrift) -> None:
        raise RuntimeError("hook bug")

    loud = DriftMonitor([broken])
    PromptBuilder("y", instructions="A.", drift=loud).build("q")
    PromptBuilder("y", instructions="B.", drift=loud).build("q")  # logged, not raised
    seen: list[PrefixDrift] = []
    loud.add_hook(seen.append)
    PromptBuilder("y", instructions="C.", drift=loud).build("q")
    assert len(seen) == 1
    loud.remove_hook(seen.append)


def test_the_monitor_forgets_the_oldest_templates_beyond_its_bound() -> None:
    events: list[PrefixDrift] = []
    monitor = DriftMonitor([events.append], max_templates=2)
    for name in ("a", "b", "c"):
        monitor.observe(name, "h1", "x", {})
    monitor.observe("a", "h2", "y", {})  # "a" was forgotten: a first call again
    monitor.observe("c", "h2", "y", {})
    assert [e.template for e in events] == ["c"]
    with pytest.raises(ValueError, match="max_templates"):
        DriftMonitor(max_templates=0)


# -- hit ratio per feature -----------------------------------------------------------------


def call_event(feature: str | None, usage: Usage | None) -> CallEvent:
    return CallEvent(
        kind="chat",
        outcome="ok",
        scope=Scope(feature=feature),
        model="m",
        route="r",
        attempts=1,
        latency_s=0.1,
        usage=usage,
    )


def test_prefix_cache_stats_sum_cached_tokens_per_feature() -> None:
    stats = PrefixCacheStats()
    stats(call_event("support", Usage(input_tokens=100, cached_input_tokens=0)))
    stats(call_event("support", Usage(input_tokens=100, cached_input_tokens=80)))
    stats(call_event("search", Usage(input_tokens=50, cache_write_input_tokens=50)))
    stats(call_event("support", None))
    support = stats.feature("support")
    assert (support.calls, support.input_tokens, support.cached_tokens) == (2, 200, 80)
    assert support.calls_with_hits == 1
    assert stats.hit_ratio("support") == pytest.approx(0.4)
    assert stats.feature("search").written_tokens == 50
    assert stats.hit_ratio("nothing") == 0.0
    assert set(stats.snapshot()) == {"support", "search"}
    stats.reset()
    assert stats.snapshot() == {}


def test_prefix_cache_stats_keep_a_bounded_number_of_features(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a request id passed as the feature grew the stats by one entry a call, for good
    stats = PrefixCacheStats(max_features=2)
    for feature in ("support", "search", "req-1", "req-2", "support"):
        stats(call_event(feature, Usage(input_tokens=10, cached_input_tokens=5)))
    snapshot = stats.snapshot()
    assert set(snapshot) == {"support", "search", "other"}
    assert (snapshot["support"].calls, snapshot["other"].calls) == (2, 2)
    assert stats.feature("req-1").calls == 0  # counted under "other"
    assert sum("max_features" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(ConfigurationError, match="max_features"):
        PrefixCacheStats(max_features=0)


def test_openai_route_sends_the_cache_key_and_reports_the_hit_ratio() -> None:
    stats = PrefixCacheStats()
    b = builder()
    with FakeProvider(prefix_cache=True) as api:
        guard = Guard(
            OpenAICompatibleProvider(api.base_url, model="m", name="openai", send_cache_key=True),
            hooks=[stats],
            environ={},
        )
        with guard:
            for question in ("Where is my order?", "Can I return a helmet?", "Do you ship?"):
                prompt = b.build(question, tenant="acme")
                answer = guard.chat(request=prompt.request(max_tokens=20), feature="support")
                assert answer.usage is not None
            other = b.build("Unrelated", tenant="acme").request(max_tokens=5)
            guard.chat(request=other, feature="search")
        body = api.requests[0].body
        assert body["prompt_cache_key"] == prompt_cache_key("support", "acme")
        assert [t["function"]["name"] for t in body["tools"]] == ["refund", "search_orders"]
        sent = api.stats
    support = stats.feature("support")
    assert support.calls == 3
    assert support.calls_with_hits == 2  # the first call wrote the cache, the others read it
    assert support.cached_tokens == sent.cached_input_tokens - stats.feature("search").cached_tokens
    assert 0.5 < support.hit_ratio < 1.0
    assert stats.feature("search").hit_ratio > 0.5
