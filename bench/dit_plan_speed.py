"""Planning time per request: the exhaustive planner (every valid plan priced, the fastest kept) over a grid
of models x sizes x GPU counts x topologies, printed per request and as a median; the cost model is warm
(profiles loaded) after the first request, as in a running planner.

    .venv/bin/python bench/dit_plan_speed.py [--quick] [--record]

`--quick`: the first model at its default size, on 1 and 4 GPUs of one topology.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import _bench

from targets.dit.cost import ranked
from targets.dit.models import MODELS
from targets.dit.plans import Request
from targets.dit.pricing import gpu_pricing
from targets.dit.topology import TOPOLOGIES


def main() -> None:
    _, session = _bench.start(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    models, sizes, counts = list(MODELS), ("default", "large"), (1, 4, 8, 16)
    topologies = ("h100-nvlink", "l40-pcie", "h100-nvlink-x2")
    if session.quick:
        models, sizes, counts, topologies = models[:1], sizes[:1], (1, 4), topologies[:1]
    grid = [
        (name, size, gpus, topology)
        for name in models
        for size in sizes
        for gpus in counts
        for topology in topologies
        if gpus <= TOPOLOGIES[topology].gpus
    ]
    gpu_pricing(TOPOLOGIES["h100-nvlink"])  # load the profile once, outside the timings
    times, counts, rows = [], [], []
    print(f"{'model':14} {'size':16} {'gpus':>4} {'topology':15} {'plans':>5} {'ms':>8}  best")
    for name, size, gpus, topology in grid:
        m = MODELS[name]
        height, width, frames, steps = m.default
        if size == "large":
            height, width = 2 * height, 2 * width
        request = Request(m, height, width, frames if m.video else 1, steps)
        pricing = gpu_pricing(TOPOLOGIES[topology])
        start = time.perf_counter()
        costs = ranked(request, range(gpus), pricing)
        elapsed = (time.perf_counter() - start) * 1e3
        times.append(elapsed)
        counts.append(len(costs))
        best = costs[0].plan.label if costs else "(none fits)"
        shown = f"{height}x{width}" + (f"x{frames}f" if m.video else "")
        print(f"{name:14} {shown:16} {gpus:>4} {topology:15} {len(costs):>5} {elapsed:8.2f}  {best}")
        rows.append(
            {
                "model": name,
                "size": shown,
                "gpus": gpus,
                "topology": topology,
                "plans": len(costs),
                "ms": elapsed,
                "best": best,
            }
        )
    median, worst = statistics.median(times), max(times)
    print(f"\n{len(times)} requests: median {median:.2f} ms, max {worst:.2f} ms per request", end="; ")
    print(f"median {statistics.median(counts)} plans priced each; load average {os.getloadavg()[0]:.1f}")
    summary = {
        "requests": len(times),
        "median ms": median,
        "max ms": worst,
        "median plans": statistics.median(counts),
    }
    session.save({"summary": [summary], "requests": rows})


if __name__ == "__main__":
    main()
