"""The serving target: baselines are proved candidates, the mechanism only ever starts valid plans on free
GPUs, a policy that always waits cannot stall an idle cluster, and bad workloads end in one line."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from targets.base import WorkloadError
from targets.dit.models import MODELS
from targets.dit.plans import Request, plans
from targets.dit.pricing import gpu_pricing
from targets.dit.serving import TIME_PARTS, compact_group, request_profile, serve, serving_metrics
from targets.dit.target import SCORE, DiTTarget, _compiled, stream
from targets.dit.topology import TOPOLOGIES
from targets.dit.workload import Arrival, load_trace, write_trace
from verifiers.smt import prove
from verifiers.static import check

TARGET = DiTTarget()
DOMAINS = {"score": TARGET.registry("score").domain()}
RANDOM = '''"""Random-looking: a hash of the option's features, to reach odd choices."""


def score(o, p):
    return (o.arrival * 7.31 + o.gpus * 3.7 + o.ring * 1.3 + o.pipefusion * 2.9 + o.tensor) % 5.0 - 1.0
'''


@pytest.mark.parametrize("name", sorted(TARGET.baselines()))
def test_every_baseline_passes_the_static_check_and_its_hard_properties(name: str) -> None:
    program = check(TARGET.baselines()[name], TARGET.signatures)
    assert program.docstring
    hard = [p for p in TARGET.properties() if p.severity == "hard"]
    assert {o.property: o.verdict for o in prove(program, DOMAINS, hard)} == {p.name: "proved" for p in hard}


def test_a_score_that_divides_by_a_feature_that_can_be_zero_is_refused() -> None:
    program = check("def score(o, p):\n    return 1.0 / o.comm_share\n", TARGET.signatures)
    verdicts = {o.property: o.verdict for o in prove(program, DOMAINS, list(TARGET.properties()))}
    assert verdicts["no-division-by-zero"] == "counterexample"


@pytest.mark.parametrize("topology", ["h100-nvlink", "l40-pcie", "h100-nvlink-x2"])
@pytest.mark.parametrize("mix", ["images", "mixed"])
@pytest.mark.parametrize("policy", ["all_gpus_fcfs", "degree_per_model", "edf_fastest", "random"])
def test_the_mechanism_never_starts_an_invalid_plan_or_a_busy_gpu(
    topology: str, mix: str, policy: str
) -> None:
    gpus = TOPOLOGIES[topology].gpus
    settings = {"topology": topology, "gpus": gpus, "requests": 16, "load": 1.5, "slo_scale": 3.0}
    arrivals = stream(f"gen:{mix}:3", settings)
    pricing = gpu_pricing(TOPOLOGIES[topology])
    source = RANDOM if policy == "random" else TARGET.baselines()[policy]
    served = serve(arrivals, gpus, pricing, _compiled(source), np.zeros(0), 1e9)
    busy: list[tuple[float, float, set[int]]] = []
    for s in served.starts:
        request = arrivals[s.request].request
        assert s.at >= arrivals[s.request].arrival_s
        assert s.plan in set(plans(request, s.plan.gpus, pricing))  # valid: xDiT's rules and memory
        assert s.plan.gpus == compact_group(pricing.topology, s.plan.gpus, len(s.plan.gpus))
        for start, end, group in busy:
            assert not (start <= s.at < end and group & set(s.plan.gpus)), "a GPU was given twice"
        busy.append((s.at, s.at + s.predicted_s, set(s.plan.gpus)))
    assert sorted(s.request for s in served.starts) == list(range(len(arrivals)))


def test_a_policy_that_always_waits_still_serves_everyone_one_at_a_time() -> None:
    settings = {"topology": "h100-nvlink", "gpus": 8, "requests": 10, "load": 2.0, "slo_scale": 3.0}
    arrivals = stream("gen:images:1", settings)
    wait = _compiled("def score(o, p):\n    return -1.0\n")
    served = serve(arrivals, 8, gpu_pricing(TOPOLOGIES["h100-nvlink"]), wait, np.zeros(0), 1e9)
    assert not np.isnan(served.finish).any()
    intervals = sorted((s.at, s.at + s.predicted_s) for s in served.starts)
    assert all(b[0] >= a[1] - 1e-9 for a, b in itertools.pairwise(intervals))


def test_metrics_count_a_late_request_as_missed() -> None:
    flux = Request(MODELS["flux.1-dev"], 1024, 1024, 1, 28)
    arrivals = [Arrival(flux, 0.0, 100.0), Arrival(flux, 0.0, 0.01)]
    first = _compiled("def score(o, p):\n    return 1.0e6 - o.arrival - o.gpus\n")
    served = serve(arrivals, 1, gpu_pricing(TOPOLOGIES["h100-nvlink"]), first, np.zeros(0), 1e9)
    metrics = serving_metrics(served)
    assert metrics["slo_attainment"] == 0.5
    assert metrics["gpu_utilization"] == pytest.approx(1.0)


def test_a_trace_round_trips_and_bad_lines_are_named(tmp_path: Path) -> None:
    settings = {"topology": "h100-nvlink", "gpus": 8, "requests": 5, "load": 1.0, "slo_scale": 3.0}
    arrivals = stream("gen:mixed:2", settings)
    path = tmp_path / "trace.jsonl"
    write_trace(arrivals, str(path))
    assert load_trace(str(path)) == arrivals
    row = {"arrival_s": 0, "model": "flux.1-dev", "height": 1000, "width": 1024, "frames": 1, "steps": 28,
           "deadline_s": 5}  # fmt: skip
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(WorkloadError, match=r"trace.jsonl:1: flux.1-dev: 1000x1024 does not patch evenly"):
        load_trace(str(path))
    path.write_text(json.dumps({**row, "height": 1024, "model": "sora"}) + "\n")
    with pytest.raises(WorkloadError, match=r"trace\.jsonl:1: unknown model 'sora'"):
        load_trace(str(path))


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"topology": "dgx"}, "option topology must be one of"),
        ({"topology": "a100-nvlink", "gpus": 16}, "topology a100-nvlink has 8 GPUs; cannot use 16"),
        ({"load": -1.0}, "option load must lie in"),
    ],
)
def test_bad_options_are_one_line(config: dict[str, object], message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        TARGET.instances("gen:images:0", config)


def test_a_malformed_generator_is_one_line() -> None:
    with pytest.raises(WorkloadError, match="expected gen:<mix>:<seed>"):
        TARGET.instances("gen:videos:x", {})


def test_the_signature_reads_only_registered_features() -> None:
    assert SCORE.features == TARGET.registry("score").names
    with pytest.raises(ValueError, match="nope"):
        check("def score(o, p):\n    return o.nope\n", TARGET.signatures)


def test_the_generator_is_seeded_and_its_deadlines_scale_the_fastest_time_alone() -> None:
    settings = {"topology": "h100-nvlink", "gpus": 8, "requests": 50, "load": 0.8, "slo_scale": 4.0}
    first, again = stream("gen:mixed:7", settings), stream("gen:mixed:7", settings)
    other = stream("gen:mixed:8", settings)
    assert first == again and first != other
    assert first[0].arrival_s == 0.0
    assert all(b.arrival_s >= a.arrival_s for a, b in itertools.pairwise(first))
    pricing = gpu_pricing(TOPOLOGIES["h100-nvlink"])
    for a in first:
        assert a.deadline_s == pytest.approx(4.0 * request_profile(a.request, 8, pricing).alone_s)
    denser = stream("gen:mixed:7", {**settings, "load": 1.6})
    assert denser[-1].arrival_s == pytest.approx(first[-1].arrival_s / 2)


def test_the_served_gpu_time_breaks_down_by_part_over_the_chosen_plans() -> None:
    """What `dit plan --explain` shows per plan, summed over the plans a policy started: the UI shows these
    shares beside every instance's metrics."""
    settings = {"topology": "l40-pcie", "gpus": 8, "requests": 12, "load": 1.0, "slo_scale": 3.0}
    arrivals = stream("gen:mixed:4", settings)
    pricing = gpu_pricing(TOPOLOGIES["l40-pcie"])
    served = serve(arrivals, 8, pricing, _compiled(TARGET.baselines()["all_gpus_fcfs"]), np.zeros(0), 1e9)
    metrics = serving_metrics(served)
    shares = {k: v for k, v in metrics.items() if k.startswith("time_")}
    assert set(shares) == {f"time_{k}" for k in TIME_PARTS}
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(0.0 <= v <= 1.0 for v in shares.values())
    assert shares["time_compute"] > 0.3
    chosen_comm = sum(s.cost.comm_s * s.cost.pipelined_steps * s.plan.degree for s in served.starts)
    spent_communicating = 1 - shares["time_compute"] - shares["time_dispatch"] - shares["time_outside"]
    assert chosen_comm > 0 and spent_communicating > 0, "eight L40s across two sockets communicate"
