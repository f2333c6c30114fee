"""Task routing and cascades: rules and a classifier choose a call's tier; a cascade escalates
from the small tier to the large one when a check rejects the answer, with both calls'
costs in the budgets, the response and the telemetry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmguard_sdk import (
    AllRoutesFailedError,
    BudgetExceededError,
    CallEvent,
    Cascade,
    ConfigurationError,
    DeploymentGroup,
    Guard,
    GuardrailRejectedError,
    InputTooLargeError,
    OpenAICompatibleProvider,
    ResponseCache,
    Rule,
    Scope,
    TaskRouter,
)
from llmguard_sdk.budget import Budget, Budgets, Price, PriceTable
from llmguard_sdk.cli import main
from llmguard_sdk.models import ChatRequest, ChatResponse, Message
from llmguard_sdk.router import finish_reason, json_schema, not_empty, validator
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.testing import FakeProvider, Fault

PRICES = PriceTable.default_table().with_prices(
    {"small-model": Price(input=1.0, output=2.0), "large-model": Price(input=100.0, output=200.0)}
)
NOBODY = Scope()
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["answer"],
    "properties": {"answer": {"type": "integer"}},
}


def _small_reply(body: dict[str, Any]) -> str:
    """Right (valid JSON) for easy questions, wrong (not JSON) for hard ones."""
    text = body["messages"][-1]["content"]
    return '{"answer": 4}' if "easy" in text else "I think it is about four?"


@pytest.fixture
def fakes() -> Iterator[tuple[FakeProvider, FakeProvider]]:
    with (
        FakeProvider(model="small-model", name="small", reply=_small_reply) as small,
        FakeProvider(model="large-model", name="large", reply=lambda b: '{"answer": 4}') as large,
    ):
        yield small, large


def _routes(*servers: FakeProvider) -> list[OpenAICompatibleProvider]:
    return [OpenAICompatibleProvider(s.base_url, model=s.model, name=s.name) for s in servers]


def _cascade_guard(fakes: tuple[FakeProvider, FakeProvider], **options: Any) -> Guard:
    router = TaskRouter(
        {"small": ["small"], "large": ["large"]},
        cascades={"auto": Cascade(["small", "large"], checks=[json_schema(SCHEMA)])},
        default="auto",
    )
    options.setdefault("environ", {})
    return Guard(_routes(*fakes), tasks=router, prices=PRICES, **options)


def _ask(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


def _said(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


# -- choosing a tier ------------------------------------------------------------------------


def test_rules_then_classifier_then_default_choose_the_tier() -> None:
    router = TaskRouter(
        {"small": ["s"], "large": ["l"], "mid": ["m"]},
        rules=[
            Rule("large", tools=True),
            Rule("large", min_tokens=50),
            Rule("mid", feature=["search", "faq"], tenant="acme"),
            Rule("mid", when=lambda request, scope: request.temperature == 0.5),
        ],
        classifier=lambda request, scope: "large" if "prove" in request.last_user_text() else None,
        default="small",
    )

    def choose(text: str, scope: Scope = NOBODY, **request: Any) -> str:
        req = ChatRequest(messages=_said(text), **request)
        return router.choose(req, scope, lambda: len(req.last_user_text().split()))

    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    assert choose("hi", tools=[tool]) == "large"
    assert choose("word " * 60) == "large"
    assert choose("hi", Scope(tenant="acme", feature="faq")) == "mid"
    assert choose("hi", Scope(tenant="other", feature="faq")) == "small"  # both must hold
    assert choose("hi", temperature=0.5) == "mid"
    assert choose("prove it") == "large"
    assert choose("hi") == "small"


def test_bad_routers_name_what_is_wrong() -> None:
    with pytest.raises(ConfigurationError, match=r"rules\[0\]\.tier: 'huge'"):
        TaskRouter({"small": ["s"]}, rules=[Rule("huge")])
    with pytest.raises(ConfigurationError, match="no tier named 'large'"):
        TaskRouter({"small": ["s"]}, cascades={"c": Cascade(["small", "large"])})
    with pytest.raises(ConfigurationError, match="two or more distinct tiers"):
        Cascade(["small"])
    with pytest.raises(ConfigurationError, match="min_tokens"):
        Rule("small", min_tokens=-1)
    with pytest.raises(ConfigurationError, match="no route or group named 'nope'"):
        Guard(
            [OpenAICompatibleProvider("http://127.0.0.1:9/v1", model="m", name="s")],
            tasks=TaskRouter({"small": ["nope"]}),
            environ={},
        )


@pytest.mark.parametrize(
    "build",
    [
        lambda: Cascade(["small", "large"], checks=not_empty()),  # type: ignore[arg-type]
        lambda: Cascade(5),  # type: ignore[arg-type]
        lambda: TaskRouter({"small": ["s"]}, rules=Rule("small")),  # type: ignore[arg-type]
        lambda: TaskRouter({"small": ["s"]}, cascades=["c"]),  # type: ignore[arg-type]
        lambda: TaskRouter([("small", ["s"])]),  # type: ignore[arg-type]
        lambda: Rule("small", feature=5),  # type: ignore[arg-type]
        lambda: Rule("small", tenant=[["acme"]]),  # type: ignore[list-item]
        lambda: Rule("small", min_tokens=True),
        lambda: Rule("small", min_tokens=100, max_tokens=10),
        lambda: Cascade([["small"], ["large"]]),  # type: ignore[list-item]
        lambda: TaskRouter({"small": ["s", "l", "s"]}),
    ],
)
def test_one_item_where_a_list_goes_is_a_configuration_error(build: Any) -> None:
    """A single check, rule or a list of cascades raised TypeError or ValueError; so did a
    list of tier pairs, a feature that is no name, a tier that is a list (unhashable); a
    token bound of ``True`` counted as 1, and bounds that no count meets were taken; a tier
    naming a route twice sent each call there twice, all its retries each time."""
    with pytest.raises(ConfigurationError):
        build()


def test_a_call_goes_only_to_its_tiers_routes(fakes: tuple[FakeProvider, FakeProvider]) -> None:
    small, large = fakes
    router = TaskRouter(
        {"small": ["small"], "large": ["large"]},
        rules=[Rule("large", feature="legal")],
    )
    with Guard(_routes(small, large), tasks=router, environ={}) as guard:
        assert guard.chat(_ask("easy"), feature="chat").route == "small"
        assert guard.chat(_ask("easy"), feature="legal").route == "large"
        with guard.chat(_ask("easy"), feature="legal", stream=True) as stream:
            assert "".join(chunk.text for chunk in stream) == '{"answer": 4}'
        assert stream.response.route == "large"  # a plain tier streams
        small.always(Fault(status=503))  # the small tier's only route is down: no fallback
        with pytest.raises(AllRoutesFailedError) as failed:
            guard.chat(_ask("easy"), feature="chat")
        assert list(failed.value.errors) == ["small"]
    assert large.stats.requests == 2


def test_a_tier_of_a_group_follows_the_groups_ranking(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    small, large = fakes
    group = DeploymentGroup("pair", _routes(small, large), strategy="round_robin")
    with FakeProvider(model="other-model", name="other") as other:
        (solo,) = _routes(other)
        router = TaskRouter({"both": ["pair"], "solo": [solo]}, rules=[Rule("solo", tenant="x")])
        with Guard([group, solo], tasks=router, environ={}) as guard:
            served = [guard.chat(_ask("an easy one")).route for _ in range(4)]
            alone = guard.chat(_ask("an easy one"), tenant="x").route
    assert served == ["small", "large", "small", "large"]
    assert alone == "other"


def test_a_budget_downgrade_wins_over_the_tier(fakes: tuple[FakeProvider, FakeProvider]) -> None:
    small, large = fakes
    with FakeProvider(model="local-model", name="local") as local:
        budgets = Budgets(
            [Budget(limit_usd=0.005, on_exhausted="local_only")],
            prices=PRICES,
            local_routes=["local"],
        )
        router = TaskRouter({"large": ["large"], "small": ["small"]})  # default: "large"
        with Guard(_routes(small, large, local), tasks=router, budgets=budgets, environ={}) as g:
            served = [g.chat(_ask("an easy one"), max_tokens=10).route for _ in range(8)]
    assert served[0] == "large"
    assert served[-1] == "local"  # the tier has no local route; the budget sends it there
    assert "small" not in served


def test_a_tier_call_reserves_only_its_tiers_worst_case(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    small, large = fakes
    budgets = Budgets([Budget(limit_usd=0.002)], prices=PRICES)  # the large model's worst
    router = TaskRouter(  # case ($0.0047) is more
        {"small": ["small"], "large": ["large"]}, rules=[Rule("large", tenant="big")]
    )
    with Guard(_routes(small, large), tasks=router, budgets=budgets, environ={}) as guard:
        assert guard.chat(_ask("an easy one"), max_tokens=20).route == "small"
        with pytest.raises(BudgetExceededError):
            guard.chat(_ask("an easy one"), max_tokens=20, tenant="big")
    assert large.stats.requests == 0


# -- cascades -------------------------------------------------------------------------------


def test_a_cascade_escalates_when_the_check_rejects_and_counts_both_costs(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    small, large = fakes
    budgets = Budgets([Budget(limit_usd=10.0, scope="tenant")], prices=PRICES)
    with _cascade_guard(fakes, budgets=budgets) as guard:
        easy = guard.chat(_ask("an easy one"), tenant="t", max_tokens=20)
        assert (easy.route, easy.metadata["cascade"]["escalated_from"]) == ("small", [])
        hard = guard.chat(_ask("a hard one"), tenant="t", max_tokens=20)
        assert (hard.route, json.loads(hard.text)) == ("large", {"answer": 4})
        (tried,) = hard.metadata["cascade"]["escalated_from"]
        assert (tried["tier"], tried["reason"], tried["route"]) == ("small", "json_schema", "small")
        assert tried["cost_usd"] > 0
        large_alone = hard.cost_usd - tried["cost_usd"]
        assert large_alone > 10 * tried["cost_usd"]  # the large model's own cost is in it
        (row,) = guard.budget_status(tenant="t")
        assert easy.cost_usd is not None
        assert hard.cost_usd is not None
        assert row["spent_usd"] == pytest.approx(easy.cost_usd + hard.cost_usd)
        assert row["held_usd"] == 0
    assert (small.stats.requests, large.stats.requests) == (2, 1)
    assert large.requests[0].headers["idempotency-key"] != small.requests[1].headers.get(
        "idempotency-key"
    )  # the escalated call is a request of its own


def test_a_rejected_answer_is_never_cached(fakes: tuple[FakeProvider, FakeProvider]) -> None:
    small, large = fakes
    with _cascade_guard(fakes, cache=True) as guard:
        first = guard.chat(_ask("a hard one"), max_tokens=20)
        again = guard.chat(_ask("a hard one"), max_tokens=20)
    assert (first.route, again.route) == ("large", "cache")
    assert json.loads(again.text) == {"answer": 4}  # the large tier's answer, not the small's
    assert (small.stats.requests, large.stats.requests) == (1, 1)


def test_async_cascade_escalates_on_length_errors_and_output_filters(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    small, large = fakes

    def no_four(response: ChatResponse) -> None:
        if response.route == "small" and "refuse" in response.text:
            raise GuardrailRejectedError("no")

    router = TaskRouter(
        {"small": ["small"], "large": ["large"]},
        cascades={"auto": Cascade(["small", "large"], checks=[finish_reason(), not_empty()])},
        default="auto",
    )
    guard = Guard(_routes(small, large), tasks=router, output_filters=[no_four], environ={})

    async def calls() -> list[ChatResponse]:
        answers = [await guard.achat(_ask("an easy one"), max_tokens=1)]  # cut: "length"
        small.always(Fault(status=503))
        answers.append(await guard.achat(_ask("an easy one")))  # the small tier fails
        small.always(None)
        with small_replies(small, "I refuse"):
            answers.append(await guard.achat(_ask("an easy one")))
        await guard.aclose()
        return answers

    cut, failed, filtered = anyio.run(calls)
    reasons = [
        a.metadata["cascade"]["escalated_from"][0]["reason"] for a in (cut, failed, filtered)
    ]
    assert reasons == ["finish_reason:length", "error", "output_filter"]
    assert {a.route for a in (cut, failed, filtered)} == {"large"}


class small_replies:
    """Make ``server`` answer ``text`` inside the block."""

    def __init__(self, server: FakeProvider, text: str) -> None:
        self.server, self.text = server, text

    def __enter__(self) -> None:
        self.saved = self.server._reply
        self.server._reply = lambda body: self.text

    def __exit__(self, *exc: object) -> None:
        self.server._reply = self.saved


def test_the_drop_in_client_goes_through_the_cascade(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    with _cascade_guard(fakes) as guard:
        client = guard.client()
        hard = client.chat.completions.create(model="m", messages=_ask("a hard one"))
        easy = client.chat.completions.create(model="m", messages=_ask("an easy one"))
    assert (hard.llmguard.route, easy.llmguard.route) == ("large", "small")  # type: ignore[attr-defined]
    assert json.loads(hard.choices[0].message.content or "") == {"answer": 4}


def test_a_cascade_stream_is_buffered_and_checked_first(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    events: list[CallEvent] = []
    with _cascade_guard(fakes, hooks=[events.append]) as guard:
        with guard.chat(_ask("a hard one"), stream=True, max_tokens=20) as stream:
            chunks = list(stream)
        assert [c.text for c in chunks] == ['{"answer": 4}']  # the checked answer, whole
        assert chunks[0].route == "large"
        assert stream.response.metadata["cascade"]["escalated_from"][0]["reason"] == "json_schema"

        async def astream() -> list[str]:
            answer = await guard.achat(_ask("an easy one"), stream=True, max_tokens=20)
            return [chunk.route async for chunk in answer]

        assert anyio.run(astream) == ["small"]
        with guard.client().chat.completions.create(
            model="m", messages=_ask("a hard one"), stream=True
        ) as drop_in:
            text = "".join(c.choices[0].delta.content or "" for c in drop_in if c.choices)
        assert json.loads(text) == {"answer": 4}
    assert [(e.kind, e.route) for e in events] == [
        ("stream", "large"),
        ("stream", "small"),
        ("stream", "large"),
    ]
    assert events[0].cost_usd == pytest.approx(stream.response.cost_usd)  # both answers
    assert fakes[0].stats.streams == 0  # every tier's call was a plain one


def test_cascade_telemetry_spans_events_and_escalation_metric(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    with _cascade_guard(fakes, telemetry=telemetry) as guard:
        for text in ("an easy one", "a hard one", "another easy one", "an easy one too"):
            guard.chat(_ask(text), max_tokens=20)
    calls = [s for s in spans.get_finished_spans() if s.parent is None]
    hard = next(s for s in calls if s.attributes and s.attributes.get("llmguard.tier") == "large")
    assert hard.attributes is not None
    assert hard.attributes["llmguard.cascade"] == "auto"
    assert hard.attributes["llmguard.cascade.escalations"] == 1
    assert hard.attributes["llmguard.cascade.reason"] == "json_schema"
    (event,) = [e for e in hard.events if e.name == "llmguard.cascade.escalated"]
    assert event.attributes is not None
    assert event.attributes["llmguard.tier"] == "small"
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "llmguard.cascade.calls"
        for point in metric.data.data_points
    ]
    by_escalated = {p.attributes["llmguard.cascade.escalated"]: p.value for p in points}  # type: ignore[index,union-attr]
    assert by_escalated == {True: 1, False: 3}  # escalation rate 1 / 4
    meter_provider.shutdown()
    tracer_provider.shutdown()


def test_a_custom_checks_text_stays_on_the_span_and_is_custom_on_the_metric(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    """The metric's ``llmguard.cascade.reason`` label was the check's text as returned: a
    check quoting the answer (or an id) made one series per call, without bound."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])

    def quoted(request: ChatRequest, response: ChatResponse) -> str | None:
        if response.text.startswith("{"):
            return None
        return f"not JSON: {request.last_user_text()!r}"

    def odd_finish(request: ChatRequest, response: ChatResponse) -> str | None:
        return "finish_reason:made-up-42" if "odd" in request.last_user_text() else None

    router = TaskRouter(
        {"small": ["small"], "large": ["large"]},
        cascades={"auto": Cascade(["small", "large"], checks=[odd_finish, quoted])},
        default="auto",
    )
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    asked = [f"hard one #{i}" for i in range(5)] + ["easy odd one", "easy one"]
    with Guard(_routes(*fakes), tasks=router, environ={}, telemetry=telemetry) as guard:
        for text in asked:
            guard.chat(_ask(text), max_tokens=20)
    reasons = {
        str(s.attributes["llmguard.cascade.reason"])
        for s in spans.get_finished_spans()
        if s.parent is None and s.attributes and "llmguard.cascade.reason" in s.attributes
    }
    assert reasons == {f"not JSON: 'hard one #{i}'" for i in range(5)} | {
        "finish_reason:made-up-42"
    }  # the span says what the check said
    data = reader.get_metrics_data()
    assert data is not None
    labels = [
        point.attributes.get("llmguard.cascade.reason")  # type: ignore[union-attr]
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "llmguard.cascade.calls"
        for point in metric.data.data_points
    ]
    assert sorted(map(str, labels)) == [
        "custom",
        "finish_reason:other",
        "none",
    ]  # three series, not 7
    meter_provider.shutdown()
    tracer_provider.shutdown()


def test_validators_and_schemas() -> None:
    request = ChatRequest(messages=_said("x"))
    fenced = ChatResponse(text='```json\n{"answer": 3}\n```')
    assert json_schema(SCHEMA)(request, fenced) is None
    assert json_schema(SCHEMA)(request, ChatResponse(text='{"answer": "3"}')) == "json_schema"
    assert json_schema()(request, ChatResponse(text="[1, 2]")) is None
    schema = {"type": "array", "items": {"type": "number", "minimum": 0}, "maxItems": 2}
    assert json_schema(schema)(request, ChatResponse(text="[1, -2]")) == "json_schema"
    asked = ChatRequest(
        messages=_said("x"),
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
    )
    assert json_schema()(asked, ChatResponse(text='{"other": 1}')) == "json_schema"
    short = validator(lambda r: len(r.text) > 3, reason="too_short")
    assert short(request, ChatResponse(text="abc")) == "too_short"
    assert finish_reason("stop")(request, ChatResponse(text="a", finish_reason="stop"))


@pytest.mark.parametrize("text", ['```json{"answer": 3}```', '```JSON {"answer": 3}```'])
def test_a_fence_on_one_line_is_read_inside(text: str) -> None:
    """A fence whose language tag and JSON share one line raised IndexError from the check
    (the call crashed with an untyped error after paying for the small tier)."""
    request = ChatRequest(messages=_said("x"))
    assert json_schema(SCHEMA)(request, ChatResponse(text=text)) is None
    assert json_schema(SCHEMA)(request, ChatResponse(text="```json```")) == "json_schema"


def test_json_nested_too_deep_to_parse_is_rejected_not_raised() -> None:
    """An answer of 2,000 nested brackets made json.loads raise RecursionError out of the
    check (the call failed untyped). 100,000 here: Python 3.12 on parses 2,000 levels (its C
    code has a recursion limit of its own); 3.10 and 3.11 stop at about 1,000."""
    request = ChatRequest(messages=_said("x"))
    deep = ChatResponse(text="[" * 100_000 + "]" * 100_000)
    assert json_schema()(request, deep) == "json_schema"


def test_json_schema_tells_booleans_from_numbers_and_takes_whole_floats_as_integers() -> None:
    """Python's ``True == 1`` let ``true`` pass ``enum: [0, 1]`` and ``1`` pass
    ``const: true``; and ``3.0`` (an integer in JSON Schema) failed ``type: integer``."""
    request = ChatRequest(messages=_said("x"))

    def verdict(schema: dict[str, object], text: str) -> str | None:
        return json_schema(schema)(request, ChatResponse(text=text))

    assert verdict({"enum": [0, 1]}, "true") == "json_schema"
    assert verdict({"const": True}, "1") == "json_schema"
    assert verdict({"const": [0]}, "[false]") == "json_schema"
    assert verdict({"const": {"a": 1}}, '{"a": true}') == "json_schema"
    assert verdict({"enum": [0, 1]}, "1") is None
    assert verdict({"enum": [1]}, "1.0") is None  # the same number
    assert verdict(SCHEMA, '{"answer": 3.0}') is None
    assert verdict(SCHEMA, '{"answer": 3.5}') == "json_schema"


@pytest.mark.parametrize("verdict", [False, True, 0])
def test_a_check_answering_yes_or_no_is_a_configuration_error(verdict: object) -> None:
    """A check returning a bool (``False`` meant as "nothing wrong") had its answer taken as
    the reason "False": every answer of the small tier was rejected, every call paid for
    both tiers."""

    def check(request: ChatRequest, response: ChatResponse) -> Any:
        return verdict

    cascade = Cascade(["small", "large"], checks=[check])
    request = ChatRequest(messages=_said("x"))
    with pytest.raises(ConfigurationError, match="validator"):
        cascade.rejects(request, ChatResponse(text="fine"))


def test_json_schema_bounds_a_huge_integer_rather_than_raise() -> None:
    """An answer holding an integer of 400 digits made ``float()`` raise OverflowError out of
    the check (the call failed untyped after paying for the small tier); a bound that is no
    number raised TypeError."""
    request = ChatRequest(messages=_said("x"))
    huge = ChatResponse(text="1" + "0" * 400)

    def verdict(schema: dict[str, object], response: ChatResponse = huge) -> str | None:
        return json_schema(schema)(request, response)

    assert verdict({"type": "integer", "maximum": 10}) == "json_schema"
    assert verdict({"type": "integer", "minimum": 0}) is None
    assert verdict({"maximum": 1e308}) == "json_schema"
    assert verdict({"minimum": "5"}, ChatResponse(text="3")) is None  # no number: no bound
    assert verdict({"minimum": 5}, ChatResponse(text="1e400")) == "json_schema"  # infinite


# -- from a configuration file ----------------------------------------------------------------


def _config(small: FakeProvider, large: FakeProvider, tasks: str) -> str:
    return f"""
[[routes]]
model = "vllm/small-model"
name = "small"
base_url = "{small.base_url}"

[[routes]]
model = "vllm/large-model"
name = "large"
base_url = "{large.base_url}"

[tasks]
{tasks}
"""


def test_tasks_from_a_config_file(fakes: tuple[FakeProvider, FakeProvider], tmp_path: Path) -> None:
    small, large = fakes
    path = tmp_path / "guard.toml"
    path.write_text(
        _config(
            small,
            large,
            """default = "auto"
tiers = { small = ["small"], large = ["large"] }

[tasks.cascades.auto]
tiers = ["small", "large"]
checks = ["json", "finish_reason"]
json_schema = { type = "object", required = ["answer"] }

[[tasks.rules]]
tier = "large"
feature = "legal"
""",
        )
    )
    with Guard.from_config(path, environ={}) as guard:
        assert guard.chat(_ask("an easy one")).route == "small"
        assert guard.chat(_ask("a hard one")).route == "large"
        assert guard.chat(_ask("an easy one"), feature="legal").route == "large"


def test_llmguard_check_validates_and_prints_the_tasks(
    fakes: tuple[FakeProvider, FakeProvider],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "guard.toml"
    path.write_text(
        _config(*fakes, 'default = "large"\ntiers = { small = ["small"], large = ["large"] }')
    )
    assert main(["check", str(path)]) == 0
    assert "tasks: TaskRouter(tiers=['small', 'large'], rules=0, default='large')" in (
        capsys.readouterr().out
    )
    path.write_text(_config(*fakes, 'tiers = { small = ["smal"] }'))
    assert main(["check", str(path)]) == 2
    assert "tier 'small': no route or group named 'smal'" in capsys.readouterr().err


def test_llmguard_check_json_holds_the_tasks_the_text_shows(
    fakes: tuple[FakeProvider, FakeProvider],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--json`` said nothing of the ``[tasks]`` table the text output shows: its tiers (with
    their routes), cascades, rules, classifier and default (the first tier when unset)."""
    path = tmp_path / "guard.toml"
    tasks = """tiers = { small = ["small"], large = ["large", "small"] }
[tasks.cascades.auto]
tiers = ["small", "large"]
checks = ["not_empty"]
[[tasks.rules]]
tier = "large"
tools = true
"""
    path.write_text(_config(*fakes, tasks))
    assert main(["check", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["tasks"]["default"] == "small"
    assert shown["tasks"]["tiers"] == {"small": ["small"], "large": ["large", "small"]}
    assert shown["tasks"]["cascades"]["auto"]["tiers"] == ["small", "large"]
    assert shown["tasks"]["cascades"]["auto"]["checks"] == ["not_empty"]
    assert [rule["tier"] for rule in shown["tasks"]["rules"]] == ["large"]
    assert shown["tasks"]["rules"][0]["tools"] is True
    assert shown["tasks"]["classifier"] is None
    assert main(["check", str(path)]) == 0
    text = capsys.readouterr().out
    assert "tasks: TaskRouter(tiers=['small', 'large', 'auto'], rules=1, default='small')" in text
    path.write_text(_config(*fakes, "")[: -len("[tasks]\n\n")])  # no [tasks] table
    assert main(["check", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tasks"] is None


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ('tiers = { small = ["small"] }\ndefualt = "small"', "tasks.defualt: Extra inputs"),
        ('tiers = { small = ["nope"] }', "tier 'small': no route or group named 'nope'"),
        (
            'tiers = { small = ["small"] }\n[[tasks.rules]]\ntier = "small"\nmin_token = 3',
            "tasks.rules.0.min_token",
        ),
        (
            'tiers = { small = ["small"] }\n[tasks.cascades.c]\ntiers = ["small", "big"]',
            "tasks: cascade 'c': no tier named 'big'",
        ),
        (
            'tiers = { small = ["small"] }\nclassifier = "no_such_module:f"',
            "tasks.classifier: cannot import",
        ),
        (
            'tiers = { s = ["small"], l = ["large"] }\n[tasks.cascades.c]\n'
            'tiers = ["s", "l"]\nchecks = ["jsn"]',
            "tasks.cascades.c.checks.0",
        ),
    ],
)
def test_bad_task_configs_name_the_key(
    fakes: tuple[FakeProvider, FakeProvider], tmp_path: Path, tasks: str, message: str
) -> None:
    path = tmp_path / "guard.toml"
    path.write_text(_config(*fakes, tasks))
    with pytest.raises(ConfigurationError, match=message.replace("(", "\\(").replace("[", "\\[")):
        Guard.from_config(path, environ={})


def test_the_cache_keys_a_call_without_a_model_under_its_tiers_model(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    """A tier chosen by feature answers from its own model's entries, never another tier's."""
    small, large = fakes
    router = TaskRouter(
        {"small": ["small"], "large": ["large"]},
        rules=[Rule("large", feature="legal")],
        default="small",
    )
    guard = Guard(_routes(small, large), tasks=router, cache=ResponseCache(), environ={})
    first = guard.chat(_ask("easy: what is 2 + 2?"), feature="chat")
    assert (first.route, first.model) == ("small", "small-model")
    legal = guard.chat(_ask("easy: what is 2 + 2?"), feature="legal")
    assert legal.route == "large"  # not the small model's cached answer
    assert large.stats.requests == 1
    again = guard.chat(_ask("easy: what is 2 + 2?"), feature="legal")
    assert (again.route, again.model) == ("cache", "large-model")
    assert large.stats.requests == 1
    guard.close()


def test_a_cascade_and_a_tier_of_it_keep_their_own_cache_entries(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    """A small tier's own answer has not passed the cascade's checks; the cascade's answer
    (the large tier's, after an escalation) is not the small tier's."""
    small, large = fakes
    router = TaskRouter(
        {"small": ["small"], "large": ["large"]},
        cascades={"auto": Cascade(["small", "large"], checks=[json_schema(SCHEMA)])},
        rules=[Rule("small", feature="draft")],
        default="auto",
    )
    guard = Guard(_routes(small, large), tasks=router, cache=ResponseCache(), environ={})
    draft = guard.chat(_ask("a hard one"), feature="draft")  # the small tier, unchecked
    assert (draft.route, draft.text) == ("small", "I think it is about four?")
    checked = guard.chat(_ask("a hard one"))  # the cascade: small rejected, then large
    assert checked.route == "large"
    assert json.loads(checked.text) == {"answer": 4}
    again = guard.chat(_ask("a hard one"))
    assert (again.route, json.loads(again.text)) == ("cache", {"answer": 4})
    draft_again = guard.chat(_ask("a hard one"), feature="draft")
    assert (draft_again.route, draft_again.text) == ("cache", "I think it is about four?")
    assert (small.stats.requests, large.stats.requests) == (2, 1)
    guard.close()


# -- the size check ---------------------------------------------------------------------------

_BIG = _ask("hello world " * 100)  # about 200 tokens: more than max_input_tokens=50


def test_max_input_tokens_counts_as_the_calls_tiers_first_route(
    fakes: tuple[FakeProvider, FakeProvider],
) -> None:
    """The size check ran before the call's tier was chosen: it counted a call its tier sends
    to gpt-4 (cl100k_base, exact) as the chain's first route's "small-model" (an estimate)."""
    small, _ = fakes
    with FakeProvider(model="gpt-4-0613", name="exact") as exact:
        router = TaskRouter(
            {"small": ["small"], "exact": ["exact"]}, rules=[Rule("exact", tenant="x")]
        )
        caught = []
        with Guard(_routes(small, exact), tasks=router, max_input_tokens=50, environ={}) as g:
            for tenant in (None, "x"):
                with pytest.raises(InputTooLargeError) as error:
                    g.chat(_BIG, tenant=tenant)
                caught.append(error.value.estimated)
        assert exact.stats.requests == 0
    assert caught == [True, False]  # "small-model" estimates, the tier's gpt-4 counts exactly
    assert small.stats.requests == 0


def test_a_cheapest_rankings_count_serves_the_tiers_size_check(
    fakes: tuple[FakeProvider, FakeProvider], counted_models: list[str | None]
) -> None:
    """A ``cheapest`` group counts the request for no model in particular (cl100k_base, an
    estimate); the tier's gpt-4 counts with that encoding too: the size check takes its count
    (exact now) rather than reuse it as it was or encode the request again."""
    small, large = fakes
    group = DeploymentGroup("pair", _routes(small, large), strategy="cheapest")
    with FakeProvider(model="gpt-4-0613", name="exact") as exact:
        (solo,) = _routes(exact)
        router = TaskRouter({"pair": ["pair"], "exact": [solo]}, rules=[Rule("exact", tenant="x")])
        guard = Guard([group, solo], tasks=router, prices=PRICES, max_input_tokens=50, environ={})
        with guard, pytest.raises(InputTooLargeError) as error:
            guard.chat(_BIG, tenant="x")
        assert exact.stats.requests == 0
    assert error.value.estimated is False
    assert counted_models == [None]  # encoded once, by the ranking


@pytest.mark.usefixtures("o200k_offline")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_escalation_counts_and_checks_the_size_as_the_later_tiers_model(mode: str) -> None:
    """A cascade's later tier kept the first tier's count (its gpt-4, 200 tokens) and never
    ran the size check again: gpt-4o (counting this request as 1,200 tokens) was sent a
    request above ``max_input_tokens``. Now the later tier fails the size check as a first
    tier would, before any request goes to it; the call cost the rejected answer, once."""
    prices = PriceTable.default_table().with_prices(
        {"gpt-4-0613": Price(input=1.0, output=2.0), "gpt-4o": Price(input=100.0, output=200.0)}
    )
    events: list[CallEvent] = []
    with (
        FakeProvider(model="gpt-4-0613", name="small", reply=_small_reply) as small,
        FakeProvider(model="gpt-4o", name="wide", reply=lambda b: '{"answer": 4}') as wide,
    ):
        router = TaskRouter(
            {"small": ["small"], "wide": ["wide"]},
            cascades={"auto": Cascade(["small", "wide"], checks=[json_schema(SCHEMA)])},
            rules=[Rule("small", feature="draft")],
            default="auto",
        )
        guard = Guard(
            _routes(small, wide),
            tasks=router,
            max_input_tokens=500,
            prices=prices,
            hooks=[events.append],
            environ={},
        )

        async def escalate() -> None:
            try:
                await guard.achat(_BIG)
            finally:
                await guard.aclose()

        with guard:
            with pytest.raises(InputTooLargeError) as error:
                guard.chat(_BIG) if mode == "sync" else anyio.run(escalate)
            assert (small.stats.requests, wide.stats.requests) == (1, 0)  # small's rejected
            draft = guard.chat(_BIG, feature="draft")  # the small tier alone serves it
    assert error.value.estimated is False
    assert error.value.tokens > 1200  # gpt-4o's count, not gpt-4's (about 200)
    assert draft.route == "small"
    assert draft.cost_usd is not None
    assert events[0].cost_usd == pytest.approx(draft.cost_usd)  # the rejected answer's
