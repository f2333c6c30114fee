"""The quick request (``_quick_request``) is the request pydantic validates: the same field
values and types, defaults and fields set, over many generated inputs, good and bad; a bad
input is left to pydantic (its errors unchanged)."""

from __future__ import annotations

import hashlib
import inspect
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from llmguard_sdk import ChatRequest, Message, RequestValidationError
from llmguard_sdk._core.calls import _fields
from llmguard_sdk._quick_request import quick_request
from llmguard_sdk.models import validate_request


class Text(str):
    """A str subclass (pydantic makes it a str)."""


class Fields(dict[str, Any]):
    """A dict subclass."""


def shape(value: Any) -> Any:
    """Everything pydantic's model could differ in: types, values, field order, fields set."""
    if isinstance(value, BaseModel):
        fields = tuple((k, shape(v)) for k, v in value.__dict__.items())
        extra, private = value.__pydantic_extra__, value.__pydantic_private__
        return type(value), fields, frozenset(value.model_fields_set), extra, private
    if isinstance(value, (list, tuple)):
        return type(value), tuple(shape(v) for v in value)
    if isinstance(value, dict):
        return type(value), tuple((type(k), k, shape(v)) for k, v in value.items())
    if isinstance(value, float) and math.isnan(value):
        return float, "nan"
    return type(value), value


ROLES = ("system", "developer", "user", "assistant", "tool")
texts = st.one_of(st.text(max_size=4), st.just(""), st.builds(Text, st.text(max_size=3)))
maybe_texts = st.one_of(texts, st.none(), st.integers(-1, 1), st.just(b"x"))
contents: st.SearchStrategy[Any] = st.one_of(
    maybe_texts,
    st.just([{"type": "text", "text": "hi"}]),
    st.just([{"type": "text"}]),
    st.just([]),
)
message_dicts = st.fixed_dictionaries(
    {
        "role": st.one_of(
            st.sampled_from((*ROLES, "robot", "User")), st.builds(Text, st.just("user"))
        )
    },
    optional={
        "content": contents,
        "name": maybe_texts,
        "tool_call_id": maybe_texts,
        "tool_calls": st.sampled_from(([{"id": "c1", "type": "function"}], None, [])),
        "thinking": st.sampled_from(([{"type": "thinking"}], None)),
        "refusal": st.one_of(st.none(), st.just("no")),
        "is_error": st.one_of(st.none(), st.booleans()),
        "colour": st.just("red"),
    },
)
messages = st.one_of(
    message_dicts,
    message_dicts.map(Fields),
    st.sampled_from(ROLES[:4]).map(lambda role: Message(role=role, content="hi")),
    st.just(Message(role="tool", content="42", tool_call_id="c1", name=None)),
)
output_limits = st.one_of(
    st.integers(-2, 3),
    st.sampled_from((2**31 - 1, 2**31, 10**400)),
    st.booleans(),
    st.floats(0, 10),
    st.just("5"),
)
numbers = st.one_of(
    st.floats(-1, 3),
    st.floats(),
    st.sampled_from((math.nan, math.inf, -0.0, 2.0, 1.0)),
    st.integers(-1, 3),
    st.booleans(),
    st.just("0.5"),
)
header_names = st.one_of(
    st.sampled_from(("Idempotency-Key", "X-Good", "bad name", "Content-Length")),
    st.builds(Text, st.just("X-Good")),
)
header_values = st.one_of(st.text(max_size=3), st.just("a\nb"), st.just("é"), st.integers(0, 1))
params = {
    "model": maybe_texts,
    "max_tokens": output_limits,
    "max_completion_tokens": output_limits,
    "temperature": numbers,
    "top_p": numbers,
    "seed": st.one_of(st.sampled_from((2**63 - 1, 2**63, -(2**63), -(2**63) - 1)), st.booleans()),
    "stop": st.one_of(
        maybe_texts, st.lists(texts, max_size=6), st.lists(maybe_texts, max_size=2).map(tuple)
    ),
    "metadata": st.one_of(
        st.dictionaries(texts, maybe_texts, max_size=2), st.just(Fields(a="b")), st.none()
    ),
    "extra_headers": st.one_of(
        st.dictionaries(header_names, header_values, max_size=2), st.just(Fields()), st.none()
    ),
    "tools": st.sampled_from(([], None)),
    "colour": st.just("red"),
}
requests = st.fixed_dictionaries(
    {
        "messages": st.one_of(
            st.lists(messages, max_size=3),
            st.lists(messages, min_size=1, max_size=2).map(tuple),
            st.none(),
        )
    },
    optional=params,
)

# mostly good ones, each with its edges (so that many take the quick path)
good_messages = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(ROLES[:4]), "content": st.text(max_size=4)},
        optional={
            "name": st.one_of(st.none(), st.text(max_size=2)),
            "tool_calls": st.none(),
            "is_error": st.none(),
            "thinking": st.none(),
        },
    ),
    st.fixed_dictionaries(
        {"role": st.just("tool"), "content": st.text(max_size=2)},
        optional={"tool_call_id": st.one_of(st.none(), st.text(max_size=2))},
    ),
    messages,
)
good_requests = st.fixed_dictionaries(
    {"messages": st.lists(good_messages, min_size=1, max_size=4)},
    optional={
        "model": st.one_of(st.text(max_size=3), st.none()),
        "max_tokens": st.one_of(st.integers(-1, 2**31), st.none()),
        "max_completion_tokens": st.one_of(st.integers(0, 2), st.none()),
        "temperature": st.one_of(st.floats(-0.5, 2.5), st.integers(-1, 3), numbers),
        "top_p": st.one_of(st.floats(-0.5, 1.5), st.integers(0, 2), st.none()),
        "seed": st.one_of(st.integers(), st.none()),
        "stop": st.one_of(st.text(max_size=2), st.lists(st.text(max_size=2), max_size=5)),
        "metadata": st.one_of(st.dictionaries(st.text(max_size=2), st.text(max_size=2)), st.none()),
        "extra_headers": st.one_of(
            st.dictionaries(header_names, st.text(max_size=3), max_size=2), st.none()
        ),
        "tools": st.none(),
        "tool_choice": st.sampled_from((None, "auto")),
        "response_format": st.none(),
        "extra_body": st.sampled_from((None, {})),
        "extra_query": st.none(),
    },
)


@settings(max_examples=3000, deadline=None)
@given(st.one_of(requests, good_requests))
def test_quick_request_is_the_validated_request(data: dict[str, Any]) -> None:
    quick = quick_request(data)
    try:
        slow: ChatRequest | None = ChatRequest.model_validate(data)
    except ValidationError:
        slow = None
    if quick is None:  # (left to pydantic, which validate_request answers with)
        return
    assert slow is not None, "the quick path took a request that pydantic refuses"
    assert shape(quick) == shape(slow)
    assert quick == slow
    for name in ("messages", "stop", "metadata", "extra_headers"):  # copied, as pydantic does
        given_value = data.get(name)
        if isinstance(given_value, (list, dict)):
            assert getattr(quick, name) is not given_value
    for made, taken in zip(quick.messages, data["messages"], strict=True):
        assert (made is taken) == isinstance(taken, Message)  # a Message kept, as pydantic does


@settings(max_examples=500, deadline=None)
@given(requests)
def test_validate_request_answers_as_pydantic_does(data: dict[str, Any]) -> None:
    try:
        expected: Any = shape(ChatRequest.model_validate(data))
    except ValidationError:
        expected = RequestValidationError
    try:
        found: Any = shape(validate_request(data))
    except RequestValidationError:
        found = RequestValidationError
    assert found == expected


def test_the_common_shapes_are_quick() -> None:
    """Plain messages and numbers (an int temperature, None values, a name, a tool's answer,
    Message objects, the idempotency key's header, a request's own fields) take the quick
    path."""
    validate_request({"messages": [{"role": "user", "content": "x"}], "extra_headers": {"Id": "1"}})
    common: list[dict[str, Any]] = [
        {"messages": [{"role": "user", "content": ""}]},
        {
            "messages": [
                {"role": "system", "content": "be brief", "name": "rules"},
                Message(role="user", content="hi"),
                {"role": "assistant", "content": "hello", "name": None},
                {"role": "tool", "content": "42", "tool_call_id": "c1"},
            ],
            "model": "gpt-4o-mini",
            "max_tokens": 2**31 - 1,
            "max_completion_tokens": None,
            "temperature": 0,
            "top_p": 1.0,
            "seed": -(2**63),
            "stop": ["a", "b", "c", "d"],
            "metadata": {"k": "v"},
            "extra_headers": {"Id": "key"},
        },
    ]
    validated = ChatRequest.model_validate(common[1])
    common.append(dict(validated))  # (an input filter's request: every field, Messages)
    common.append({"messages": [{"role": "assistant", "content": "x", "tool_calls": None}]})
    for data in common:
        quick = quick_request(data)
        assert quick is not None
        with pytest.raises(ValidationError):  # frozen, as pydantic's
            quick.model = "other"
        assert shape(quick) == shape(ChatRequest.model_validate(data))


def test_bad_common_shapes_are_left_to_pydantic() -> None:
    """The edges of the rules: each refused by pydantic (or converted), and not quick."""
    plain = [{"role": "user", "content": "hi"}]
    edges: list[dict[str, Any]] = [
        {"messages": []},
        {"messages": [{"role": "tool", "content": "42"}]},
        {"messages": [{"role": "tool", "content": "42", "tool_call_id": ""}]},
        {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}]},
        {"messages": [{"role": "user", "content": Text("hi")}]},
        {"messages": [Fields(role="user", content="hi")]},
        {"messages": plain, "max_tokens": True},
        {"messages": plain, "max_tokens": 0},
        {"messages": plain, "max_tokens": 2**31},
        {"messages": plain, "temperature": math.nan},
        {"messages": plain, "temperature": True},
        {"messages": plain, "temperature": 2.5},
        {"messages": plain, "model": ""},
        {"messages": plain, "model": "\ud800"},  # (pydantic refuses a lone surrogate here)
        {"messages": plain, "model": "gpt-4o\ud800"},
        {"messages": plain, "stop": ["a"] * 5},
        {"messages": plain, "extra_headers": {"Content-Length": "1"}},
        {"messages": plain, "tools": []},
    ]
    for data in edges:
        assert quick_request(data) is None, data


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ROLES[:4]), contents, maybe_texts, st.one_of(st.none(), st.booleans()))
def test_a_message_object_is_read_as_its_dump(
    role: str, content: Any, name: Any, is_error: bool | None
) -> None:
    """``Guard.chat``'s Message objects: their fields as ``model_dump(exclude_none=True)``
    gives them (a Message of strings read directly)."""
    try:
        message = Message(role=role, content=content, name=name)  # type: ignore[arg-type]
    except ValidationError:
        return
    made = Message.model_construct(role="tool", content="x", tool_call_id="1", is_error=is_error)
    for each in (message, made):
        assert shape(_fields(each)) == shape(each.model_dump(exclude_none=True))


def test_a_model_pydantic_refuses_is_refused_whatever_came_before() -> None:
    """A lone surrogate's model name was taken by the quick path once an earlier call had
    opened it (a provider's 400 after a round trip), refused by pydantic before: refused
    alike now, before anything is sent."""
    plain = [{"role": "user", "content": "hi"}]
    assert quick_request({"messages": plain, "model": "gpt-4o"}) is not None
    with pytest.raises(RequestValidationError):
        validate_request({"messages": plain, "model": "\ud800"})


def _rules_fingerprint() -> str:
    """What the quick path copies from the models: each field's type, default and
    constraints, and the source of their validators (a changed bound, a new field constraint
    or a new validator)."""
    parts = []
    for model in (ChatRequest, Message):
        for name, field in model.model_fields.items():
            described = f"{name} {field.annotation} {field.default!r} {field.metadata}"
            parts.append(re.sub(r" at 0x[0-9a-f]+", "", described))  # (no addresses)
        decorators = model.__pydantic_decorators__
        validators: dict[str, Any] = {
            **decorators.model_validators,
            **decorators.field_validators,
        }
        for name, decorator in sorted(validators.items()):
            parts.append(name + inspect.getsource(decorator.func))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def test_the_quick_path_is_rechecked_when_the_models_rules_change() -> None:
    """The quick path repeats the models' rules by hand. When this fails, read the change to
    ``ChatRequest`` / ``Message``, make ``_quick_request`` check it the same way (or leave
    that shape to pydantic), add a case above, then pin the new fingerprint here."""
    assert _rules_fingerprint() == "21aedf54477275b8"
