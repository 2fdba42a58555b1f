"""`crucible profile` measures and imports profiles; `crucible validate` compares rankings honestly."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from search.cli.main import main
from search.stats.signed_rank import signed_rank_p
from search.validation import SETTLING_LEVEL, kendall_tau, report, summary
from targets.base import Check
from targets.costmodel.model import COLLECTIVES, OPERATORS, CostModel, load_profile
from targets.costmodel.shapes import ModelShape
from targets.kv.target import KVTarget

VIDUR = Path(__file__).resolve().parents[3] / "shared" / "data" / "gpu-profiles"
KV = KVTarget().validation()
"""The kv target's validation: what these reports are made of."""


def test_kendall_tau_counts_order_and_discounts_exact_ties() -> None:
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    # Two policies that decide alike tie in the simulator; the engine's noise orders them either way.
    assert kendall_tau([1, 1, 3], [1.0, 1.1, 3.0]) == kendall_tau([1, 1, 3], [1.1, 1.0, 3.0]) > 0.8


def test_pairs_the_engine_did_not_settle_are_left_out_of_both_rankings() -> None:
    assert kendall_tau([1, 2, 3], [2.0, 1.0, 3.0]) == pytest.approx(1 / 3)
    assert kendall_tau([1, 2, 3], [2.0, 1.0, 3.0], unsettled={(0, 1)}) == 1.0, "a flipped pair is no evidence"
    assert kendall_tau([1, 2, 3], [3.0, 1.0, 2.0], unsettled={(1, 2)}) == -1.0, "settled pairs still count"
    assert kendall_tau([1, 1, 3], [1.0, 2.0, 3.0], unsettled={(1, 2)}) == pytest.approx(1 / 2**0.5)
    assert kendall_tau([1, 2, 3], [1.0, 2.0, 3.0], unsettled={(0, 1), (0, 2), (1, 2)}) == 1.0, "none left"


def _served(sim: float, engine: list[float]) -> list[dict[str, float]]:
    row = {"engine_max_logit_diff": 0.0, "prefill_share_saved": 0.1, "engine_prefill_share_saved": 0.1}
    return [{"prefill_ms_saved": sim, "engine_prefill_ms_saved": e, **row} for e in engine]


def test_rounds_give_medians_and_leave_out_the_pairs_whose_engine_order_flips_between_rounds() -> None:
    result = report(
        KV,
        {
            "a": _served(100.0, [90.0, 120.0, 100.0]),
            "b": _served(110.0, [95.0, 105.0, 98.0]),  # above a in round 1, below in rounds 2 and 3
            "c": _served(300.0, [280.0, 310.0, 290.0]),
        },
    )
    assert result["rounds"] == 3
    assert result["policies"]["a"]["engine_prefill_ms_saved"] == 100.0, "the median of the rounds"
    assert result["policies"]["a"]["engine_prefill_ms_saved_rounds"] == [90.0, 120.0, 100.0]
    assert result["unsettled"] == [("a", "b")] and result["engine_settled"] == pytest.approx(2 / 3)
    assert result["kendall_tau"] == 1.0, "a, b left out; the other pairs agree"


def test_a_pair_the_engine_orders_alike_in_every_round_is_settled_though_the_machine_drifted() -> None:
    result = report(
        KV,
        {
            "a": _served(100.0, [90.0, 130.0, 110.0]),  # the machine slowed in round 2 for both
            "b": _served(110.0, [100.0, 140.0, 115.0]),  # ranges overlap, yet b leads a in every round
        },
    )
    assert result["unsettled"] == [] and result["engine_settled"] == 1.0
    assert result["kendall_tau"] == 1.0


def test_more_rounds_settle_more_pairs_one_small_contrary_round_is_outweighed() -> None:
    leads = [100.0, 120.0, 90.0, 110.0, 95.0]
    by = {
        "small": [20.0, 15.0, 30.0, 25.0, -5.0],  # the round against is the smallest difference
        "second": [20.0, 15.0, 30.0, 25.0, -17.0],  # ... the second smallest
        "large": [20.0, 15.0, 30.0, 25.0, -40.0],  # ... the largest
    }
    for case, settled in (("small", True), ("second", True), ("large", False)):
        behind = [x + d for x, d in zip(leads, by[case], strict=True)]
        served = {"a": _served(100.0, leads), "b": _served(110.0, behind)}
        assert (report(KV, served)["unsettled"] == []) is settled, case


def test_a_pair_is_settled_at_the_signed_rank_test_s_level_one_eighth() -> None:
    assert signed_rank_p([3.0, 1.0, 2.0]) == signed_rank_p([-3.0, -1.0, -2.0]) == 1 / 8 == SETTLING_LEVEL
    assert signed_rank_p([3.0, 1.0]) == 1 / 4, "two rounds all one way settle nothing"
    assert signed_rank_p([5.0, 4.0, 3.0, 2.0, -1.0]) == 2 / 32
    assert signed_rank_p([5.0, 4.0, 3.0, -2.0, 1.0]) == 3 / 32
    assert signed_rank_p([5.0, 4.0, -3.0, 2.0, 1.0]) == 5 / 32
    assert signed_rank_p([2.0, 0.0, 1.0, 3.0]) == 1 / 8, "a zero difference has no sign: dropped"
    assert signed_rank_p([1.0, 1.0, -1.0]) == 1 / 2, "tied sizes share their mean rank"
    assert signed_rank_p([0.0, 0.0]) == 1.0


def test_pairs_the_simulator_orders_differently_within_the_measured_speeds_are_left_out_too() -> None:
    needs_half = replace(KV, checks=(Check("pairs_compared", at_least=0.5),))
    served = {
        "a": _served(100.0, [120.0, 118.0, 119.0]),  # the engine puts b ahead of a in every round ...
        "b": _served(101.0, [110.0, 111.0, 109.0]),  # ... and the simulator a ahead of b by a per cent
        "c": _served(300.0, [290.0, 310.0, 300.0]),
    }
    assert report(needs_half, served)["kendall_tau"] == pytest.approx(1 / 3), "charged as discordant"
    result = report(needs_half, served, unresolved={("a", "b")})
    assert result["unresolved"] == [("a", "b")] and result["unsettled"] == []
    assert result["kendall_tau"] == 1.0, "an order the simulator does not resolve is no evidence"
    assert result["engine_settled"] == 1.0 and result["pairs_compared"] == pytest.approx(2 / 3)
    assert [c["passed"] for c in result["checks"]] == [True]
    said = "left out too (the simulator's order by saved ms changes within the speeds the engine's"
    assert any(
        line.startswith(said) and "a ~ b; 67% of the pairs compared" in line for line in summary(KV, result)
    )
    assert not any(line.startswith(said) for line in summary(KV, report(KV, served)))
    both = report(needs_half, served, unresolved={("a", "c"), ("b", "c")})
    assert both["pairs_compared"] == pytest.approx(1 / 3) and [c["passed"] for c in both["checks"]] == [False]


def test_the_batching_simulator_is_priced_at_the_jobs_median_speed_and_at_their_fastest_and_slowest(
    tmp_path,
) -> None:
    from targets.base import Instance
    from targets.batching.validation import priced_as_measured

    instance = Instance("w.csv", {"profile": "cpu-2core-passes", "engine": {"seed": 0}}, "w")
    served = {
        "a": [{"passes_vs_profile": 1.1}, {"passes_vs_profile": 0.9}],
        "b": [{"passes_vs_profile": 1.3}],
    }
    calibration = priced_as_measured(instance, {}, served, tmp_path)
    assert calibration is not None
    assert calibration.figures == {"passes_vs_profile": 1.1, "passes_vs_profile_range": [0.9, 1.3]}
    shipped = load_profile("cpu-2core-passes").operators["forward"].coef

    def factor(priced: Instance) -> float:
        assert "engine" not in priced.config, "the simulator alone"
        coef = load_profile(priced.config["profile"]).operators["forward"].coef
        return next(c / s for c, s in zip(coef, shipped, strict=True) if s)

    assert factor(calibration.priced) == pytest.approx(1.1)
    assert [factor(i) for i in calibration.band] == [pytest.approx(0.9), pytest.approx(1.3)]
    assert priced_as_measured(instance, {}, {"a": [{"ttft_mean_ms": 1.0}]}, tmp_path) is None, "none timed"


def test_a_validation_report_states_each_policys_error_ranks_and_checks() -> None:
    row = {"engine_max_logit_diff": 1e-6, "prefill_share_saved": 0.1, "engine_prefill_share_saved": 0.1}
    result = report(
        KV,
        {
            "a": [{"prefill_ms_saved": 90.0, "engine_prefill_ms_saved": 100.0, **row}],
            "b": [{"prefill_ms_saved": 260.0, "engine_prefill_ms_saved": 200.0, **row}],
        },
    )
    a, b = result["policies"]["a"], result["policies"]["b"]
    assert a["error_prefill_ms_saved"] == pytest.approx(0.1)
    assert (a["sim_rank"], a["engine_rank"], b["sim_rank"], b["engine_rank"]) == (2, 2, 1, 1)
    assert result["error_max"] == pytest.approx(0.3)
    assert result["kendall_tau"] == 1.0
    assert result["max_logit_diff"] == 1e-6
    verdicts = {c["figure"]: c["passed"] for c in result["checks"]}
    assert verdicts == {"kendall_tau": True, "error_max": False, "max_logit_diff": True}


def test_how_the_engine_s_jobs_measured_the_machine_is_reported_and_said() -> None:
    served = {"a": _served(100.0, [90.0, 110.0]), "b": _served(300.0, [280.0, 320.0])}
    measured = {"passes_vs_profile": 1.01, "passes_vs_profile_range": [0.97, 1.04]}
    result = report(KV, served, measured)
    assert result["calibration"] == measured
    lines = summary(KV, result)
    said = "the simulator priced as the engine's jobs measured the machine: "
    assert f"{said}passes_vs_profile 1.01" in lines
    assert f"{said}passes_vs_profile_range 0.97, 1.04" in lines
    assert not any(said in line for line in summary(KV, report(KV, served)))


def test_a_figure_the_engine_measured_as_zero_has_no_relative_error() -> None:
    row = {"engine_max_logit_diff": 0.0, "prefill_share_saved": 0.0, "engine_prefill_share_saved": 0.0}
    result = report(KV, {"a": [{"prefill_ms_saved": 5.0, "engine_prefill_ms_saved": 0.0, **row}]})
    assert result["policies"]["a"]["error_prefill_ms_saved"] is None
    assert result["policies"]["a"]["error_prefill_share_saved"] == 0.0
    assert result["error_max"] is None
    assert not next(c for c in result["checks"] if c["figure"] == "error_max")["passed"]


@pytest.mark.skipif(not VIDUR.is_dir(), reason="needs ../shared/data/gpu-profiles")
def test_profile_imports_vidur_measurements_and_states_the_fit_error(tmp_path, capsys) -> None:
    out = tmp_path / "h100.json"
    main(["profile", "--from-vidur", str(VIDUR), "--output", str(out)])
    assert "all_reduce/8" in capsys.readouterr().out
    # Least-squares fits differ across BLAS builds in their last digits: compare every number within 1e-9
    # relative, everything else (names, shapes, sources, held-back marks) exactly.
    assert _approx(json.loads(out.read_text())) == load_profile("h100-vidur").to_json()


def _approx(value: object) -> object:
    """`value` with every float wrapped in pytest.approx(rel=1e-9), recursively."""
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-9, abs=1e-12)
    if isinstance(value, dict):
        return {k: _approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_approx(v) for v in value]
    return value


def test_validate_names_the_baselines_when_a_candidate_is_neither_file_nor_baseline(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--target", "batching", "--candidates", "lru"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "lru: neither a readable heuristic file nor a baseline (edf, fcfs, sarathi, spf, srpt)" in err


@pytest.mark.torch
def test_validate_kv_replays_each_policy_in_simulator_and_engine(capsys, tmp_path) -> None:
    pytest.importorskip("torch")
    main(
        ["validate", "--target", "kv", "--candidates", "lru", "belady", "--workload", "gen:chat:1",
         "--requests", "0:30", "--capacity", "60", "--block-tokens", "4", "--repeats", "1",
         "--sandbox", "process", "--json", "--db", f"sqlite:///{tmp_path / 'runs.db'}"]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert set(report["policies"]) == {"lru", "belady"}
    belady, lru = report["policies"]["belady"], report["policies"]["lru"]
    assert belady["prefill_ms_saved"] >= lru["prefill_ms_saved"] > 0
    assert belady["engine_hit_tokens"] >= lru["engine_hit_tokens"] > 0
    assert report["max_logit_diff"] < 1e-4
    assert -1.0 <= report["kendall_tau"] <= 1.0


@pytest.mark.torch
def test_validate_batching_serves_each_policy_in_simulator_and_engine(capsys, tmp_path) -> None:
    pytest.importorskip("torch")
    main(
        ["validate", "--target", "batching", "--candidates", "fcfs", "spf", "--requests", "0:12",
         "--max-output", "4", "--rounds", "2", "--sandbox", "process", "--json",
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert "profile cpu-2core-passes: measured 2026-12-01, load average " in err, "the pricing's load, said"
    report = json.loads(out)
    assert set(report["policies"]) == {"fcfs", "spf"}
    assert report["rounds"] == 2 and all(len(pair) == 2 for pair in report["unsettled"])
    assert report["ranked_by"] == "ttft_mean_ms"
    assert {report["policies"][p]["engine_rank"] for p in ("fcfs", "spf")} == {1, 2}
    assert -1.0 <= report["kendall_tau"] <= 1.0
    measured = report["calibration"]
    assert 0.2 < measured["passes_vs_profile"] < 5, "the profile's passes timed again on this machine"
    low, high = measured["passes_vs_profile_range"]
    assert all(low <= row["passes_vs_profile"] <= high for row in report["policies"].values()), "every job"
    assert all(len(set(row["ttft_mean_ms_rounds"])) == 1 for row in report["policies"].values()), (
        "the simulator served once more at the end, priced as the jobs measured the machine"
    )
    assert all(pair in (["fcfs", "spf"], ["spf", "fcfs"]) for pair in report["unresolved"])
    left_out = {tuple(p) for p in report["unsettled"] + report["unresolved"]}
    assert report["pairs_compared"] == 1.0 - len(left_out), "one pair: compared unless left out"


@pytest.mark.torch
def test_passes_are_timed_again_at_the_profile_s_compositions_no_larger_than_an_iteration() -> None:
    pytest.importorskip("torch")
    from targets.reference_engine.profiler import Settings, time_passes

    shipped = load_profile("cpu-2core-passes")
    timed = time_passes(shipped, Settings(warmup=0, repeats=1), block=8, max_tokens=40)
    profiled = {tuple(s.shape.items()) for s in shipped.operators["forward"].samples}
    assert timed and all(s.shape["tokens"] <= 40 and s.ms > 0 for s in timed)
    assert {tuple(s.shape.items()) for s in timed} <= profiled, "the same passes, priced as the profile does"


@pytest.mark.torch
def test_a_profile_without_timed_passes_cannot_be_timed_again() -> None:
    pytest.importorskip("torch")
    from targets.costmodel.model import ProfileError
    from targets.reference_engine.profiler import Settings, time_passes

    with pytest.raises(ProfileError, match="no timed forward passes"):
        time_passes(load_profile("cpu-2core"), Settings(), block=8, max_tokens=64)


@pytest.mark.torch
def test_profile_measures_every_operator_and_collective_into_a_loadable_file(tmp_path) -> None:
    pytest.importorskip("torch")
    from targets.reference_engine.profiler import Settings, profile

    micro = ModelShape("micro", layers=1, hidden=16, heads=2, head_dim=8, ffn=16, vocab=32)
    settings = Settings(warmup=1, repeats=1, min_seconds=0.0, groups=(2,))
    measured = profile(micro, settings, "micro-cpu", block=4, progress=lambda _: None)
    measured.save(tmp_path / "p.json")
    again = load_profile(str(tmp_path / "p.json"))
    assert set(again.operators) == set(OPERATORS)
    assert len(again.meta["load_average"]) == 2, "the load it was measured under, at the start and the end"
    assert all(set(again.collectives[op]) == {2} for op in COLLECTIVES)
    assert all(s.ms > 0 for f in again.operators.values() for s in f.samples)
    passes = again.operators["forward"].samples
    assert all(s.shape["ops_ms"] > 0 and s.shape["sequences"] >= 1 for s in passes)
    cost = CostModel(again, micro)
    assert cost.prefill_ms(64, 0) > 0 and cost.collective_ms("all_reduce", 2**20, 2) > 0


def test_validate_refuses_an_option_another_target_declares_in_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--target", "kv", "--candidates", "lru", "--load", "3"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--load is not an option of validate --target kv" in err and "--capacity" in err


def test_validate_names_the_option_whose_value_is_out_of_bounds(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--target", "batching", "--candidates", "fcfs", "--capacity", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("crucible: error: option capacity must") and len(err.splitlines()) == 1


def test_validate_refuses_to_time_again_the_passes_of_a_profile_that_has_none(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--target", "batching", "--candidates", "fcfs", "--profile", "cpu-2core"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("crucible: error: option retime_passes: profile cpu-2core has no timed forward")
    assert "--retime-passes false" in err and len(err.splitlines()) == 1


def test_validate_names_the_window_a_slice_must_lie_in(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--target", "kv", "--candidates", "lru", "--requests", "0:999999"])
    assert exc.value.code == 2
    assert "option requests needs 0 <= START < STOP <=" in capsys.readouterr().err


@pytest.mark.skipif(not VIDUR.is_dir(), reason="needs ../shared/data/gpu-profiles")
def test_profile_json_is_the_summary_of_the_profile_it_wrote(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    main(["profile", "--from-vidur", str(VIDUR), "--output", "h100.json", "--json"])
    summary = json.loads(capsys.readouterr().out)  # stdout is the JSON alone
    written = load_profile(str(tmp_path / "h100.json"))
    assert summary["output"] == str(tmp_path / "h100.json")
    assert (summary["name"], summary["device"], summary["model"]) == (
        written.name,
        written.device,
        written.model.name,
    )
    fits = {f["operator"]: f for f in summary["fits"]}
    assert set(fits) == {op for op, *_ in written.error_table()}
    all_reduce = fits["all_reduce/8"]
    assert all_reduce["coef_ms"] == list(written.collectives["all_reduce"][8].coef)
    median, worst, held_back = written.collectives["all_reduce"][8].errors()
    assert (all_reduce["median_error"], all_reduce["worst_error"], all_reduce["held_back"]) == (
        median,
        worst,
        held_back,
    )
    assert 0 < held_back < all_reduce["samples"] and 0 <= median <= worst


def test_a_validation_can_require_the_engine_to_settle_most_pairs() -> None:
    needs_half = replace(KV, checks=(Check("engine_settled", at_least=0.5),))
    flips = {"a": [90.0, 120.0, 100.0], "b": [95.0, 105.0, 98.0], "c": [97.0, 101.0, 110.0]}  # all flip
    result = report(needs_half, {n: _served(100.0 + i, e) for i, (n, e) in enumerate(flips.items())})
    assert result["engine_settled"] == 0.0 and result["kendall_tau"] == 1.0, "no pair left to disagree"
    assert [c["passed"] for c in result["checks"]] == [False]


@pytest.mark.torch
def test_profile_measures_a_deployments_share_and_sets_it_beside_the_published_prediction(
    capsys, tmp_path
) -> None:
    """The GPU command's own code path on the CPU: one GPU's share of Llama-3-70B at TP 8 (its GEMM shapes,
    SDPA with 8 query heads over 1 KV head), in BF16, with the measured / predicted ratio per operator. At
    most 32 tokens: on a CPU without BF16 instructions, one 64-token QKV GEMM of this share takes 28 s."""
    pytest.importorskip("torch")
    out = tmp_path / "measured.json"
    main(["profile", "--deployment", "h100-llama3-70b-tp8", "--max-tokens", "32", "--repeats", "1",
          "--groups", "2", "--output", str(out), "--json"])  # fmt: skip
    shown = json.loads(capsys.readouterr().out)
    ratios = {row["operator"]: row for row in shown["against_published"]}
    assert {"gemm", "attn_prefill", "attn_decode", "norm", "act", "all_reduce/2"} <= set(ratios)
    assert all(row["measured / predicted"] > 1.0 for row in ratios.values()), (
        "a CPU core is slower than an H100"
    )
    measured = load_profile(str(out))
    assert "bfloat16" in measured.notes and measured.model.kv_heads == 1 and measured.model.heads == 8
    qkv = {s.shape["n"] for s in measured.operators["gemm"].samples if s.shape["k"] == 8192}
    assert (8 + 2 * 1) * 128 in qkv, "the QKV projection as wide as 8 query and 2 x 1 KV heads"
    assert max(s.shape["m"] for s in measured.operators["gemm"].samples) == 16


def test_profile_refuses_a_deployment_it_cannot_measure(capsys) -> None:
    for argv in (["--deployment", "llama3-8b-h100"], ["--deployment", "h100", "--max-tokens", "-1"]):
        with pytest.raises(SystemExit) as exc:
            main(["profile", *argv])
        assert exc.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
