"""The simulator's router against a real router process, request by request.

The real router (sglang-router, or a router Crucible exported) runs on 127.0.0.1 in front of recording
backends, and the slice is replayed through it in lockstep with the simulated fleet: before each request is
sent, the fleet is replayed up to that request's arrival following the router's decisions so far, the
backends release exactly the requests it has started and finished by then (and report its engines'
gauges), and the check waits until the router's own counts are the fleet's. No clock is involved: a timed
replay drifts as soon as one decision differs, since every later service time moves with it. Then the
fleet replays the slice following the router, its own router scoring every instance at every arrival: a
decision agrees when the router chose an instance the simulator scored best. Ties are where the two may
differ without either being wrong: the simulator takes the first best instance, the real router whatever
its data structures give.
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
from targets.batching.scheduler import DONE, RUNNING
from targets.trace_files import checked_file

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

_COMMON = (
    Option("requests", "str", "0:500", "the window START:STOP of the trace's requests replayed"),
    Option("instances", "int", 4, "backends behind the router", low=1, high=62),
    Option(
        "ready_s",
        "float",
        90.0,
        "seconds the router may take to start and see every backend",
        low=1.0,
        high=3600.0,
    ),
)
OPTIONS = (
    *_COMMON,
    Option(
        "program",
        "str",
        "",
        "a heuristic file the simulator runs for every policy compared, in place of the baseline that stands "
        "for it (e.g. an older release's rule)",
    ),
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
)
"""`--against sglang-router`'s options."""
EXPORTED = "exported-router"
EXPORTED_OPTIONS = (
    *_COMMON,
    Option(
        "program",
        "str",
        "sglang_cache_aware",
        "the route function exported: a heuristic file, or a baseline's name",
    ),
)
"""`--against exported-router`'s options."""


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


@dataclass(frozen=True)
class RouterUnderTest:
    """A router process as the check drives it: its command line for the backends' URLs and a port, the
    page that says it is ready (the backends' URLs in its own order once it sees them all), whether it
    reads prompts as token ids (else as text, a character a block), whether responses stream, and from a
    page of its own whether its count of requests in flight (and without a first token) is the one
    expected per backend."""

    name: str
    launch: Callable[[list[str], int], list[str]]
    ready_path: str
    order: Callable[[Any], list[str]]
    settled: Callable[[str, dict[str, http_replay.Expected]], bool]
    token_prompts: bool = False
    stream: bool = False
    env: Mapping[str, str] | None = None


def against_sglang_router(target: Any, workload: str, values: Mapping[str, Any]) -> CommandResult:
    """sglang-router replayed against the simulator's baseline for each policy asked."""
    python = _router_python(str(values.get("router_python") or ""))
    cut = _slice(target, workload, values)
    given = str(values.get("program") or "")
    rows = []
    for policy in values["policies"]:
        baseline = SGLANG_POLICIES[policy]
        source = _program_source(target, given) if given else None
        policies = _policies_of(source) if source else _policies(target, baseline)

        def launch(urls: list[str], port: int, policy: str = policy) -> list[str]:
            return [
                python, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
                "--prometheus-port", str(http_replay.free_port()), "--worker-urls", *urls,
                "--policy", policy, "--log-level", "warn",
            ]  # fmt: skip

        def settled(url: str, expected: dict[str, http_replay.Expected], policy: str = policy) -> bool:
            if policy not in COUNTS_LOAD:
                return True
            loads = _loads(httpx.get(url + "/workers", timeout=5))
            return all(loads.get(u) == e.in_flight for u, e in expected.items())

        router = RouterUnderTest(policy, launch, "/workers", _workers, settled)
        shown = Path(given).stem if given else baseline
        rows.append(compare(cut, router, shown, policies, float(values["ready_s"])))
    return _result(f"sglang-router {SGLANG_ROUTER_VERSION} against the simulator", rows, REQUIRED)


def against_exported_router(target: Any, workload: str, values: Mapping[str, Any]) -> CommandResult:
    """The program exported as a router (`crucible export --to router`), run with uvicorn, against the
    simulator running the same program."""
    given = str(values["program"])
    source = _program_source(target, given)
    name = given if given in target.baselines() else Path(given).stem
    cut = _slice(target, workload, values)
    with tempfile.TemporaryDirectory(prefix="crucible-export-") as folder:
        module = _export(target, source, given, folder)

        def launch(urls: list[str], port: int) -> list[str]:
            return [
                sys.executable, "-m", "uvicorn", f"{module}:app", "--app-dir", folder,
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
            ]  # fmt: skip

        def settled(url: str, expected: dict[str, http_replay.Expected]) -> bool:
            shown = httpx.get(url + "/router/status", timeout=5).json()["backends"]
            return all(_sees(b, expected[b["url"]]) for b in shown)

        def order(response: Any) -> list[str]:
            shown = response.json()["backends"] if response.status_code == 200 else []
            return [b["url"] for b in shown if b["healthy"]]

        env = {"CRUCIBLE_HEALTH_S": "0.01"}  # it reads the backends' metrics as often as the replay needs
        router = RouterUnderTest("exported", launch, "/router/status", order, settled, True, True, env)
        policies = _policies_of(source)
        return _result(
            "Crucible's exported router against the simulator",
            [compare(cut, router, name, policies, float(values["ready_s"]))],
            {},
        )


def compare(
    cut: Slice, router: RouterUnderTest, baseline: str, policies: Policies, ready_s: float
) -> Agreement:
    """One router process against `policies` in the simulated fleet, in lockstep: before each request is
    sent, the backends release the first token of, and answer, exactly the requests the simulated fleet,
    following the router's decisions so far, has started and finished by that request's arrival."""
    n = len(cut.prompts)
    arrival = cut.requests.arrival_s
    prompts = _token_prompts(cut) if router.token_prompts else cut.prompts
    with (
        tempfile.TemporaryDirectory(prefix="crucible-router-") as folder,
        http_replay.RecordingBackends(cut.fleet.instances) as backends,
    ):
        port = http_replay.free_port()
        url = f"http://127.0.0.1:{port}"
        workers: list[str] = []

        def ready(response: Any) -> bool:
            workers[:] = router.order(response)
            return len(workers) >= cut.fleet.instances

        def due(r: int, sent: dict[int, int]) -> http_replay.Due:
            follow = np.full(n, -1, dtype=np.int64)
            follow[:r] = [instance[sent[q]] for q in range(r)]
            replayed = _replay(cut, policies, follow, stop_before=r) if r else None  # as r meets it
            gauges = _gauges(cut, replayed, follow[:r])
            by_backend = {backend: gauges[i] for backend, i in instance.items()}
            if replayed is None:
                return http_replay.Due([], [], by_backend)
            first, finish = replayed.served.first_token[:r], replayed.served.finish[:r]
            return http_replay.Due(
                np.flatnonzero(first <= arrival[r]).tolist(),
                np.flatnonzero(finish <= arrival[r]).tolist(),
                by_backend,
            )

        log = str(Path(folder) / "router.log")
        env = {"CRUCIBLE_BACKENDS": ",".join(backends.urls), **(router.env or {})}
        with http_replay.process(
            router.launch(backends.urls, port), url + router.ready_path, ready, log, ready_s, env
        ):
            instance = {backends.urls.index(u): i for i, u in enumerate(workers)}  # the router's own order

            def settled(expected: dict[str, http_replay.Expected]) -> bool:
                return router.settled(url, expected)

            sent = http_replay.lockstep(url, prompts, REPLAY_PATH, backends, due, settled, router.stream)
    routed = np.array([instance[sent[r]] for r in range(n)], dtype=np.int64)
    alone = _replay(cut, policies)
    followed = _replay(cut, policies, routed)
    chosen = (followed.best >> routed) & 1
    lowest = followed.best & -followed.best
    return Agreement(
        policy=router.name,
        baseline=baseline,
        requests=n,
        agreed=float(chosen.mean()),
        exact=float(np.mean(lowest == (1 << routed))),
        ties=float(np.mean([bin(int(b) & (2**64 - 1)).count("1") > 1 for b in followed.best])),
        hit_rate_router=fleet_metrics(followed, cut.slo, cut.fleet.instances)["hit_rate"],
        hit_rate_simulator=fleet_metrics(alone, cut.slo, cut.fleet.instances)["hit_rate"],
    )


def _gauges(cut: Slice, replayed: Replayed | None, routed: np.ndarray) -> list[tuple[float, float, float]]:
    """Each instance's running and waiting requests and KV use in the simulated fleet when it stopped:
    what a real engine's /metrics would report then."""
    n_instances = cut.fleet.instances
    if replayed is None:
        return [(0.0, 0.0, 0.0)] * n_instances
    status = replayed.served.status[: routed.size]
    live = status != DONE
    gauges = []
    for i in range(n_instances):
        here = live & (routed == i)
        running = float(np.sum(here & (status == RUNNING)))
        gauges.append(
            (running, float(here.sum()) - running, float(replayed.held[i]) / cut.fleet.limits.kv_blocks)
        )
    return gauges


def _sees(shown: Mapping[str, Any], expected: http_replay.Expected) -> bool:
    """Whether the exported router's status of a backend is what it should see."""
    metrics = shown.get("metrics", {})
    gauges = (metrics.get("running"), metrics.get("waiting"), metrics.get("kv"))
    counts = (shown["in_flight"], shown["prefilling"])
    return counts == (expected.in_flight, expected.prefilling) and gauges == expected.gauges


def _program_source(target: Any, given: str) -> str:
    """A baseline's source by name, or a heuristic file's, checked; OptionError, one line, if neither."""
    from verifiers.static import StaticError, check

    source = target.baselines().get(given)
    if source is None:
        checked_file(Path(given), "heuristic file")  # a device or a FIFO would never end
        try:
            source = Path(given).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            raise OptionError(
                f"option program: {given}: neither a readable heuristic file nor a baseline"
            ) from None
    try:
        check(source, target.signatures)
    except StaticError as exc:
        raise OptionError(f"option program: {given}: {exc}") from None
    return source


def _token_prompts(cut: Slice) -> list[list[int]]:
    """Each prompt as token ids, as long as the trace says, each block's tokens one id (the block's)."""
    offsets, blocks = cut.prefixes.offsets, cut.prefixes.blocks
    block_tokens = cut.fleet.limits.block_tokens
    prompts = []
    for r in range(len(cut.prompts)):
        ids = blocks[offsets[r] : offsets[r + 1]]
        left = int(cut.requests.prompt_tokens[r])
        tokens: list[int] = []
        for k, b in enumerate(ids):
            size = left if k == len(ids) - 1 else min(block_tokens, left)
            tokens += [int(b) + 1] * max(size, 0)
            left -= size
        prompts.append(tokens or [0])
    return prompts


def _export(target: Any, source: str, origin: str, folder: str) -> str:
    """The program written as a router module into the folder; its module name."""
    from targets.export import ExportError
    from verifiers.static import StaticError, check

    name = "crucible_checked_router"
    export = target.exports()["router"]
    try:
        program = check(source, target.signatures)
        text = export.render(program, name, origin, {})
    except (StaticError, ExportError) as exc:
        raise OptionError(f"option program: {exc}") from None
    (Path(folder) / f"{name}.py").write_text(text, encoding="utf-8")
    return name


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
    from .target import BUILTIN, DEFAULT_SOURCE, compiled_keys

    if baseline in BUILTIN:
        route, schedule, evict = compiled_keys(DEFAULT_SOURCE)
        empty = np.zeros(0)
        return Policies(route, empty, schedule, empty, evict, empty, BUILTIN[baseline])
    return _policies_of(target.baselines()[baseline])


def _policies_of(source: str) -> Policies:
    """A program's three keys as the fleet runs them, with its PARAMS' values."""
    from verifiers.compiler import param_vector
    from verifiers.static import check

    from .target import SIGNATURES, compiled_keys

    values = param_vector(check(source, SIGNATURES), {})
    route, schedule, evict = compiled_keys(source)
    return Policies(route, values, schedule, values, evict, values)


def _replay(
    cut: Slice, policies: Policies, follow: np.ndarray | None = None, stop_before: int = -1
) -> Replayed:
    """The slice through the fleet, following `follow` where it names an instance, to its end or to just
    before request `stop_before` arrives."""
    return replay(
        cut.requests,
        cut.prefixes,
        cut.fleet,
        policies,
        cut.pricing,
        cut.slo,
        cut.horizon_s,
        follow=follow,
        stop_before=stop_before,
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
