"""PromptBuilder and Prompt refuse bad input with the SDK's typed errors."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import openai
import pytest

from llmguard_sdk import ConfigurationError, RequestValidationError
from llmguard_sdk.prompts import DriftMonitor, PromptBuilder, lint_text, prompt_cache_key
from llmguard_sdk.testing import FakeProvider

TOOLS = [{"name": "search", "input_schema": {"type": "object"}}]
CALL = {"id": "call-1", "type": "function", "function": {"name": "search", "arguments": "{}"}}


def builder(**options: Any) -> PromptBuilder:
    return PromptBuilder("inputs", instructions="Answer briefly.", drift=None, **options)


@pytest.mark.parametrize("who", [{"tenant": 5}, {"user": ["u"]}])
def test_a_tenant_or_user_that_is_not_text_is_a_typed_error(who: dict[str, Any]) -> None:
    # AttributeError: 'int' object has no attribute 'strip'
    with pytest.raises(RequestValidationError, match="must be a string"):
        builder().build("hi", **who)


@pytest.mark.parametrize("field", ["metadata", "extra_body"])
def test_request_fields_that_are_not_objects_are_a_typed_error(field: str) -> None:
    # TypeError from dict() / ** on a list
    with pytest.raises(RequestValidationError, match=field):
        builder().build("hi").request(**{field: [1]})  # type: ignore[arg-type]


def test_a_request_cannot_replace_the_builders_tools() -> None:
    # tools= replaced the canonical, sorted tools (and the prefix hash described other tools)
    prompt = builder(tools=TOOLS).build("hi")
    with pytest.raises(RequestValidationError, match="tools"):
        prompt.request(tools=[{"name": "other", "input_schema": {"type": "object"}}])
    assert builder().build("hi").request(tools=TOOLS).tools == TOOLS  # none of its own


def test_tools_none_keeps_the_builders_tools() -> None:
    # request(tools=None) (kwargs passed on as they came) sent the prompt without its tools,
    # its metadata still naming the prefix hash of the static part with them
    prompt = builder(tools=TOOLS).build("hi")
    assert prompt.request(tools=None).tools == TOOLS
    assert prompt.request(tools=None).tools == prompt.request().tools


def test_unknown_lint_rules_are_a_configuration_error() -> None:
    # a plain ValueError, outside the SDK's error tree
    with pytest.raises(ConfigurationError, match="unknown lint rules"):
        builder(lint_ignore=["nope"])
    with pytest.raises(ConfigurationError, match="unknown lint rules"):
        lint_text("text", ignore=["nope"])


@pytest.mark.parametrize("setter", ["set_examples", "set_documents", "set_tools"])
def test_setters_given_none_are_a_configuration_error(setter: str) -> None:
    # TypeError: 'NoneType' object is not iterable
    with pytest.raises(ConfigurationError):
        getattr(builder(), setter)(None)


def test_openai_params_leave_out_what_chat_completions_lacks(fake: FakeProvider) -> None:
    # an assistant turn's Claude thinking blocks and a tool result's is_error went to
    # openai's create() as message fields chat completions does not have
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "tool_calls": [CALL],
            "thinking": [{"type": "thinking", "thinking": "hmm", "signature": "sig"}],
        },
        {"role": "tool", "tool_call_id": "call-1", "content": "not found", "is_error": True},
    ]
    params = builder().build("and now?", history=history).openai_params()
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)
    client.chat.completions.create(model="m", **params)
    sent = fake.requests[-1].body["messages"]
    assert [set(m) - {"role", "content", "tool_calls", "tool_call_id"} for m in sent] == [
        set()
    ] * len(sent)
    client.close()


def test_a_tenant_id_with_a_lone_surrogate_gets_a_cache_key(fake: FakeProvider) -> None:
    # UnicodeEncodeError ('surrogates not allowed') from build(): an id read from JSON may
    # hold a lone surrogate, and the canary and the cache keys already hash such ids
    from llmguard_sdk import Guard, OpenAICompatibleProvider, scoped

    odd = "acme\ud800"
    prompt = builder().build("hi", tenant=odd)
    assert prompt.cache_key == builder().build("hi", tenant=odd).cache_key  # stable
    assert prompt.cache_key not in (
        builder().build("hi", tenant="acme").cache_key,
        builder().build("hi").cache_key,
    )
    assert odd not in prompt.cache_key
    with scoped(tenant=odd):
        assert builder().build("hi").cache_key == prompt.cache_key
    route = OpenAICompatibleProvider(
        fake.base_url, model=fake.model, name="primary", send_cache_key=True
    )
    with Guard(route, environ={}, retry=None) as guard:
        assert guard.chat(request=prompt.request()).text == "Echo: hi"
    assert fake.requests[-1].body["prompt_cache_key"] == prompt.cache_key


@pytest.mark.parametrize(
    "static",
    [
        {"instructions": "Answer \udc80 briefly."},
        {"documents": ["A handbook \ud800 page."]},
        {"tools": [{"name": "search\ud800", "input_schema": {"type": "object"}}]},
    ],
)
def test_a_static_part_with_a_lone_surrogate_gets_a_prefix_hash(static: dict[str, Any]) -> None:
    # UnicodeEncodeError ('surrogates not allowed') from PromptBuilder(...) and from a
    # Release's apply(): the prefix hash is hashed as the cache key is
    from llmguard_sdk.prompts import static_prefix_hash

    options = {"instructions": "Answer briefly.", **static}
    first = PromptBuilder("inputs", drift=None, **options)
    assert first.prefix_hash == PromptBuilder("inputs", drift=None, **options).prefix_hash
    assert first.prefix_hash != builder().prefix_hash
    assert static_prefix_hash("a \ud800") != static_prefix_hash("a \ud801")


def test_a_request_cannot_replace_the_prompt_s_messages() -> None:
    # messages= silently replaced the assembled prompt (its static prefix and the user's
    # content gone, while the metadata still described the prompt's static part)
    prompt = builder().build("hi")
    with pytest.raises(RequestValidationError, match="messages"):
        prompt.request(messages=[{"role": "user", "content": "other"}])
    assert [m.content for m in prompt.request().messages] == ["Answer briefly.", "hi"]


@pytest.mark.parametrize(
    "content",
    [[{"type": "text"}], [{"type": "text", "text": 5}], [{"text": "no type"}]],
)
def test_content_parts_a_message_cannot_hold_are_a_typed_error(content: Any) -> None:
    # pydantic's ValidationError escaped build(), which documents RequestValidationError
    with pytest.raises(RequestValidationError, match="content"):
        builder().build(content)


@pytest.mark.parametrize(
    "options",
    [
        {"hooks": None},  # TypeError: not iterable
        {"hooks": print},  # one hook, not a list: TypeError
        {"hooks": ["not callable"]},  # failed at every drift, logged
        {"max_templates": "5"},  # TypeError from a comparison
        {"max_templates": True},
        {"max_templates": 0},
    ],
)
def test_a_drift_monitor_refuses_settings_of_the_wrong_kind(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        DriftMonitor(**options)
    with pytest.raises(ConfigurationError, match="callable"):
        DriftMonitor().add_hook("not callable")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"drift": True},  # AttributeError at every build
        {"strict": "no"},  # read as true: builds raised PromptLintError
        {"examples_heading": None, "examples": [("q", "a")]},  # TypeError joining
        {"documents_heading": 5, "documents": ["a document"]},
        {"lint_ignore": None},  # TypeError: not iterable
    ],
)
def test_a_builder_refuses_settings_of_the_wrong_kind(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        PromptBuilder("inputs", **options)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: lint_text(5), "text must be a string"),  # type: ignore[arg-type]  # TypeError from re
        (lambda: lint_text("abc", known_values=[5]), "known_values"),  # type: ignore[list-item]  # AttributeError: strip
        (lambda: prompt_cache_key(None), "template"),  # type: ignore[arg-type]  # TypeError from re
        (lambda: prompt_cache_key("t", 5), "tenant"),  # type: ignore[arg-type]  # AttributeError: encode
    ],
)
def test_lint_and_cache_keys_refuse_values_that_are_no_text(call: Any, error: str) -> None:
    with pytest.raises(ConfigurationError, match=error):
        call()


@pytest.mark.parametrize(("content", "problem"), [(5, "content"), (b"hi", "content")])
def test_content_that_is_no_text_or_parts_is_a_typed_error(content: Any, problem: str) -> None:
    # TypeError: 'int' object is not iterable; bytes went on as a list of integers' parts
    with pytest.raises(RequestValidationError, match=problem):
        builder().build(content)


@pytest.mark.parametrize(
    "history",
    [
        "hello",  # each character was taken for a message
        {"role": "user", "content": "hi"},  # one message, not a list: its keys were messages
        5,  # TypeError: not iterable
    ],
)
def test_a_history_that_is_no_list_of_messages_says_so(history: Any) -> None:
    with pytest.raises(RequestValidationError, match="history must be a list of messages"):
        builder().build("q", history=history)


SEARCH_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
ANTHROPIC_SEARCH = {"name": "search", "description": "Find.", "input_schema": SEARCH_SCHEMA}
SEARCH_FUNCTION: dict[str, Any] = {
    "name": "search",
    "description": "Find.",
    "parameters": SEARCH_SCHEMA,
}
FUNCTION_SEARCH = {"type": "function", "function": SEARCH_FUNCTION}


def test_anthropic_shaped_tools_reach_openai_routes_as_function_tools(fake: FakeProvider) -> None:
    """A builder takes tools in either provider's shape, and AnthropicProvider turns OpenAI's
    into its own; Anthropic's went to chat completions (``openai_params()``, a Guard's OpenAI
    and Responses routes) as they were, which OpenAI refuses (a 400: no ``type``)."""
    from llmguard_sdk import Guard, OpenAICompatibleProvider
    from llmguard_sdk.providers.responses import build_responses_payload

    prompt = builder(tools=[ANTHROPIC_SEARCH]).build("hi")
    params = prompt.openai_params()
    assert params["tools"] == [FUNCTION_SEARCH]
    client = openai.OpenAI(base_url=fake.base_url, api_key="sk-x", max_retries=0)
    client.chat.completions.create(model="m", **params)
    client.close()
    route = OpenAICompatibleProvider(fake.base_url, model=fake.model, name="primary")
    with Guard(route, environ={}, retry=None) as guard:
        guard.chat(request=prompt.request())
    assert fake.requests[-1].body["tools"] == [FUNCTION_SEARCH]
    responses = build_responses_payload(prompt.request(), model="m", stream=False)
    assert responses["tools"] == [{"type": "function", "strict": False, **SEARCH_FUNCTION}]
    assert prompt.anthropic_params()["tools"][0]["input_schema"] == SEARCH_SCHEMA  # unchanged


@pytest.mark.parametrize("empty", [{}, ""])
def test_an_empty_context_renders_nothing(empty: Any) -> None:
    # context={} rendered "<context>\n\n</context>" before the user's message
    plain = builder().build("hi")
    given = builder().build("hi", context=empty)
    assert given.messages[-1].content == "hi"
    assert given.messages == plain.messages


def _self_containing() -> list[Any]:
    value: dict[str, Any] = {"plan": "pro"}
    value["again"] = value
    items: list[Any] = ["a"]
    items.append(items)
    deep: list[Any] = []
    for _ in range(5000):  # no cycle, deeper than the interpreter's recursion limit
        deep = [deep]
    return [value, items, {"nested": [value]}, deep]


@pytest.mark.parametrize("value", _self_containing())
def test_a_context_value_that_contains_itself_is_a_typed_error(value: Any) -> None:
    # RecursionError from rendering it as JSON
    with pytest.raises(RequestValidationError, match="context"):
        builder().build("hi", context={"account": value})


def test_a_context_value_repeated_without_a_cycle_renders() -> None:
    shared = {"tier": "gold"}
    prompt = builder().build("hi", context={"account": [shared, shared]})
    assert '[{"tier":"gold"},{"tier":"gold"}]' in str(prompt.messages[-1].content)


PAIRS = [("q1", "a1"), ("q2", "a2"), ("q3", "a3")]
_HASHES = """
from llmguard_sdk.prompts import PromptBuilder
from llmguard_sdk import ConfigurationError
try:
    print(PromptBuilder("t", examples=set(PAIRS), drift=None, min_cache_tokens=None).prefix_hash)
except ConfigurationError as exc:
    print("refused:", exc)
docs = {"Returns within 30 days.", "Delivery takes 3 days.", "Refunds go to the card."}
print(PromptBuilder("t", documents=docs, drift=None, min_cache_tokens=None).prefix_hash)
"""


@pytest.mark.parametrize("unordered", [set(PAIRS), frozenset(PAIRS)])
def test_examples_in_no_order_are_refused(unordered: Any) -> None:
    """A set's order follows its items' hashes, which differ between processes
    (PYTHONHASHSEED): the static text and ``prefix_hash`` did, so no two processes shared a
    prefix cache. Examples keep the order given, so they must be given one."""
    with pytest.raises(ConfigurationError, match="examples must be in an order"):
        builder(examples=unordered)
    with pytest.raises(ConfigurationError, match="examples must be in an order"):
        builder().set_examples(unordered)
    with pytest.raises(ConfigurationError, match="documents must be in an order"):
        builder().set_documents({"Returns.", "Delivery."}, sort=False)
    ordered = builder(examples=dict(PAIRS).items()).static_text  # (a dict keeps its order)
    assert ordered == builder(examples=PAIRS).static_text


def test_the_prefix_hash_is_the_same_in_every_process() -> None:
    """Documents sorted (the default) may come in a set; examples in one are refused alike."""
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        code = f"PAIRS = {PAIRS!r}\n{_HASHES}"
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1
    assert next(iter(outputs)).startswith("refused: examples must be in an order")
