"""CPU seconds of every bench's `--quick`, cold: numba's cache empty, so each compiles its kernels anew.

    python bench/quick_modes.py [--quick] [--record]

Each bench's quick mode runs in a fresh process with NUMBA_CACHE_DIR pointing at an empty folder, then once
more over the cache that run left (warm); its CPU time (user + system, its own and its children's) cold is
printed beside its wall time and as a ratio to its CPU time warm: the share compiling takes. CPU time, not
wall time, so that a loaded machine does not fail the aim: every quick mode under 20 s of CPU, cold (issue
51). bench/llm_local.py is left out:
its quick mode waits minutes on a real model by design. `--quick` measures two benches only.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _bench

AIM_S = 20.0
"""Every quick mode under this many CPU seconds with numba's cache empty (issue 51)."""
LEFT_OUT = {"llm_local.py", "quick_modes.py"}
"""A real model's answers (minutes by design), and this bench itself."""
QUICK = ("startup.py", "dit_plan_speed.py")


def cpu_s(argv: list[str], cache: str) -> tuple[float, float, int]:
    """CPU seconds (user + system, children included) and wall seconds of `argv` with numba's cache in
    `cache`, and its exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    done = subprocess.run(argv, env=env, cwd=_bench.ROOT, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _, session = _bench.start(parser)
    here = Path(__file__).resolve().parent
    names = sorted(p.name for p in here.glob("*.py") if not p.name.startswith("_") and p.name not in LEFT_OUT)
    if session.quick:
        names = [n for n in names if n in QUICK]
    print(f"load average at the start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'bench --quick':<28} {'cold CPU s':>10} {'wall s':>7} {'warm CPU s':>10} {'x warm':>7}")
    rows = []
    for name in names:
        argv = [sys.executable, str(here / name), "--quick"]
        with tempfile.TemporaryDirectory() as cache:
            cpu, wall, status = cpu_s(argv, cache)
            warm, _, _ = cpu_s(argv, cache)
        said = "" if status == 0 else f"  exited {status}"
        print(f"{name:<28} {cpu:10.1f} {wall:7.1f} {warm:10.1f} {cpu / warm:7.1f}{said}")
        rows.append({"bench": name, "cpu_s": cpu, "wall_s": wall, "warm_cpu_s": warm, "exit": status})
    over = [r["bench"] for r in rows if r["cpu_s"] >= AIM_S or r["exit"] != 0]
    verdict = "met" if not over else f"NOT met by {', '.join(over)}"
    print(f"aim: every quick mode under {AIM_S:g} s of CPU, cold: {verdict}")
    session.save({"aim_cpu_s": AIM_S, "benches": rows})


if __name__ == "__main__":
    main()
