"""`crucible validate --target serving`: the fleet as real engine processes behind a router process."""

from __future__ import annotations

import json

import pytest

from search.cli import main

pytestmark = pytest.mark.torch


def _validate(tmp_path, *options: str) -> list[str]:
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    return ["validate", "--target", "serving", "--sandbox", "process", "--db", db, *options]


def test_validate_serves_each_policy_in_the_simulator_and_on_processes(capsys, tmp_path) -> None:
    pytest.importorskip("torch")
    main(
        _validate(tmp_path, "--candidates", "round_robin", "mooncake_conductor", "--requests", "0:40",
                  "--capacity", "512", "--rounds", "1", "--json")
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert set(report["policies"]) == {"round_robin", "mooncake_conductor"}
    assert report["ranked_by"] == "ttft_mean_ms"
    for row in report["policies"].values():
        assert row["engine_ttft_mean_ms"] > 0 and row["ttft_mean_ms"] > 0
        assert row["engine_hit_rate"] > 0, "the engines found prefixes in their own caches"
        assert row["engine_unfinished"] == 0, "every request streamed back through the router in full"
    assert 0.2 < report["calibration"]["passes_vs_profile"] < 5, "the engines' passes against the profile's"
    assert -1.0 <= report["kendall_tau"] <= 1.0


def test_validate_refuses_a_divisor_that_cuts_the_trace_s_blocks_in_one_line(capsys, tmp_path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(_validate(tmp_path, "--candidates", "round_robin", "--token-divisor", "3"))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "token_divisor: 3 does not divide the trace's block of 512" in err


def test_validate_names_what_a_router_of_token_ids_cannot_apply(capsys, tmp_path) -> None:
    pytest.importorskip("torch")
    with pytest.raises(SystemExit) as exc:
        main(_validate(tmp_path, "--candidates", "prefix_hash", "--requests", "0:8", "--rounds", "1"))
    assert exc.value.code != 0
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no built-in router 'prefix_hash' here" in err
