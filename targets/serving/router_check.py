"""The simulator's router against a real router process, request by request.

The real router (sglang-router, or a router Crucible exported) runs on 127.0.0.1 in front of recording
backends, each holding a request as long as the simulated fleet took to serve it, so the router's count of
requests in flight follows the simulated fleet's. The slice is replayed in real time, compressed to a few
seconds. Then the fleet replays the slice again following the router's decisions, its own router scoring
every instance at every arrival: a decision agrees when the router chose an instance the simulator scored
best. Following keeps the two in the same state; a free-running comparison would count every decision
after the first difference as another. Ties are where the two may differ without either being wrong: the
simulator takes the first best instance, the real router whatever its data structures give.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from targets.base import CommandResult, Instance, Option, OptionError, request_window

from . import http_replay
from .fleet import Policies, Replayed, replay
from .metrics import fleet_metrics

SGLANG_ROUTER = "sglang-router"
SGLANG_ROUTER_VERSION = "0.3.2"
SGLANG_POLICIES = {"cache_aware": "sglang_cache_aware", "round_robin": "round_robin"}
"""sglang-router's policies that decide from what they see (not at random), and the simulator's baseline
that stands for each."""
COUNTS_LOAD = ("cache_aware",)
"""The policies under which sglang-router 0.3.2 counts a worker's requests in flight (its load guard):
before each request the check waits until the router's counts are the simulated fleet's."""
PYTHON_ENV = "CRUCIBLE_SGLANG_ROUTER_PYTHON"
REPLAY_PATH = "/v1/completions"
"""The OpenAI endpoint: sglang-router 0.3.2 counts a request there as load on its worker while it is in
flight; of SGLang's native /generate it counts none, so its cache-aware policy sees every worker idle."""

OPTIONS = (
    Option("requests", "str", "0:500", "the window START:STOP of the trace's requests replayed"),
    Option("instances", "int", 4, "backends behind the router", low=1, high=62),
    Option(
        "policies",
        "list",
        tuple(SGLANG_POLICIES),
        "the router's policies compared",
        choices=tuple(SGLANG_POLICIES),
    ),
    Option(
        "router_python",
        "str",
        "",
        f"a Python that has sglang_router {SGLANG_ROUTER_VERSION} (default: ${PYTHON_ENV}, else this one)",
    ),
    Option(
        "ready_s",
        "float",
        90.0,
        "seconds the router may take to start and see every backend",
        low=1.0,
        high=3600.0,
    ),
)


@dataclass(frozen=True)
class Slice:
    """What both routers see: the fleet and its prices, the loaded requests and their prompts as text."""

    requests: Any
    prefixes: Any
    fleet: Any
    pricing: Any
    slo: tuple[float, float]
    horizon_s: float
    prompts: list[str]


@dataclass(frozen=True)
class Agreement:
    """One policy's decisions, the real router's against the simulator's, on the same stream."""

    policy: str
    baseline: str
    requests: int
    agreed: float
    """Share of decisions where the router chose an instance the simulator scored best."""
    exact: float
    """Share where it chose the very instance the simulator chose (the first best)."""
    ties: float
    """Share where the simulator scored several instances best."""
    hit_rate_router: float
    """The fleet's prefix hit rate routed as the real router routed."""
    hit_rate_simulator: float
    """The fleet's prefix hit rate routed by the simulator's own router."""

    def row(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "baseline": self.baseline,
            "requests": self.requests,
            "agreed": round(self.agreed, 4),
            "exact": round(self.exact, 4),
            "ties": round(self.ties, 4),
            "hit_rate_router": round(self.hit_rate_router, 4),
            "hit_rate_simulator": round(self.hit_rate_simulator, 4),
        }


REQUIRED = {"cache_aware": 0.9, "round_robin": 1.0}
"""The share of decisions that must agree for the simulator's baseline to stand for the router's policy."""


def against_sglang_router(target: Any, workload: str, values: Mapping[str, Any]) -> CommandResult:
    """sglang-router replayed against the simulator's baseline for each policy asked."""
    python = _router_python(str(values.get("router_python") or ""))
    cut = _slice(target, workload, values)
    rows = []
    for policy in values["policies"]:
        baseline = SGLANG_POLICIES[policy]

        def launch(urls: list[str], port: int, policy: str = policy) -> list[str]:
            return [
                python, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
                "--prometheus-port", str(http_replay.free_port()), "--worker-urls", *urls,
                "--policy", policy, "--log-level", "warn",
            ]  # fmt: skip

        policies = _policies(target, baseline)
        counts_load = policy in COUNTS_LOAD
        rows.append(compare(cut, policy, baseline, policies, launch, float(values["ready_s"]), counts_load))
    return _result(f"sglang-router {SGLANG_ROUTER_VERSION} against the simulator", rows, REQUIRED)


def compare(
    cut: Slice,
    policy: str,
    baseline: str,
    policies: Policies,
    launch: Callable[[list[str], int], list[str]],
    ready_s: float,
    counts_load: bool,
) -> Agreement:
    """One router process (its command line from `launch(backend urls, port)`) against `policies`, in
    lockstep: before each request is sent, the backends answer exactly the requests the simulated fleet,
    following the router's decisions so far, has finished by that request's arrival."""
    n = len(cut.prompts)
    arrival = cut.requests.arrival_s
    with (
        tempfile.TemporaryDirectory(prefix="crucible-router-") as folder,
        http_replay.RecordingBackends(cut.fleet.instances) as backends,
    ):
        port = http_replay.free_port()
        url = f"http://127.0.0.1:{port}"
        workers: list[str] = []

        def ready(response: Any) -> bool:
            workers[:] = _workers(response)
            return len(workers) >= cut.fleet.instances

        def due(r: int, sent: dict[int, int]) -> list[int]:
            if r == 0:
                return []
            follow = np.full(n, -1, dtype=np.int64)
            follow[:r] = [instance[sent[q]] for q in range(r)]
            finish = _replay(cut, policies, follow, float(arrival[r])).served.finish[:r]
            return np.flatnonzero(finish <= arrival[r]).tolist()

        def settled(in_flight: dict[str, int]) -> bool:
            if not counts_load:
                return True
            loads = _loads(httpx.get(url + "/workers", timeout=5))
            return all(loads.get(u) == k for u, k in in_flight.items())

        log = str(Path(folder) / "router.log")
        with http_replay.process(launch(backends.urls, port), url + "/workers", ready, log, ready_s):
            instance = {backends.urls.index(u): i for i, u in enumerate(workers)}  # the router's own order
            sent = http_replay.lockstep(url, cut.prompts, REPLAY_PATH, backends, due, settled)
    routed = np.array([instance[sent[r]] for r in range(n)], dtype=np.int64)
    alone = _replay(cut, policies)
    followed = _replay(cut, policies, routed)
    chosen = (followed.best >> routed) & 1
    lowest = followed.best & -followed.best
    return Agreement(
        policy=policy,
        baseline=baseline,
        requests=n,
        agreed=float(chosen.mean()),
        exact=float(np.mean(lowest == (1 << routed))),
        ties=float(np.mean([bin(int(b) & (2**64 - 1)).count("1") > 1 for b in followed.best])),
        hit_rate_router=fleet_metrics(followed, cut.slo, cut.fleet.instances)["hit_rate"],
        hit_rate_simulator=fleet_metrics(alone, cut.slo, cut.fleet.instances)["hit_rate"],
    )


def _loads(response: Any) -> dict[str, int]:
    """Each worker's requests in flight, as the router's `/workers` counts them."""
    try:
        return {str(w["url"]): int(w["load"]) for w in response.json().get("workers", [])}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def _workers(response: Any) -> list[str]:
    """The URLs of the healthy workers a router's `/workers` lists, in its order: the order it takes them
    in (round robin's, and the first of equals), so the simulator's instance order."""
    if response.status_code != 200:
        return []
    try:
        workers = response.json().get("workers", [])
    except (ValueError, AttributeError):
        return []
    return [str(w.get("url")) for w in workers if w.get("is_healthy", True)]


def _slice(target: Any, workload: str, values: Mapping[str, Any]) -> Slice:
    """The requests window of the workload at the target's defaults, the instances asked."""
    from .target import DEFAULTS, HORIZON_S, _requests, fleet_of
    from .workload import request_count

    start, stop = request_window(str(values["requests"]), request_count(workload))
    config = {**DEFAULTS, "instances": int(values["instances"]), "requests": [start, stop]}
    instance = Instance(workload, config)
    requests, prefixes, _ = _requests(instance)
    fleet, pricing = fleet_of(instance)
    loaded = requests.scaled(float(config["load"]))
    prompts = [
        http_replay.prompt_text(prefixes.blocks[prefixes.offsets[r] : prefixes.offsets[r + 1]])
        for r in range(loaded.n)
    ]
    slo = (float(config["ttft_slo_s"]), float(config["tbt_slo_s"]))
    horizon = float(loaded.arrival_s[-1]) + HORIZON_S
    return Slice(loaded, prefixes, fleet, pricing, slo, horizon, prompts)


def _policies(target: Any, baseline: str) -> Policies:
    """The simulator's baseline as the fleet runs it: a program's three keys, or a built-in router."""
    from verifiers.compiler import param_vector
    from verifiers.static import check

    from .target import BUILTIN, DEFAULT_SOURCE, SIGNATURES, _compiled

    if baseline in BUILTIN:
        route, schedule, evict = _compiled(DEFAULT_SOURCE)
        empty = np.zeros(0)
        return Policies(route, empty, schedule, empty, evict, empty, BUILTIN[baseline])
    source = target.baselines()[baseline]
    values = param_vector(check(source, SIGNATURES), {})
    route, schedule, evict = _compiled(source)
    return Policies(route, values, schedule, values, evict, values)


def _replay(
    cut: Slice, policies: Policies, follow: np.ndarray | None = None, until: float = -1.0
) -> Replayed:
    """The slice through the fleet, following `follow` where it names an instance, up to `until` seconds
    (the whole slice if negative)."""
    horizon = until if until >= 0 else cut.horizon_s
    return replay(
        cut.requests, cut.prefixes, cut.fleet, policies, cut.pricing, cut.slo, horizon, follow=follow
    )


def _router_python(given: str) -> str:
    """The Python that runs sglang-router: as given, else $CRUCIBLE_SGLANG_ROUTER_PYTHON, else this one;
    OptionError, one line, where it has no sglang_router."""
    python = given or os.environ.get(PYTHON_ENV, "") or sys.executable
    try:
        found = subprocess.run(
            [python, "-c", "import sglang_router.version as v; print(v.__version__)"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError as exc:
        raise OptionError(f"option router_python: {python}: {exc.strerror}") from None
    if found.returncode != 0:
        raise OptionError(
            f"{python} has no sglang_router: pip install sglang-router=={SGLANG_ROUTER_VERSION} (its own "
            f"environment: bash .ci/engines), then --router-python PYTHON or ${PYTHON_ENV}"
        )
    return python


def _result(title: str, agreements: list[Agreement], required: Mapping[str, float]) -> CommandResult:
    checks = [
        {
            "name": f"{a.policy} agreed",
            "value": a.agreed,
            "bound": f">= {required[a.policy]:g}",
            "passed": a.agreed >= required[a.policy],
        }
        for a in agreements
        if a.policy in required
    ]
    rows = [a.row() for a in agreements]
    columns = (
        "policy",
        "baseline",
        "requests",
        "agreed",
        "exact",
        "ties",
        "hit_rate_router",
        "hit_rate_simulator",
    )
    return CommandResult(title, columns, rows, {"policies": rows, "checks": checks})
