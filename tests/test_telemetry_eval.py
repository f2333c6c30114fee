"""Sampling for evaluation: a share of real calls (redacted, with feedback) into JSON Lines
under a retention limit, replayed by ``llmguard eval`` against a second FakeProvider
release, which prints the agreement table."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import pytest

from llmguard_sdk import Guard, OpenAICompatibleProvider
from llmguard_sdk.budget import Price, PriceTable
from llmguard_sdk.cli import main
from llmguard_sdk.errors import ConfigurationError
from llmguard_sdk.releases import Release
from llmguard_sdk.telemetry import Telemetry
from llmguard_sdk.telemetry.evaluation import compare_overlap, replay
from llmguard_sdk.telemetry.sampling import EvalSink, read_samples
from llmguard_sdk.testing import FakeProvider

PRICES = PriceTable.default_table().with_prices({"fake-model": Price(input=100.0, output=200.0)})
QUESTIONS = [f"What is the capital of country {i}?" for i in range(30)]


def last_question(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def release_1(body: dict[str, Any]) -> str:
    return f"The answer to '{last_question(body)}' is the city we know best."


def release_2(body: dict[str, Any]) -> str:
    question = last_question(body)
    if question.endswith(("3?", "7?")):  # the new release got these wrong
        return "I am not sure about that one."
    return release_1(body)


def sampled_traffic(path: Path, share: float = 0.5) -> tuple[list[str], int]:
    """30 calls (one with an e-mail address) to release 1, half of them sampled; a thumb on
    every answer. Returns the call ids and how many calls the sink wrote."""
    sink = EvalSink(path, share=share, seed=7)
    telemetry = Telemetry(eval_sink=sink, log_level=None)  # no SDK: the sink alone
    ids = []
    with FakeProvider(name="v1", reply=release_1) as api:
        provider = OpenAICompatibleProvider(api.base_url, model="fake-model", name="v1")
        with Guard(provider, telemetry=telemetry, prices=PRICES, environ={}) as guard:
            for number, question in enumerate(QUESTIONS):
                text = question + (" Mail me at jane.doe@example.com." if number == 0 else "")
                feature = "geo" if number % 2 else "faq"
                answer = guard.chat([{"role": "user", "content": text}], feature=feature)
                ids.append(answer.metadata["call_id"])
                telemetry.feedback(answer.metadata["call_id"], 1.0, label="thumbs")
    written = sum(1 for line in path.read_text().splitlines() if '"type":"call"' in line)
    return ids, written


def test_a_share_of_calls_is_written_redacted_with_feedback(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    ids, written = sampled_traffic(path)
    assert 8 <= written <= 22  # half of 30, give or take chance (seeded)
    text = path.read_text()
    assert "jane.doe@example.com" not in text
    samples = read_samples(path)
    assert len(samples) == written
    assert {s["call_id"] for s in samples} <= set(ids)
    first = samples[0]
    assert first["route"] == "v1"
    assert first["feature"] in ("faq", "geo")
    assert first["cost_usd"] > 0
    assert first["usage"]["output_tokens"] > 0
    assert first["request"]["messages"][0]["role"] == "user"
    assert first["answer"].startswith("The answer to")
    assert all(s["feedback"] == [{"score": 1.0, "label": "thumbs"}] for s in samples)
    sampled_traffic(tmp_path / "again.jsonl")  # the same seed: the same share
    assert len(read_samples(tmp_path / "again.jsonl")) == written


def test_everything_sampled_and_nothing_sampled(tmp_path: Path) -> None:
    _, everything = sampled_traffic(tmp_path / "all.jsonl", share=1.0)
    assert everything == len(QUESTIONS)
    with pytest.raises(ConfigurationError, match="share"):
        EvalSink(tmp_path / "x.jsonl", share=1.5)
    with pytest.raises(ConfigurationError, match="max_bytes"):
        EvalSink(tmp_path / "x.jsonl", max_bytes=10)
    bad: list[tuple[str, object]] = [
        ("share", "0.1"), ("share", True), ("share", math.nan), ("max_bytes", "1e6"),
        ("max_bytes", math.inf), ("max_age_s", None), ("max_age_s", math.inf),
    ]  # fmt: skip
    for name, value in bad:  # a TypeError, or accepted (True sampled every call)
        with pytest.raises(ConfigurationError, match=name):
            EvalSink(tmp_path / "x.jsonl", **{name: value})  # type: ignore[arg-type]
    EvalSink(tmp_path / "x.jsonl", max_bytes=5e7)  # type: ignore[arg-type]  # 5e7: a number


def test_retention_by_size_and_by_age(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    sink = EvalSink(path, share=1.0, max_bytes=4096, max_age_s=3600)
    for number in range(200):
        sink._write({"type": "call", "call_id": str(number), "ts": time.time(), "pad": "x" * 50})
    older = tmp_path / "eval.jsonl.1"
    assert older.exists()
    assert path.stat().st_size + older.stat().st_size <= 4096
    assert read_samples(path)[-1]["call_id"] == "199"
    # A file whose first record is older than half the age limit is rotated; a rotated file
    # older than the limit is deleted.
    path.write_text(json.dumps({"type": "call", "call_id": "old", "ts": time.time() - 2000}) + "\n")
    sink = EvalSink(path, share=1.0, max_bytes=4096, max_age_s=3600)
    sink.prune()
    assert not path.exists()
    assert read_samples(older)[0]["call_id"] == "old"
    os.utime(older, (time.time() - 2000, time.time() - 2000))
    sink.prune()
    assert not older.exists()


def test_llmguard_eval_replays_against_a_second_release_and_prints_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "eval.jsonl"
    sampled_traffic(path, share=1.0)
    with FakeProvider(name="v2", reply=release_2) as v2:
        status = main(
            [
                "eval",
                str(path),
                "--base-url",
                v2.base_url,
                "--model",
                "fake-model",
                "--name",
                "release-2",
                "--price",
                "fake-model=100/200",
            ]
        )
        out = capsys.readouterr().out
        assert status == 0
        assert "replayed against release-2" in out
        (all_row,) = [line for line in out.splitlines() if line.startswith("all ")]
        assert all_row.split()[1:3] == ["30", "80%"]  # 6 of 30 questions answered otherwise
        assert any(line.startswith("faq ") for line in out.splitlines())
        assert main(["eval", str(path), "--base-url", v2.base_url, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["overall"]["agreed"] == 24
    assert report["overall"]["feedback_mean"] == 1.0
    assert report["overall"]["recorded"]["calls"] == 30
    assert report["overall"]["replayed"]["latency_p50_s"] > 0


def test_a_comparator_of_ones_own(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    sampled_traffic(path, share=1.0)
    with (
        FakeProvider(name="v2", reply=release_2) as v2,
        Guard(OpenAICompatibleProvider(v2.base_url, name="v2"), environ={}) as guard,
    ):
        strict = replay(path, guard, compare=lambda a, b: a == b, limit=10)
        loose = replay(path, guard, compare=compare_overlap, threshold=0.0, limit=10)
    assert (strict.overall.compared, strict.overall.agreed) == (10, 8)
    assert loose.overall.agreed == 10
    assert strict.candidate == "v2"


def test_a_sample_names_the_release_of_a_guard_that_serves_releases(tmp_path: Path) -> None:
    """``Guard(release=...)`` puts the release on the call, not in the request's metadata:
    the sample names it as the call's span and quality labels do."""
    path = tmp_path / "eval.jsonl"
    telemetry = Telemetry(eval_sink=EvalSink(path, share=1.0), log_level=None)
    with FakeProvider(name="v1", reply=release_1) as api:
        route = OpenAICompatibleProvider(api.base_url, model="fake-2025-01-01", name="v1")
        with Guard(release=Release("bot", "v3", route), telemetry=telemetry, environ={}) as guard:
            guard.chat([{"role": "user", "content": QUESTIONS[0]}])
            guard.chat([{"role": "user", "content": QUESTIONS[1]}], metadata={"release": "x"})
    assert [s["release"] for s in read_samples(path)] == ["bot@v3", "bot@v3"]


def test_credentials_are_masked_in_samples_whatever_redact_the_sink_was_given(
    tmp_path: Path,
) -> None:
    """A sink's own ``redact`` (here: names masked) is applied on top of the credential
    masking that all telemetry does, as ``Telemetry(redact=...)`` is, not instead of it."""
    path = tmp_path / "eval.jsonl"
    sink = EvalSink(path, share=1.0, redact=lambda text: text.replace("Jane", "[name]"))
    telemetry = Telemetry(eval_sink=sink, log_level=None)
    key = "sk-live-4f9a8b7c6d5e4f3a2b1c"
    with FakeProvider(name="v1") as api:  # echoes the question
        provider = OpenAICompatibleProvider(api.base_url, model="fake-model", name="v1")
        with Guard(provider, telemetry=telemetry, environ={}) as guard:
            answer = guard.chat([{"role": "user", "content": f"Jane here, is {key} valid?"}])
            telemetry.feedback(answer.metadata["call_id"], 0.0, label=f"leaked {key}")
    text = path.read_text()
    assert "[name] here" in text
    assert key not in text


def _write_samples(path: Path, process: int, count: int, max_bytes: int) -> None:
    sink = EvalSink(path, share=1.0, max_bytes=max_bytes)
    for number in range(count):
        call_id = f"{process:02d}-{number:05d}"
        sink._write({"type": "call", "call_id": call_id, "ts": int(time.time()), "pad": "x" * 150})


def test_processes_sharing_a_sink_rotate_it_once_each_time(tmp_path: Path) -> None:
    """Processes writing one file: each rotation happens once, under a lock all of them
    take, so FILE.1 always holds a whole half (two processes rotating at once replaced a
    full FILE.1 by a file of a few lines, or wrote into the file just renamed)."""
    import multiprocessing

    path = tmp_path / "eval.jsonl"
    _write_samples(tmp_path / "size.jsonl", 0, 1, 4096)
    size = (tmp_path / "size.jsonl").stat().st_size  # every line has this size
    per_half = 10
    max_bytes = 2 * per_half * size
    processes, count = 4, 400
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_write_samples, args=(path, n, count, max_bytes))
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        assert worker.exitcode == 0
    lines = path.read_text().splitlines()
    older = path.with_name(path.name + ".1").read_text().splitlines()
    assert len(older) == per_half
    assert len(lines) == (processes * count - 1) % per_half + 1
    assert all(len(line) + 1 == size for line in lines + older)


def test_a_sample_over_half_the_limit_is_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two files of half ``max_bytes`` each: a record longer than a half cannot fit, so it is
    left out (logged) and the files stay within the limit (it rotated a full FILE.1 away and
    made FILE alone pass the half)."""
    path = tmp_path / "eval.jsonl"
    sink = EvalSink(path, share=1.0, max_bytes=4096)
    for number in range(60):
        sink._write({"type": "call", "call_id": str(number), "ts": time.time(), "pad": "x" * 50})
    assert not sink.offer(lambda: {"type": "call", "call_id": "big", "pad": "x" * 3000}, "big")
    older = path.with_name(path.name + ".1")
    assert path.stat().st_size + older.stat().st_size <= 4096
    assert [s["call_id"] for s in read_samples(path)][-1] == "59"
    assert any("max_bytes" in record.getMessage() for record in caplog.records)
    assert not sink.feedback("big", 1.0, None)  # no feedback line for a call not written


def test_a_hand_edited_sample_is_skipped_or_counted_unknown_not_a_crash(tmp_path: Path) -> None:
    """A line with a cost or latency that is no number raised ``TypeError`` out of
    ``llmguard eval``; one without its request, ``KeyError``."""
    messages = [{"role": "user", "content": "hello there"}]
    lines = [
        {"type": "call", "call_id": "a", "request": {"messages": messages}, "answer": "hi",
         "cost_usd": "0.1", "latency_s": "fast"},
        {"type": "call", "call_id": "b", "answer": "hi"},  # no request
        {"type": "call", "call_id": "c", "request": {"messages": "hello"}, "answer": "hi"},
        {"type": "call", "call_id": "d", "request": ["hello"], "answer": "hi"},
    ]  # fmt: skip
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with FakeProvider(model="fake-model") as fake:
        provider = OpenAICompatibleProvider(fake.base_url, api_key="k", model="fake-model")
        with Guard(provider, retry=None, environ={}) as guard:
            report = replay(path, guard)
    assert (report.overall.compared, report.skipped) == (1, 3)
    recorded = report.as_dict()["overall"]["recorded"]
    assert (recorded["cost_usd"], recorded["latency_p50_s"]) == (None, None)
    argv = ["eval", str(path), "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    assert main(argv) == 1  # replay failed


def test_feedback_lines_with_an_odd_call_id_are_skipped(tmp_path: Path) -> None:
    """A feedback line whose ``call_id`` is a list raised ``TypeError`` (unhashable)."""
    path = tmp_path / "samples.jsonl"
    lines = [
        {"type": "call", "call_id": "a", "request": {"messages": []}, "answer": "hi"},
        {"type": "feedback", "call_id": ["a"], "score": 1},
        {"type": "feedback", "call_id": {"a": 1}, "score": 1},
        {"type": "feedback", "call_id": "a", "score": 0.5},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (sample,) = read_samples(path)
    assert sample["feedback"] == [{"score": 0.5, "label": None}]
