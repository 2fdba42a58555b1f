"""The cost model against every published measurement (measurements.toml): the split by model comes first,
the constants come from the calibration half alone, and the check half's figures hold at what was measured
(`crucible dit check`), so a regression fails here."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from targets.dit import fidelity
from targets.dit.fidelity import calibrate, candidates, compare, kendall_tau, summarize, tables, verdicts
from targets.dit.pricing import CALIBRATION, gpu_pricing
from targets.dit.topology import TOPOLOGIES

CHECK = {"tables": 8, "top1": 6 / 8, "top3": 7 / 8, "error_median": 0.180, "error_worst": 0.403}
"""`crucible dit check --half check` after the eager elementwise passes, float32 linear attention, Mix-FFN
convolution, ConsisID's face cross-attention, Ulysses' layout copies, float32 ring merges, ring hops at the
slowest link, and ConsisID's table on an H100 PCIe box (docs/targets/dit.md). Before them: top-1 5/8, top-3
8/8, median error 0.489, worst 0.675."""
CALIBRATION_HALF = {
    "tables": 24,
    "top1": 17 / 24,
    "top3": 22 / 24,
    "error_median": 0.020,
    "error_worst": 0.534,
}
"""`crucible dit check --half calibration` at the same commit (before: 17/24, 21/24, 0.038, 0.521)."""
CHECK_ON_NVLINK = {"error_median": 0.332, "consisid_rank": 2}
"""The check half with ConsisID's table on h100-nvlink instead of the assumed h100-pcie."""


@pytest.fixture(scope="module")
def found() -> list[fidelity.Verdict]:
    return verdicts()


def test_the_split_is_by_model_and_every_table_not_excluded_is_in_one_half() -> None:
    halves = {t.half for t in tables()}
    assert halves == {"calibration", "check", "excluded"}
    for half in ("calibration", "check"):
        other = "check" if half == "calibration" else "calibration"
        mine = {t.model for t in tables() if t.half == half}
        assert mine and not mine & {t.model for t in tables() if t.half == other}
    for t in tables():
        assert t.source, t.id
        if t.half == "excluded":
            assert t.excluded, f"{t.id}: a model in neither half needs a reason it is excluded"


@pytest.mark.parametrize(("half", "measured"), [("check", CHECK), ("calibration", CALIBRATION_HALF)])
def test_each_half_holds_its_figures(
    half: str, measured: dict[str, float], found: list[fidelity.Verdict]
) -> None:
    s = summarize(found, half)
    assert s.tables == measured["tables"]
    assert s.top1 >= measured["top1"] and s.top3 >= measured["top3"]
    assert s.error_median <= measured["error_median"] + 0.005
    assert s.error_worst <= measured["error_worst"] + 0.005


def test_the_check_half_meets_the_issues_bars(found: list[fidelity.Verdict]) -> None:
    """The published best plan in the cost model's top 3 in >= 80 % of the check tables, first in >= 60 %,
    and the median absolute-time error <= 20 % (this last one only under the PCIe assumption for ConsisID's
    machine: see the next test)."""
    s = summarize(found, "check")
    assert s.top3 >= 0.8 and s.top1 >= 0.6 and s.error_median <= 0.20


def test_consisids_interconnect_is_an_assumption_and_says_what_it_changes() -> None:
    """The page names no interconnect; the table says why PCIe is assumed, and on NVLink the check half's
    median error would be 33 %, the bar not met."""
    consisid = next(t for t in tables() if t.id == "consisid-480p-h100")
    assert consisid.topology == "h100-pcie" and "NVLink" in consisid.topology_assumed
    on_nvlink = replace(consisid, topology="h100-nvlink")
    found = [on_nvlink if v.table.id == consisid.id else v.table for v in verdicts()]
    compared = [compare(t, gpu_pricing(TOPOLOGIES[t.topology])) for t in found]
    assert summarize(compared, "check").error_median == pytest.approx(
        CHECK_ON_NVLINK["error_median"], abs=0.005
    )
    nvlink_rank = next(v for v in compared if v.table.id == consisid.id).published_rank
    assert nvlink_rank == CHECK_ON_NVLINK["consisid_rank"]


def test_the_shipped_constants_are_what_the_calibration_half_fits() -> None:
    fitted = calibrate()
    assert fitted.block_overhead_s == pytest.approx(CALIBRATION.block_overhead_s, rel=0.005)
    assert fitted.ring_step_overhead_s == pytest.approx(CALIBRATION.ring_step_overhead_s, rel=0.005)
    assert fitted.efficiency.keys() == CALIBRATION.efficiency.keys()
    for gpu, value in fitted.efficiency.items():
        assert value == pytest.approx(CALIBRATION.efficiency[gpu], rel=0.005), gpu


def test_the_fit_reads_no_check_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten times every check-half time, and the fit does not move."""
    original = tables()

    def scaled(t: fidelity.Table) -> fidelity.Table:
        if t.half != "check":
            return t
        rows = tuple(replace(r, seconds=None if r.seconds is None else 10 * r.seconds) for r in t.rows)
        return replace(t, rows=rows)

    monkeypatch.setattr(fidelity, "tables", lambda: tuple(scaled(t) for t in original))
    fitted = calibrate()
    assert fitted.block_overhead_s == pytest.approx(CALIBRATION.block_overhead_s, rel=0.005)
    assert fitted.efficiency == pytest.approx(CALIBRATION.efficiency, rel=0.005)


def test_a_best_table_ranks_only_plans_xdit_can_run_there() -> None:
    table = next(t for t in tables() if t.id == "cogvideox15-768p-l40-best8")
    found = candidates(table, gpu_pricing(TOPOLOGIES[table.topology]))
    assert (2, 1, 2, 2, 1) in found  # cfg2 x ring2 x ulysses2: the published best
    for cfg, pipefusion, ring, ulysses, tensor in found:
        assert cfg * pipefusion * ring * ulysses * tensor == 8
        assert pipefusion == tensor == 1, "xDiT runs CogVideoX with CFG, Ulysses and ring only"
        assert 48 % ulysses == 0


def test_a_latency_table_is_ranked_among_its_own_rows_and_its_best_is_its_fastest_row() -> None:
    table = next(t for t in tables() if t.id == "flux-1024-h100-compile")
    verdict = compare(table, gpu_pricing(TOPOLOGIES[table.topology]))
    assert len(verdict.plans) == len(table.rows) == 6
    assert verdict.published_best == (1, 1, 1, 4, 1)  # Ulysses-4, 1.63 s
    assert verdict.top1 and verdict.tau is not None
    assert all(p.published_s is not None for p in verdict.plans)


def test_kendall_tau_counts_agreeing_pairs_and_ignores_pairs_tied_in_both() -> None:
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    assert kendall_tau([1, 2, 3, 4], [1, 2, 4, 3]) == pytest.approx(4 / 6)
    assert math.isclose(kendall_tau([1, 1, 2], [1, 1, 2]), 1.0)
