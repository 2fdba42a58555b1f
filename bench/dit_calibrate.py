"""Fit the DiT cost model's constants on the calibration half of targets/dit/measurements.toml and print
them as targets/dit/pricing.py's CALIBRATION holds them (3 significant digits).

    python bench/dit_calibrate.py           # the fit, and the shipped constants beside it

The fit takes about a second, so `--quick` runs it whole too.
"""

from __future__ import annotations

import argparse
import time

import _bench

from targets.dit.fidelity import calibrate
from targets.dit.pricing import CALIBRATION


def main() -> None:
    _, session = _bench.start(argparse.ArgumentParser(description=__doc__))
    start = time.perf_counter()
    fitted = calibrate()
    print(f"fitted on the calibration half in {time.perf_counter() - start:.1f} s (shipped in brackets)")
    print(f"block_overhead_s     {fitted.block_overhead_s:.3g}  ({CALIBRATION.block_overhead_s:.3g})")
    print(f"ring_step_overhead_s {fitted.ring_step_overhead_s:.3g}  ({CALIBRATION.ring_step_overhead_s:.3g})")
    rows = []
    for gpu, value in fitted.efficiency.items():
        shipped = CALIBRATION.efficiency.get(gpu, float("nan"))
        print(f"efficiency {gpu:18s} {value:.3g}  ({shipped:.3g})")
        rows.append({"gpu": gpu, "fitted": value, "shipped": shipped})
    session.save(
        {
            "block_overhead_s": fitted.block_overhead_s,
            "ring_step_overhead_s": fitted.ring_step_overhead_s,
            "efficiency": rows,
        }
    )


if __name__ == "__main__":
    main()
